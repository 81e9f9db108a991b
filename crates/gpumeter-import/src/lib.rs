//! Importers (placeholder until written).
