//! Start-up: rebuild the engine from the newest snapshot and the segments after it.

use std::fs::{self, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use jobyard_engine::Change;

use crate::codec::{decode_change, read_frame, Frame, FRAME_HEADER, MAX_PAYLOAD};
use crate::files::{
    list, sync_dir, DataFile, HEADER_LEN, SEGMENT_MAGIC, SNAPSHOT_END, SNAPSHOT_MAGIC,
};

/// Why the log could not be read.
#[derive(Debug)]
pub enum RecoveryError {
    Io(PathBuf, io::Error),
    /// Damage that is not a cut-off tail: the operator must decide (see `--salvage`).
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
}

impl std::fmt::Display for RecoveryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecoveryError::Io(path, e) => write!(f, "cannot read {}: {e}", path.display()),
            RecoveryError::Corrupt {
                path,
                offset,
                reason,
            } => write!(
                f,
                "corrupt record in {} at offset {offset}: {reason} \
                 (start with --salvage to skip unreadable records and keep the rest)",
                path.display()
            ),
        }
    }
}

impl std::error::Error for RecoveryError {}

/// What recovery found and did.
#[derive(Debug, Default)]
pub struct RecoveryReport {
    /// The sequence number the next segment must have.
    pub next_segment: u64,
    /// The snapshot that recovery started from, if any.
    pub snapshot: Option<u64>,
    /// Records applied (snapshot and segments).
    pub records: u64,
    /// Ids continue at least from here (the snapshot remembers ids of deleted jobs).
    pub next_id: u64,
    /// A cut-off tail that was dropped: file, offset, bytes dropped.
    pub torn_tail: Option<(PathBuf, u64, u64)>,
    /// Damage skipped because salvaging was asked for: file, offset, bytes skipped.
    pub salvaged: Vec<(PathBuf, u64, u64)>,
}

/// Reads the data directory and hands every change, in order, to `apply`.
///
/// A frame cut off at the end of the newest segment is a crash in the middle of a write
/// whose reply was never sent: it is dropped and the file truncated. Any other damage is a
/// [`RecoveryError::Corrupt`], unless `salvage` is set, in which case unreadable bytes are
/// skipped up to the next readable record and reported.
pub fn recover(
    dir: &Path,
    salvage: bool,
    mut apply: impl FnMut(Change),
) -> Result<RecoveryReport, RecoveryError> {
    let io_err = |p: &Path| {
        let p = p.to_path_buf();
        move |e| RecoveryError::Io(p, e)
    };
    let files = list(dir).map_err(io_err(dir))?;
    let mut report = RecoveryReport {
        next_segment: 1,
        next_id: 1,
        ..Default::default()
    };
    for (kind, path) in &files {
        if *kind == DataFile::Temp {
            fs::remove_file(path).map_err(io_err(path))?;
        }
    }
    let snapshots: Vec<(u64, &PathBuf)> = files
        .iter()
        .filter_map(|(k, p)| match k {
            DataFile::Snapshot(n) => Some((*n, p)),
            _ => None,
        })
        .collect();
    let mut start = 0;
    if let Some(&(seq, path)) = snapshots.last() {
        read_snapshot(path, seq, salvage, &mut report, &mut apply)?;
        report.snapshot = Some(seq);
        report.next_segment = seq;
        start = seq;
    }
    let segments: Vec<(u64, &PathBuf)> = files
        .iter()
        .filter_map(|(k, p)| match k {
            DataFile::Segment(n) if *n >= start => Some((*n, p)),
            _ => None,
        })
        .collect();
    for (i, &(seq, path)) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        read_segment(path, seq, last, salvage, &mut report, &mut apply)?;
        report.next_segment = seq + 1;
    }
    // Files older than the snapshot are obsolete: a crash after the snapshot was made and
    // before they were deleted leaves them behind.
    for (kind, path) in &files {
        let obsolete = match kind {
            DataFile::Segment(n) => *n < start,
            DataFile::Snapshot(n) => *n < start,
            DataFile::Temp => false,
        };
        if obsolete {
            fs::remove_file(path).map_err(io_err(path))?;
        }
    }
    sync_dir(dir).map_err(io_err(dir))?;
    Ok(report)
}

