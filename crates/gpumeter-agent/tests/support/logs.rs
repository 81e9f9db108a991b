//! The agent's log lines, kept for the test's thread: `let (logs, _guard) = Logs::start();`,
//! then `logs.warned(file, what)`.
//!
//! Include it with `#[path = "support/logs.rs"] mod logs;`.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

/// The log lines written while the guard of [`Logs::start`] lives.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("logs").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

impl Logs {
    /// Starts keeping the log lines of this thread (until the guard drops).
    pub fn start() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(logs.clone())
            .with_ansi(false)
            .finish();
        (logs.clone(), tracing::subscriber::set_default(subscriber))
    }

    /// Every line so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("logs")).into_owned()
    }

    /// Warning lines that name `file` and say `what` (`""`: any).
    pub fn warned(&self, file: &str, what: &str) -> usize {
        self.text()
            .lines()
            .filter(|l| l.contains("WARN") && l.contains(file) && l.contains(what))
            .count()
    }
}
