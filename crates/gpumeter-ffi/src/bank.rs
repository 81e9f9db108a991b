//! bank (placeholder)
