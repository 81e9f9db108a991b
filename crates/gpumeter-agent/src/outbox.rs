//! The durable on-disk outbox of event batches.
