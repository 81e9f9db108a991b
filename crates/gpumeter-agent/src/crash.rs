//! Named crash points for the agent's crash tests (`docs/AGENT.md`, "Restart").
//!
//! `GPUMETER_AGENT_CRASH_AT=<point>:<n>` makes the process abort (no destructor, no flush, as
//! a SIGKILL would leave it) the `n`th time it reaches `<point>`. Unset (always, in
//! production), a point costs one relaxed atomic load. The points are the instants between two
//! durable steps:
//!
//! | point | after | before |
//! |---|---|---|
//! | `pending-saved` | the checkpoint names the set being closed | its report is written |
//! | `report-written` | the set's report files | its events are stored |
//! | `events-stored` | the set's events in every outbox | the checkpoint moves past the set |
//! | `checkpoint-temp` | a checkpoint's temporary file, synced | its rename |
//! | `retire-saved` | the checkpoint names a retired recording | the recording is moved |
//! | `request-acknowledged` | a receiver answered 2xx | the outbox records it |

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The environment variable that arms a crash point.
pub const CRASH_AT_ENV: &str = "GPUMETER_AGENT_CRASH_AT";

static ARMED: OnceLock<Option<(String, u64)>> = OnceLock::new();
static HITS: AtomicU64 = AtomicU64::new(0);

/// Aborts the process when `point` is the armed one and this is its `n`th hit.
pub fn point(point: &str) {
    let armed = ARMED.get_or_init(|| {
        let v = std::env::var(CRASH_AT_ENV).ok()?;
        let (name, n) = v.rsplit_once(':')?;
        Some((name.to_string(), n.parse().ok()?))
    });
    if let Some((name, n)) = armed {
        if name == point && HITS.fetch_add(1, Ordering::SeqCst) + 1 == *n {
            tracing::error!(point, "crash point reached: aborting ({CRASH_AT_ENV})");
            std::process::abort();
        }
    }
}
