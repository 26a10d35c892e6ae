//! Timing syncs, and stopping when one fails.

use std::io;
use std::time::Instant;

use crate::stats::sync_stats;

/// Runs a sync, counting the time it took.
pub(crate) fn timed(sync: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
    let started = Instant::now();
    let r = sync();
    sync_stats().synced(started.elapsed());
    r
}

/// Runs a sync, or ends the process if that fails.
///
/// After a failed fsync the kernel may have dropped the dirty pages and a second fsync can
/// report success for data that never reached the disk, so retrying would acknowledge jobs
/// that are not stored. Stopping is the only honest answer: nothing in the failed batch was
/// acknowledged, and the next start recovers exactly what the disk holds.
pub(crate) fn sync_or_die(sync: impl FnOnce() -> io::Result<()>) {
    let started = Instant::now();
    if let Err(e) = sync() {
        fsync_failed(&e);
    }
    sync_stats().synced(started.elapsed());
}

/// Stops the process after a failed sync (exit code 75); see [`sync_or_die`].
pub(crate) fn fsync_failed(e: &io::Error) -> ! {
    tracing::error!(
        "fsync of the log failed: {e}; stopping so that nothing unsynced is acknowledged \
         (restart to recover what is on disk)"
    );
    eprintln!("jobyard: fsync failed: {e}");
    std::process::exit(75);
}
