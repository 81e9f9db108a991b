//! Rating (placeholder until written).
