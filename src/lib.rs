//! gpumeter facade (placeholder).
