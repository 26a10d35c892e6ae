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
//! places (in the snapshot) before the old files are forgotten here. Bodies read in the
//! order they were written are read ahead ([`crate::read_ahead`]).

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use crate::files::{classify, DataFile};
use crate::read_ahead::ReadAhead;
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
    /// How far the file is known written: read-ahead never reads past it. The segment
    /// being written grows it as places are published; complete files are readable whole.
    readable: u64,
}

/// Places the engine has not taken yet: bodies just written, and bodies compaction moved.
#[derive(Default)]
pub struct Located {
    /// Bodies whose records were written: the engine may drop its copy.
    pub written: Vec<(JobId, LogRef)>,
    /// Bodies compaction copied into a snapshot: the engine must use these places from
    /// now on, since the files the old places point into are about to be let go.
    pub moved: Vec<(JobId, LogRef)>,
}

impl Located {
    pub fn is_empty(&self) -> bool {
        self.written.is_empty() && self.moved.is_empty()
    }
}

/// The files bodies can be read from, and the places of bodies written since the engine
/// last asked.
#[derive(Default)]
pub(crate) struct BodyFiles {
    files: Mutex<Vec<Registered>>,
    next_index: AtomicU32,
    located: Mutex<Located>,
    /// Files older than this are let go at the engine's next turn ([`Self::take_located`]).
    forget_before: Mutex<Option<u64>>,
    any_located: AtomicBool,
    ahead: Mutex<ReadAhead>,
}

/// Entries (16 bytes each) of a list of places kept for the next write: a usual write's
/// fit; the list of an unusually large one is let go.
pub(crate) const KEEP_PLACES: usize = 16 << 10;

/// Indices above this do not fit a [`LogRef`]'s 48-bit position (with 32 bits of offset):
/// bodies of later files simply stay in memory.
const MAX_INDEX: u32 = (LogRef::MAX_POS >> 32) as u32;

impl BodyFiles {
    /// Files recovery read, file number `n` as index `n` (recovery's body places use
    /// those numbers). A file that cannot be opened keeps its number, unreadable.
    pub fn recovered(paths: &[PathBuf]) -> BodyFiles {
        let files = BodyFiles::default();
        for path in paths {
            files.register_complete(key_of(path), path);
        }
        files
    }

    /// Opens a file that is being written (a new segment) for reading bodies; returns its
    /// index, or `None` when the indices ran out or the file cannot be opened (its bodies
    /// then stay in memory).
    pub fn register(&self, key: FileKey, path: &Path) -> Option<u32> {
        self.register_at(key, path, 0)
    }

    /// The same for a file nothing writes to any more (recovered, or a snapshot).
    pub fn register_complete(&self, key: FileKey, path: &Path) -> Option<u32> {
        self.register_at(key, path, u64::MAX)
    }

    fn register_at(&self, key: FileKey, path: &Path, readable: u64) -> Option<u32> {
        let index = self.next_index.fetch_add(1, Ordering::Relaxed);
        if index > MAX_INDEX {
            return None;
        }
        let file = Arc::new(File::open(path).ok()?);
        let mut files = self.files.lock().expect("body files lock");
        files.push(Registered {
            key,
            index,
            file,
            readable,
        });
        Some(index)
    }

    /// Forgets every file older than `seq` (compaction replaced them with snapshot `seq`)
    /// at the engine's next turn, which takes the bodies' new places first: a turn in
    /// progress may still read a body at its old place, and the open file keeps it readable
    /// after compaction deletes it. Readers that already took one keep it open until done.
    pub fn forget_older_than(&self, seq: u64) {
        let mut pending = self.forget_before.lock().expect("forget lock");
        *pending = Some(pending.map_or(seq, |s| s.max(seq)));
        self.any_located.store(true, Ordering::Release);
    }

    fn forget_now(&self, seq: u64) {
        let mut gone = Vec::new();
        self.files.lock().expect("body files lock").retain(|f| {
            let keep = f.key.seq >= seq;
            if !keep {
                gone.push(f.index);
            }
            keep
        });
        // After the files: a reader can no longer fill a window of a file let go.
        self.ahead.lock().expect("read-ahead lock").forget(&gone);
    }