fn read_snapshot(
    path: &Path,
    seq: u64,
    salvage: bool,
    report: &mut RecoveryReport,
    apply: &mut impl FnMut(Change),
) -> Result<(), RecoveryError> {
    let data = fs::read(path).map_err(|e| RecoveryError::Io(path.to_path_buf(), e))?;
    let corrupt = |offset: usize, reason: &str| RecoveryError::Corrupt {
        path: path.to_path_buf(),
        offset: offset as u64,
        reason: reason.to_string(),
    };
    let head = HEADER_LEN + 8;
    let tail = SNAPSHOT_END.len() + 8;
    if data.len() < head + tail || &data[..8] != SNAPSHOT_MAGIC || data[8..16] != seq.to_le_bytes()
    {
        return Err(corrupt(0, "bad snapshot header"));
    }
    let end = data.len() - tail;
    if &data[end..end + 8] != SNAPSHOT_END {
        return Err(corrupt(end, "snapshot has no end marker"));
    }
    let next_id = u64::from_le_bytes(data[16..24].try_into().expect("8 bytes"));
    report.next_id = report.next_id.max(next_id);
    read_frames(path, &data[..end], head, false, salvage, report, apply)?;
    Ok(())
}

fn read_segment(
    path: &Path,
    seq: u64,
    last: bool,
    salvage: bool,
    report: &mut RecoveryReport,
    apply: &mut impl FnMut(Change),
) -> Result<(), RecoveryError> {
    let data = fs::read(path).map_err(|e| RecoveryError::Io(path.to_path_buf(), e))?;
    if data.len() < HEADER_LEN && last {
        // Created but its header never made it: nothing was acknowledged from it.
        report.torn_tail = Some((path.to_path_buf(), 0, data.len() as u64));
        fs::remove_file(path).map_err(|e| RecoveryError::Io(path.to_path_buf(), e))?;
        return Ok(());
    }
    if data.len() < HEADER_LEN || &data[..8] != SEGMENT_MAGIC || data[8..16] != seq.to_le_bytes() {
        return Err(RecoveryError::Corrupt {
            path: path.to_path_buf(),
            offset: 0,
            reason: "bad segment header".into(),
        });
    }
    let good_end = read_frames(path, &data, HEADER_LEN, last, salvage, report, apply)?;
    if good_end < data.len() {
        let dropped = (data.len() - good_end) as u64;
        report.torn_tail = Some((path.to_path_buf(), good_end as u64, dropped));
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| RecoveryError::Io(path.to_path_buf(), e))?;
        file.set_len(good_end as u64)
            .and_then(|_| file.sync_all())
            .map_err(|e| RecoveryError::Io(path.to_path_buf(), e))?;
    }
    Ok(())
}

/// Applies the frames of `data` from `offset`. Returns where the readable data ends, which
/// is before the end only for a torn tail (when `tail_may_tear`).
fn read_frames(
    path: &Path,
    data: &[u8],
    mut offset: usize,
    tail_may_tear: bool,
    salvage: bool,
    report: &mut RecoveryReport,
    apply: &mut impl FnMut(Change),
) -> Result<usize, RecoveryError> {
    while offset < data.len() {
        let damage = match read_frame(&data[offset..]) {
            Frame::Good(payload, size) => match decode_change(payload) {
                Ok(change) => {
                    apply(change);
                    report.records += 1;
                    offset += size;
                    continue;
                }
                Err(e) => e.to_string(),
            },
            Frame::Incomplete => "record runs past the end of the file".to_string(),
            Frame::Bad => "bad length or checksum".to_string(),
        };
        let next_good = find_next_frame(data, offset + 1);
        if tail_may_tear && next_good.is_none() {
            return Ok(offset);
        }
        if !salvage {
            return Err(RecoveryError::Corrupt {
                path: path.to_path_buf(),
                offset: offset as u64,
                reason: damage,
            });
        }
        let resume = next_good.unwrap_or(data.len());
        report
            .salvaged
            .push((path.to_path_buf(), offset as u64, (resume - offset) as u64));
        offset = resume;
    }
    Ok(offset)
}

/// The first offset at or after `from` where a whole, checksummed, decodable frame starts.
fn find_next_frame(data: &[u8], from: usize) -> Option<usize> {
    (from..data.len().saturating_sub(FRAME_HEADER)).find(|&at| {
        // The fields are checked before the checksum (the same frames pass either way).
        // Checksum first made this scan cost, at each offset whose length field happened
        // to fit, a CRC over up to the rest of the file: a torn multi-megabyte record of
        // random-looking bytes took minutes to hours to recover (cubic in its size). A
        // failed decode costs O(1), and random bytes almost never decode.
        let rest = &data[at..];
        let len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
        len > 0
            && len <= MAX_PAYLOAD
            && FRAME_HEADER + len <= rest.len()
            && decode_change(&rest[FRAME_HEADER..FRAME_HEADER + len]).is_ok()
            && matches!(read_frame(rest), Frame::Good(..))
    })
}
