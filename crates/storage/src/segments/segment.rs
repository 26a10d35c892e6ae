//! One segment file being appended to: reserved space, zeros written ahead of the records,
//! and the end record that seals it once its successor exists.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use crate::codec::encode_segment_end;
use crate::files::{create_segment, release_preallocation, segment_path, HEADER_LEN};
use crate::log::{fsync_failed, is_no_space, sync_or_die, FsyncMode, LogOptions};

/// How far ahead of the records a segment synced at every write is filled with zeros.
///
/// Appending past the end of a file makes each `fdatasync` commit the new size (an ext4
/// journal commit) besides the data; overwriting bytes already written flushes only the
/// data. Measured on this machine (docs/performance.md): 150-byte appends + `fdatasync`,
/// p50 151-166 µs into `KEEP_SIZE` preallocation against 111-113 µs into zeros written
/// 256 KiB ahead. The zeros of a
/// chunk go out with the next commit's sync, so the size is committed once per chunk.
const ZERO_AHEAD: u64 = 256 << 10;

/// The segment records are appended to.
pub(crate) struct Segment {
    pub file: File,
    pub seq: u64,
    pub len: u64,
    /// Up to here the file's blocks are reserved: appends below it cannot run out of space.
    pub reserved_to: u64,
    /// Up to here the file holds written bytes (records, then zeros): see [`ZERO_AHEAD`].
    written_to: u64,
    /// Whether to keep zeros ahead of the records (`always` mode, where every write is
    /// synced; elsewhere it would only double the bytes written).
    pub zero_ahead: bool,
    /// The segment's index among the files bodies are read from (`bodies_in_log`).
    pub body_index: Option<u32>,
}

impl Segment {
    /// A new segment with a whole segment's space (and the reserve) reserved, or, on a
    /// disk with less room than that, the reserve and one extension; fails (with nothing
    /// left behind) if not even that fits.
    pub fn create_reserving(dir: &Path, seq: u64, options: &LogOptions) -> io::Result<Segment> {
        let mut made = match Segment::create(dir, seq, options.preallocated()) {
            Err(e) if is_no_space(&e) => {
                let small = options.reserve_bytes() + options.extension();
                Segment::create(dir, seq, small)
            }
            made => made,
        };
        if let Ok(segment) = &mut made {
            segment.zero_ahead = options.fsync == FsyncMode::Always;
        }
        made
    }

    /// A new segment with `prealloc` bytes reserved and nothing written ahead.
    pub fn create(dir: &Path, seq: u64, prealloc: u64) -> io::Result<Segment> {
        let file = create_segment(dir, seq, prealloc)?;
        Ok(Segment {
            file,
            seq,
            len: HEADER_LEN as u64,
            reserved_to: prealloc.max(HEADER_LEN as u64),
            written_to: HEADER_LEN as u64,
            zero_ahead: false,
            body_index: None,
        })
    }

    /// Appends `data`. After a failed write the file is cut back to its last good length,
    /// so a retry never leaves a half record in the middle of the log.
    pub fn write(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        if self.zero_ahead {
            self.fill_ahead(self.len + data.len() as u64);
        }
        match self.file.write_all(data) {
            Ok(()) => {
                self.len += data.len() as u64;
                self.written_to = self.written_to.max(self.len);
                Ok(())
            }
            Err(e) => {
                let _ = self.file.set_len(self.len);
                let _ = std::io::Seek::seek(&mut self.file, io::SeekFrom::Start(self.len));
                self.written_to = self.len;
                Err(e)
            }
        }
    }

    /// Cuts the zeros ahead of the records, synced, and writes none from now on.
    pub fn stop_zero_ahead(&mut self) {
        self.zero_ahead = false;
        if self.written_to > self.len {
            if let Err(e) = self
                .file
                .set_len(self.len)
                .and_then(|_| self.file.sync_all())
            {
                fsync_failed(&e);
            }
            self.written_to = self.len;
        }
    }

    /// Makes sure the file holds written bytes up to `end`, by writing the next chunk of
    /// zeros when the records are about to pass the zeros. Stays within the reserved space,
    /// so it cannot take disk the segment was not given. Best effort: if it fails the
    /// records are appended past the end as before (recovery reads a zero tail as the end
    /// of the records: see `recovery`).
    fn fill_ahead(&mut self, end: u64) {
        use std::os::unix::fs::FileExt;
        if end <= self.written_to {
            return;
        }
        let target = (end + ZERO_AHEAD).min(self.reserved_to);
        let from = self.written_to.max(self.len);
        if target <= end || target <= from {
            return;
        }
        let zeros = vec![0u8; (target - from) as usize];
        if self.file.write_all_at(&zeros, from).is_ok() {
            self.written_to = target;
        }
    }

    /// Closes the segment for good once its successor `next` exists: names it in an end
    /// record (so recovery notices if it goes missing), syncs, and gives back the space
    /// reserved past the end.
    pub fn seal(&mut self, next: u64) {
        let mut end = Vec::with_capacity(32);
        encode_segment_end(next, &mut end);
        // Without the end record recovery merely cannot check for the successor: not
        // worth failing over.
        let _ = self.write(&end);
        sync_or_die(|| self.file.sync_data());
        release_preallocation(&self.file, self.len, self.reserved_to);
    }
}

/// Whether the file of `len` bytes ends with the record naming `next` as its successor.
fn ends_naming(file: &File, len: u64, next: u64) -> bool {
    use std::os::unix::fs::FileExt;
    let mut end = Vec::with_capacity(32);
    encode_segment_end(next, &mut end);
    let mut tail = vec![0; end.len()];
    len >= end.len() as u64
        && file.read_at(&mut tail, len - end.len() as u64).ok() == Some(end.len())
        && tail == end
}

/// Seals the segment the previous run wrote last, now that a successor exists (see
/// [`Segment::seal`]). It was recovered, and torn records cut off, just before.
pub(crate) fn seal_previous(dir: &Path, seq: u64, reserved: u64) {
    let path = segment_path(dir, seq);
    let Ok(file) = OpenOptions::new().read(true).append(true).open(&path) else {
        return;
    };
    let Ok(meta) = file.metadata() else { return };
    if ends_naming(&file, meta.len(), seq + 1) {
        // Already sealed: a salvaged start dropped the segment it named and makes it again.
        return;
    }
    let mut segment = Segment {
        file,
        seq,
        len: meta.len(),
        reserved_to: meta.len() + reserved,
        written_to: meta.len(),
        zero_ahead: false,
        body_index: None,
    };
    segment.seal(seq + 1);
}
