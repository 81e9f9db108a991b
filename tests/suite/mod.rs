//! The test modules of `tests/main.rs` (one test binary for the facade).

mod conservation;
mod docs;
mod events;
mod features;
mod golden;
mod gpu_flops;
mod gpu_truth;
mod hostile;
mod house;
mod merge_files;
mod readme;
mod reports;
mod scripts;
mod skips;
mod stream_joins;
mod warning_codes;
