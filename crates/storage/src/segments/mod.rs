//! The log's first backend: segment files in the data directory (`seg-N.log`, sealed once
//! their successor exists) and snapshot files (`snap-N.snap`). docs/storage.md describes
//! the files; [`crate::log`] the machinery that writes them.

mod segment;
mod snapshot_file;

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use jobyard_engine::Change;

use crate::bodies::{BodyFiles, FileKey};
use crate::files::{free_bytes, list, preallocate, release_preallocation, segment_path, DataFile};
use crate::log::{is_no_space, BatchStart, LogBackend, LogOptions, NO_ROOM_MESSAGE};
use segment::{seal_previous, Segment};
use snapshot_file::SnapshotFile;

/// The data directory's segment and snapshot files, and the bodies read back from them.
pub(crate) struct SegmentFiles {
    dir: PathBuf,
    options: LogOptions,
    /// Set with [`LogOptions::bodies_in_log`].
    bodies: Option<BodyFiles>,
}

impl SegmentFiles {
    /// Makes segment `first_segment` (sealing the one before it), and registers the files
    /// recovery read (`recovered`) for reading bodies. Returns the files, the new segment,
    /// and whether the disk is too full for new jobs: a full disk still starts, with the
    /// segment's header only, so reads and deletes work while new jobs wait for room.
    pub fn open(
        dir: &Path,
        first_segment: u64,
        options: &LogOptions,
        recovered: &[PathBuf],
    ) -> io::Result<(SegmentFiles, Segment, bool)> {
        let (mut segment, full) = match Segment::create_reserving(dir, first_segment, options) {
            Ok(segment) => (segment, false),
            Err(e) if is_no_space(&e) => (Segment::create(dir, first_segment, 0)?, true),
            Err(e) => return Err(e),
        };
        if full {
            tracing::warn!("{}", NO_ROOM_MESSAGE);
        }
        if first_segment > 1 {
            seal_previous(dir, first_segment - 1, options.preallocated());
        }
        let files = SegmentFiles {
            dir: dir.to_path_buf(),
            options: options.clone(),
            bodies: options
                .bodies_in_log
                .then(|| BodyFiles::recovered(recovered)),
        };
        segment.body_index = files.register(&segment);
        Ok((files, segment, full))
    }

    /// Makes a segment readable for bodies when they are kept in the log.
    fn register(&self, segment: &Segment) -> Option<u32> {
        let key = FileKey {
            seq: segment.seq,
            snapshot: false,
        };
        let bodies = self.bodies.as_ref()?;
        bodies.register(key, &segment_path(&self.dir, segment.seq))
    }
}

impl LogBackend for SegmentFiles {
    type Writer = Segment;
    type Flush = File;
    type Snapshot = SnapshotFile;

    /// Reserves space so that, after `more` bytes are appended, the reserve is still free
    /// in the current segment (plus an extension, so this is not needed at every batch).
    fn make_room(&self, segment: &mut Segment, more: u64) -> io::Result<()> {
        let needed = segment.len + more + self.options.reserve_bytes();
        if needed <= segment.reserved_to {
            return Ok(());
        }
        let want = needed + self.options.extension();
        let from = segment.reserved_to;
        preallocate(&segment.file, from, want - from)?;
        segment.reserved_to = want;
        Ok(())
    }

    fn write(&self, segment: &mut Segment, data: &[u8]) -> io::Result<Option<BatchStart>> {
        let end = segment.len + data.len() as u64;
        if end > segment.reserved_to {
            // Past the reserve (records that add no jobs used it all, or a batch larger
            // than it): written anyway, the file system may still find the blocks.
            let from = segment.reserved_to;
            if preallocate(&segment.file, from, end - from).is_ok() {
                segment.reserved_to = end;
            }
        }
        let start = segment.body_index.map(|file| BatchStart {
            file,
            offset: segment.len,
        });
        segment.write(data)?;
        Ok(start)
    }

    fn sync(&self, segment: &mut Segment) -> io::Result<()> {
        segment.file.sync_data()
    }

    fn flush_handle(&self, segment: &Segment) -> Option<File> {
        segment.file.try_clone().ok()
    }

    fn sync_detached(&self, file: &File) -> io::Result<()> {
        file.sync_data()
    }

    /// Asks the kernel to start writing the file's dirty pages, without waiting for them
    /// and without any promise (`never` mode promises nothing). It keeps the dirty backlog
    /// small, so the fsync that closes a segment, which holds the writer lock and so every
    /// writing connection, is short: without it, 64 MB of dirty log made that fsync a
    /// 40–60 ms stall.
    fn start_writeback(&self, file: &File) {
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is owned by `file` for the whole call; the call only
        // schedules I/O and touches no memory of ours.
        unsafe {
            libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
        }
    }

    fn rotation_due(&self, segment: &Segment) -> bool {
        segment.len >= self.options.segment_bytes
    }

    /// Starts the next segment: made (with its space reserved) before the current one is
    /// sealed, so a crash in between leaves two whole segments. Nothing changes on failure.
    fn rotate(&self, current: &mut Segment) -> io::Result<u64> {
        let next = current.seq + 1;
        // Only the newest segment may end in zeros (recovery reads zeros anywhere else as
        // damage), so they go, durably, before a successor exists.
        let zero_ahead = current.zero_ahead;
        current.stop_zero_ahead();
        let mut segment = match Segment::create_reserving(&self.dir, next, &self.options) {
            Ok(segment) => segment,
            Err(e) => {
                current.zero_ahead = zero_ahead;
                return Err(e);
            }
        };
        segment.body_index = self.register(&segment);
        let mut old = std::mem::replace(current, segment);
        old.seal(next);
        Ok(next)
    }

    fn close(&self, segment: &mut Segment) {
        release_preallocation(&segment.file, segment.len, segment.reserved_to);
    }

    /// One comparison for a usual job; a job too large for the reserve to absorb also asks
    /// the file system for its free space.
    fn has_room_for(&self, bytes: usize) -> bool {
        let reserve = self.options.reserve_bytes();
        if (bytes as u64) < (reserve / 4).min(1 << 20) {
            return true;
        }
        free_bytes(&self.dir).map_or(true, |free| free >= bytes as u64 + reserve)
    }

    fn oldest_section(&self) -> u64 {
        list(&self.dir)
            .ok()
            .and_then(|files| {
                files.iter().find_map(|(k, _)| match k {
                    DataFile::Segment(n) | DataFile::Snapshot(n) => Some(*n),
                    DataFile::Temp => None,
                })
            })
            .unwrap_or(0)
    }

    fn bodies(&self) -> Option<&BodyFiles> {
        self.bodies.as_ref()
    }

    fn begin_snapshot(&self, seq: u64, next_id: u64) -> io::Result<SnapshotFile> {
        SnapshotFile::create(&self.dir, seq, next_id, self.bodies.is_some())
    }

    fn add_to_snapshot(&self, snapshot: &mut SnapshotFile, jobs: &[Change]) -> io::Result<()> {
        snapshot.add(jobs)
    }

    fn complete_snapshot(&self, snapshot: SnapshotFile) -> io::Result<u64> {
        snapshot.complete(&self.dir, self.bodies.as_ref())
    }

    fn drop_covered(&self, seq: u64) -> io::Result<()> {
        snapshot_file::drop_covered(&self.dir, seq, self.bodies.as_ref())
    }
}
