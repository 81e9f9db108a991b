//! Usage events over HTTP: the sender that drains the outbox.
