//! Running out of room: new jobs are refused while the backend has none, and records that
//! add no jobs go on into the space it keeps in reserve.

use std::io;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::backend::LogBackend;
use super::state::{Shared, WriterState};
use super::{with_shared, Log};

/// While the disk is full, how often making a new segment is tried again.
pub(crate) const SPACE_PROBE: Duration = Duration::from_millis(250);

/// Logged when the log runs out of room (once per change, not per attempt).
pub(crate) const NO_ROOM_MESSAGE: &str = "the disk has no room for a new log segment: new \
    jobs are refused (OUT_OF_MEMORY / Gearman ERROR) until it has; deletes and other \
    changes of stored jobs go on in the space kept in reserve";

/// Whether an error means the file system is out of space (or of quota), or the backend
/// said it has no room ([`NoRoom`]: PostgreSQL's disk is full).
pub(crate) fn is_no_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
        || e.get_ref().is_some_and(|inner| inner.is::<NoRoom>())
}

/// A backend whose storage is not a local file system (PostgreSQL) is out of room: its
/// message says what is full, and is logged as it is instead of [`NO_ROOM_MESSAGE`].
#[derive(Debug)]
pub(crate) struct NoRoom(pub String);

impl std::fmt::Display for NoRoom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NoRoom {}

#[cfg(feature = "postgres")]
impl NoRoom {
    /// As an I/O error the log's space machinery recognizes ([`is_no_space`]).
    pub(crate) fn into_io(self) -> io::Error {
        io::Error::other(self)
    }
}

/// Records whether the backend has room for new jobs (`problem` is why not), logging
/// only when that changes, and tells producers through [`Log::has_room`].
pub(crate) fn note_space<B: LogBackend>(
    shared: &Shared<B>,
    w: &mut WriterState<B::Writer>,
    problem: Option<&io::Error>,
) {
    let full = problem.is_some();
    if full != w.full {
        match problem {
            Some(e) if e.get_ref().is_some_and(|inner| inner.is::<NoRoom>()) => {
                tracing::warn!("{e}")
            }
            Some(e) if is_no_space(e) => tracing::warn!("{NO_ROOM_MESSAGE} ({e})"),
            Some(e) => tracing::error!(
                "cannot make a new log segment: {e}; new jobs are refused until it can be made"
            ),
            None => tracing::info!("the disk has room for the log again: accepting new jobs"),
        }
        w.full = full;
    }
    let writes_fail = shared.failing.load(Ordering::Relaxed);
    shared
        .accepting
        .store(!w.full && !writes_fail, Ordering::Relaxed);
}

impl Log {
    /// Whether a new job whose record takes about `bytes` may be added now. False while
    /// the disk has no room for a new segment or log writes fail: the caller should refuse
    /// the job (beanstalkd `OUT_OF_MEMORY`, Gearman `ERROR`) rather than add it and leave
    /// its producer waiting. Records that do not add jobs need no such check: they fit in
    /// the space each segment keeps in reserve.
    ///
    /// For a usual job this is one atomic load. A job too large for the reserve to absorb
    /// also asks the file system for its free space.
    pub fn has_room(&self, bytes: usize) -> bool {
        with_shared!(self, shared => {
            if !shared.accepting.load(Ordering::Relaxed) {
                return false;
            }
            shared.backend.has_room_for(bytes)

        })
    }
}
