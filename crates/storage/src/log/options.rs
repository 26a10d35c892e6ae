//! How the log is written: the fsync mode and the segment sizes.

use std::time::Duration;

/// When the log forces data to stable storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsyncMode {
    /// Every write is synced before anything in it is acknowledged.
    Always,
    /// Acknowledge after `write(2)`; sync at most this often. Survives a process crash,
    /// may lose the last interval in a power loss.
    Interval(Duration),
    /// Acknowledge after `write(2)`; the OS decides when to sync.
    Never,
}

/// How the log is written.
#[derive(Clone, Debug)]
pub struct LogOptions {
    /// When records are synced before they are acknowledged.
    pub fsync: FsyncMode,
    /// A segment is closed and a new one started past this size.
    pub segment_bytes: u64,
    /// Report where each durable body was written ([`crate::Log::take_located`]) so the
    /// engine can drop its copy, and read bodies back ([`crate::Log::read_body`]). Off here
    /// by default; the server turns it on unless told otherwise (docs/performance.md).
    pub bodies_in_log: bool,
}

impl LogOptions {
    /// Space kept back at the end of each segment for records that do not add jobs
    /// (deletes, releases, buries, kicks): when no new segment can be made, new jobs are
    /// refused but these still fit, so consumers keep working on a full disk.
    pub fn reserve_bytes(&self) -> u64 {
        (self.segment_bytes / 8).clamp(64 << 10, 8 << 20)
    }

    /// Disk space reserved for a segment when it is created.
    pub(crate) fn preallocated(&self) -> u64 {
        self.segment_bytes + self.reserve_bytes()
    }

    /// How much more is reserved at a time when a segment runs past what it has reserved
    /// (a disk with less room than a whole segment, a batch larger than one).
    pub(crate) fn extension(&self) -> u64 {
        self.reserve_bytes() / 2
    }
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            fsync: FsyncMode::Always,
            segment_bytes: 64 << 20,
            bodies_in_log: false,
        }
    }
}
