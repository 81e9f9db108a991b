//! SIGKILL at any instant, then a restart: the same reports and events as an uninterrupted
//! run, and no event id with two payloads.
