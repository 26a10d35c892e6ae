//! Bodies kept only in the log: where each written body is, and reading it back.
//!
//! Every durable body is in the log anyway, so once its record is written the engine may
//! drop its copy and keep a [`LogRef`] (memory per queued job is a product target; the body
//! is most of it). A reference's position is `file index << 32 | offset`, where the index
//! is given to each file (segment or snapshot) as it is registered here; positions mean
//! nothing across restarts and are never written down.
//!
//! Each registered file is held open through an `Arc`, so a file that compaction deletes
//! stays readable by a reader that already took it; the engine learns the bodies' new
//! places (in the snapshot) before the old files are forgotten here.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::files::{classify, DataFile};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use jobyard_engine::{JobId, LogRef};

/// Which file a registered index stands for, so compaction can forget the old ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileKey {
    pub seq: u64,
    pub snapshot: bool,
}

struct Registered {
    key: FileKey,
    index: u32,
    file: Arc<File>,
}

/// The files bodies can be read from, and the places of bodies written since the engine
/// last asked.
#[derive(Default)]
pub(crate) struct BodyFiles {
    files: Mutex<Vec<Registered>>,
    next_index: AtomicU32,
    located: Mutex<Vec<(JobId, LogRef)>>,
    any_located: AtomicBool,
}

/// Indices above this do not fit a [`LogRef`]'s 48-bit position (with 32 bits of offset):
/// bodies of later files simply stay in memory.
const MAX_INDEX: u32 = (LogRef::MAX_POS >> 32) as u32;

impl BodyFiles {
    /// Files recovery read, file number `n` as index `n` (recovery's body places use
    /// those numbers). A file that cannot be opened keeps its number, unreadable.
    pub fn recovered(paths: &[PathBuf]) -> BodyFiles {
        let files = BodyFiles::default();
        for path in paths {
            files.register(key_of(path), path);
        }
        files
    }

    /// Opens `path` for reading bodies; returns its index, or `None` when the indices ran
    /// out or the file cannot be opened (its bodies then stay in memory).
    pub fn register(&self, key: FileKey, path: &Path) -> Option<u32> {
        let index = self.next_index.fetch_add(1, Ordering::Relaxed);
        if index > MAX_INDEX {
            return None;
        }
        let file = Arc::new(File::open(path).ok()?);
        let mut files = self.files.lock().expect("body files lock");
        files.push(Registered { key, index, file });
        Some(index)
    }

    /// Forgets every file older than `seq` (compaction replaced them with snapshot `seq`).
    /// Readers that already took one keep it open until they are done.
    pub fn forget_older_than(&self, seq: u64) {
        let mut files = self.files.lock().expect("body files lock");
        files.retain(|f| f.key.seq >= seq);
    }

    /// Records that job `id`'s body (`len` bytes) starts at `offset` of file `index`.
    pub fn located_at(
        &self,
        out: &mut Vec<(JobId, LogRef)>,
        id: JobId,
        index: u32,
        offset: u64,
        len: usize,
    ) {
        if offset > u32::MAX as u64 {
            return;
        }
        if let Some(at) = LogRef::new((index as u64) << 32 | offset, len) {
            out.push((id, at));
        }
    }

    /// Hands places found by a write to the engine's next turn.
    pub fn publish(&self, found: &mut Vec<(JobId, LogRef)>) {
        if found.is_empty() {
            return;
        }
        let mut located = self.located.lock().expect("located lock");
        located.append(found);
        self.any_located.store(true, Ordering::Release);
    }

    /// The places published since the last call (one atomic load when there are none).
    pub fn take_located(&self) -> Vec<(JobId, LogRef)> {
        if !self.any_located.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut located = self.located.lock().expect("located lock");
        self.any_located.store(false, Ordering::Release);
        std::mem::take(&mut *located)
    }

    /// Reads a body back with one `pread`.
    pub fn read(&self, at: LogRef) -> io::Result<Vec<u8>> {
        let index = (at.pos() >> 32) as u32;
        let offset = at.pos() & u32::MAX as u64;
        let file = {
            let files = self.files.lock().expect("body files lock");
            files
                .iter()
                .find(|f| f.index == index)
                .map(|f| f.file.clone())
        };
        let file = file.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("the log file holding this body (index {index}) is gone"),
            )
        })?;
        let mut body = vec![0; at.len() as usize];
        file.read_exact_at(&mut body, offset)?;
        Ok(body)
    }
}

/// What a data file's name says it is.
fn key_of(path: &Path) -> FileKey {
    let (seq, snapshot) = match path.file_name().and_then(|n| n.to_str()).and_then(classify) {
        Some(DataFile::Segment(n)) => (n, false),
        Some(DataFile::Snapshot(n)) => (n, true),
        _ => (0, false),
    };
    FileKey { seq, snapshot }
}

/// The reference to a body of `len` bytes at `offset` of body file `index` (for recovery:
/// the file's number in `RecoveryReport::files`), if it fits one.
pub fn body_ref(index: u32, offset: u64, len: usize) -> Option<LogRef> {
    if offset > u32::MAX as u64 {
        return None;
    }
    LogRef::new((index as u64) << 32 | offset, len)
}