    /// Bodies read back so far, and the `pread`s that read them.
    pub fn read_stats(&self) -> (u64, u64) {
        let ahead = self.ahead.lock().expect("read-ahead lock");
        (ahead.bodies, ahead.preads)
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
        // Before any reader can learn these places: a body's bytes are known written.
        self.written_up_to(found);
        let mut located = self.located.lock().expect("located lock");
        if located.written.is_empty() {
            // The engine took the last ones: hand over this buffer rather than copy it.
            std::mem::swap(&mut located.written, found);
        } else {
            located.written.append(found);
        }
        self.any_located.store(true, Ordering::Release);
    }

    /// Takes back the emptied `written` list of places the engine took (in
    /// [`Self::take_located`]), for [`Self::publish`] to swap with the writer's next list.
    /// Two lists then go round between the writer and the engine and no write allocates
    /// or frees one: a list of a few kilobytes freed each write made glibc's malloc sweep
    /// the bodies freed just before out of its fast bins (docs/performance.md, the put
    /// cost). A list given back while newer places wait is let go.
    pub fn give_back(&self, mut spent: Vec<(JobId, LogRef)>) {
        spent.clear();
        let mut located = self.located.lock().expect("located lock");
        let room = located.written.capacity();
        if located.written.is_empty() && room < spent.capacity() && spent.capacity() <= KEEP_PLACES
        {
            std::mem::swap(&mut located.written, &mut spent);
        }
    }

    /// Hands the places of bodies compaction copied to the engine's next turn.
    pub fn publish_moved(&self, found: &mut Vec<(JobId, LogRef)>) {
        if found.is_empty() {
            return;
        }
        let mut located = self.located.lock().expect("located lock");
        located.moved.append(found);
        self.any_located.store(true, Ordering::Release);
    }

    /// Raises each file's readable end to the end of the last body found in it.
    fn written_up_to(&self, found: &[(JobId, LogRef)]) {
        let mut ends: Vec<(u32, u64)> = Vec::new();
        for (_, at) in found {
            let (index, offset) = split(*at);
            let end = offset + at.len() as u64;
            match ends.iter_mut().find(|(i, _)| *i == index) {
                Some((_, e)) => *e = (*e).max(end),
                None => ends.push((index, end)),
            }
        }
        let mut files = self.files.lock().expect("body files lock");
        for (index, end) in ends {
            if let Some(f) = files.iter_mut().find(|f| f.index == index) {
                f.readable = f.readable.max(end);
            }
        }
    }

    /// The places published since the last call (one atomic load when there are none).
    pub fn take_located(&self) -> Located {
        if !self.any_located.load(Ordering::Acquire) {
            return Located::default();
        }
        // Before the places: compaction publishes the places it moved before it asks to
        // forget the old files, so those places are among the ones taken below.
        let forget = self.forget_before.lock().expect("forget lock").take();
        let mut located = self.located.lock().expect("located lock");
        self.any_located.store(false, Ordering::Release);
        let taken = std::mem::take(&mut *located);
        drop(located);
        // The caller applies `taken.moved` before any read of its turn.
        if let Some(seq) = forget {
            self.forget_now(seq);
        }
        if self.forget_before.lock().expect("forget lock").is_some() {
            self.any_located.store(true, Ordering::Release);
        }
        taken
    }

    /// Reads a body back: from a window read ahead, or with a `pread` (see
    /// [`crate::read_ahead`]).
    pub fn read(&self, at: LogRef) -> io::Result<Vec<u8>> {
        let (index, offset) = split(at);
        let len = at.len() as usize;
        let mut ahead = self.ahead.lock().expect("read-ahead lock");
        if let Some(body) = ahead.hit(index, offset, len) {
            return Ok(body);
        }
        let (file, readable) = self.file(index)?;
        ahead.miss(&file, index, offset, len, readable)
    }

    /// File `index` and how far it is known written.
    fn file(&self, index: u32) -> io::Result<(Arc<File>, u64)> {
        let files = self.files.lock().expect("body files lock");
        files
            .iter()
            .find(|f| f.index == index)
            .map(|f| (f.file.clone(), f.readable))
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("the log file holding this body (index {index}) is gone"),
                )
            })
    }
}

/// A place's file index and offset.
fn split(at: LogRef) -> (u32, u64) {
    ((at.pos() >> 32) as u32, at.pos() & u32::MAX as u64)
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
