//! Recordings deleted, truncated, replaced or rewritten while the agent reads them.
