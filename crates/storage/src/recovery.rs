//! Start-up: rebuild the engine from the newest snapshot and the segments after it.

use std::fs::{self, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use jobyard_engine::Change;

use crate::codec::{
    decode_change, decode_segment_end, read_frame, Frame, FRAME_HEADER, MAX_PAYLOAD,
};
use crate::files::{
    list, segment_path, snapshot_path, sync_dir, DataFile, HEADER_LEN, SEGMENT_MAGIC, SNAPSHOT_END,
    SNAPSHOT_MAGIC,
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
    /// Files the log needs are not there (removed, or lost with a file system): starting
    /// without them would silently lose or resurrect jobs.
    Missing {
        files: Vec<PathBuf>,
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
            RecoveryError::Missing { files, reason } => {
                let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
                write!(
                    f,
                    "log files are missing: {} ({reason}); the jobs they held would be lost \
                     (restore them, or start with --salvage to start from what is left)",
                    names.join(", ")
                )
            }
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
    /// Files the log needed that were not there, started without because salvaging was
    /// asked for. The caller should snapshot at once, so the next start does not need them.
    pub missing: Vec<PathBuf>,
    /// The files read, in order: a body place's file number indexes this list (see
    /// [`recover_placed`]).
    pub files: Vec<PathBuf>,
}

/// Where a recovered `Put`'s body is: (number of the file in [`RecoveryReport::files`],
/// offset of the body in that file).
pub type BodyPlace = (u32, u64);

/// Reads the data directory and hands every change, in order, to `apply`.
///
/// A frame cut off at the end of the newest segment is a crash in the middle of a write
/// whose reply was never sent: it is dropped and the file truncated. Zeros after its last
/// record are space filled ahead of the records (`always` mode): cut, and not reported.
/// Any other damage is a [`RecoveryError::Corrupt`], and a file the log needs that is not
/// there (a gap in the segments, the snapshot they start from, a successor a segment names)
/// is a [`RecoveryError::Missing`], unless `salvage` is set, in which case what cannot be
/// read is skipped and reported.
pub fn recover(
    dir: &Path,
    salvage: bool,
    mut apply: impl FnMut(Change),
) -> Result<RecoveryReport, RecoveryError> {
    recover_placed(dir, salvage, |change, _| apply(change))
}

/// [`recover`], also telling `apply` where each `Put`'s body is in the files, so a caller
/// that keeps bodies only in the log need not keep them in memory.
pub fn recover_placed(
    dir: &Path,
    salvage: bool,
    mut apply: impl FnMut(Change, Option<BodyPlace>),
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
    let start = snapshots.last().map_or(0, |&(seq, _)| seq);
    let segments: Vec<(u64, &PathBuf)> = files
        .iter()
        .filter_map(|(k, p)| match k {
            DataFile::Segment(n) if *n >= start => Some((*n, p)),
            _ => None,
        })
        .collect();
    check_complete(dir, start, &segments, salvage, &mut report)?;
    if let Some(&(seq, path)) = snapshots.last() {
        read_snapshot(path, seq, salvage, &mut report, &mut apply)?;
        report.snapshot = Some(seq);
        report.next_segment = seq;
    }
    // Whether the segment being read must have been whole once: named as its successor by
    // the segment before it, or the first (made whole before any snapshot or record).
    let mut named = true;
    for (i, &(seq, path)) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        let read = read_segment(path, seq, last, named, salvage, &mut report, &mut apply)?;
        report.next_segment = if read.removed { seq } else { seq + 1 };
        named = read.successor.is_some();
        if let Some(next) = read.successor.filter(|_| last) {
            let file = segment_path(dir, next);
            if !salvage {
                return Err(RecoveryError::Missing {
                    files: vec![file],
                    reason: format!("{} ends by naming it as the next segment", path.display()),
                });
            }
            report.missing.push(file);
        }
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

/// Checks that the segments run without a gap from where the snapshot starts (or from
/// the first segment ever, 1, without a snapshot) to the newest.
fn check_complete(
    dir: &Path,
    snapshot: u64,
    segments: &[(u64, &PathBuf)],
    salvage: bool,
    report: &mut RecoveryReport,
) -> Result<(), RecoveryError> {
    let mut missing = Vec::new();
    let mut reason = String::new();
    let first = segments.first().map(|&(n, _)| n);
    if snapshot > 0 {
        // The snapshot's own segment was made (and synced) before the snapshot was.
        let upto = first.unwrap_or(snapshot + 1);
        missing.extend((snapshot..upto).map(|n| segment_path(dir, n)));
        if !missing.is_empty() {
            reason = format!(
                "recovery starts at snapshot {} and needs every segment from {snapshot} on",
                snapshot_path(dir, snapshot).display()
            );
        }
    } else if let Some(first) = first.filter(|&n| n > 1) {
        // Segments before `first` are deleted only once a snapshot replaces them.
        missing.push(snapshot_path(dir, first));
        reason = format!(
            "the oldest segment is {}, so the snapshot of everything before it must exist",
            segment_path(dir, first).display()
        );
    }
    for pair in segments.windows(2) {
        let (a, b) = (pair[0].0, pair[1].0);
        if b > a + 1 {
            missing.extend((a + 1..b).map(|n| segment_path(dir, n)));
            if reason.is_empty() {
                reason = "segments must follow each other without a gap".into();
            }
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    if !salvage {
        return Err(RecoveryError::Missing {
            files: missing,
            reason,
        });
    }
    report.missing.extend(missing);
    Ok(())
}

fn read_snapshot(
    path: &Path,
    seq: u64,
    salvage: bool,
    report: &mut RecoveryReport,
    apply: &mut impl FnMut(Change, Option<BodyPlace>),
) -> Result<(), RecoveryError> {
    let data = fs::read(path).map_err(|e| RecoveryError::Io(path.to_path_buf(), e))?;
    let corrupt = |offset: usize, reason: &str| RecoveryError::Corrupt {
        path: path.to_path_buf(),
        offset: offset as u64,
        reason: reason.to_string(),
    };
    let head = HEADER_LEN + 8;
    let tail = SNAPSHOT_END.len() + 8;
    let header_ok =
        data.len() >= head && &data[..8] == SNAPSHOT_MAGIC && data[8..16] == seq.to_le_bytes();
    let end = data.len().saturating_sub(tail);
    let end_ok = data.len() >= head + tail && &data[end..end + 8] == SNAPSHOT_END;
    if !salvage {
        if !header_ok || data.len() < head + tail {
            return Err(corrupt(0, "bad snapshot header"));
        }
        if !end_ok {
            return Err(corrupt(end, "snapshot has no end marker"));
        }
    }
    let from = head.min(data.len());
    if header_ok {
        let next_id = u64::from_le_bytes(data[16..24].try_into().expect("8 bytes"));
        report.next_id = report.next_id.max(next_id);
    } else {
        // Salvaging: the header is skipped, ids continue above every job read.
        report.salvaged.push((path.to_path_buf(), 0, from as u64));
    }
    let until = if end_ok {
        end
    } else {
        // Salvaging a snapshot cut short: read whatever whole records it still has.
        data.len()
    };
    let file = register_file(report, path);
    let read_to = read_frames(
        path,
        file,
        &data[..until],
        from,
        false,
        salvage,
        report,
        apply,
    )?;
    debug_assert_eq!(read_to.good_end, until);
    Ok(())
}

/// What reading a segment found.
struct SegmentRead {
    /// The segment was dropped (never written past creation): the next one reuses its number.
    removed: bool,
    /// The successor the segment names in its end record, if it has one.
    successor: Option<u64>,
}

fn read_segment(
    path: &Path,
    seq: u64,
    last: bool,
    named_by_predecessor: bool,
    salvage: bool,
    report: &mut RecoveryReport,
    apply: &mut impl FnMut(Change, Option<BodyPlace>),
) -> Result<SegmentRead, RecoveryError> {
    let data = fs::read(path).map_err(|e| RecoveryError::Io(path.to_path_buf(), e))?;
    let remove = || {
        fs::remove_file(path).map_err(|e| RecoveryError::Io(path.to_path_buf(), e))?;
        Ok(SegmentRead {
            removed: true,
            successor: None,
        })
    };
    if data.len() < HEADER_LEN && last {
        // Segments are renamed into place only with their header synced, so a short one
        // was cut after it was made, with whatever it held: an error. The exception is a
        // log written by an older version, which created segments in place: a segment
        // its predecessor does not name may have been interrupted while being created.
        if !named_by_predecessor {
            report.torn_tail = Some((path.to_path_buf(), 0, data.len() as u64));
            return remove();
        }
        if !salvage {
            return Err(RecoveryError::Corrupt {
                path: path.to_path_buf(),
                offset: data.len() as u64,
                reason: "the newest segment is shorter than its header: it was cut after it \
                         was made, and what it held is lost"
                    .into(),
            });
        }
        report
            .salvaged
            .push((path.to_path_buf(), 0, data.len() as u64));
        return remove();
    }
    let header_ok =
        data.len() >= HEADER_LEN && &data[..8] == SEGMENT_MAGIC && data[8..16] == seq.to_le_bytes();
    if !header_ok {
        if !salvage {
            return Err(RecoveryError::Corrupt {
                path: path.to_path_buf(),
                offset: 0,
                reason: "bad segment header".into(),
            });
        }
        let skipped = data.len().min(HEADER_LEN) as u64;
        report.salvaged.push((path.to_path_buf(), 0, skipped));
    }
    let from = data.len().min(HEADER_LEN);
    let file = register_file(report, path);
    let read = read_frames(path, file, &data, from, last, salvage, report, apply)?;
    if read.good_end < data.len() {
        let dropped = (data.len() - read.good_end) as u64;
        if !read.zero_tail {
            report.torn_tail = Some((path.to_path_buf(), read.good_end as u64, dropped));
        }
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| RecoveryError::Io(path.to_path_buf(), e))?;
        file.set_len(read.good_end as u64)
            .and_then(|_| file.sync_all())
            .map_err(|e| RecoveryError::Io(path.to_path_buf(), e))?;
    }
    Ok(SegmentRead {
        removed: false,
        successor: read.successor,
    })
}

/// Where the readable frames of a file end, and the successor its end record names.
struct FramesRead {
    good_end: usize,
    successor: Option<u64>,
    /// The data ends in zeros: space the writer filled ahead of its records, not damage.
    zero_tail: bool,
}

/// Adds a file to those bodies can be read back from; returns its number.
fn register_file(report: &mut RecoveryReport, path: &Path) -> u32 {
    report.files.push(path.to_path_buf());
    (report.files.len() - 1) as u32
}

/// Applies every record of `data`, which holds whole records only (a batch or a snapshot
/// chunk kept outside the data directory, as in PostgreSQL): the same decoding and checks
/// as the files', without places for bodies. `name` says where the data came from in
/// errors.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn apply_records(
    name: &Path,
    data: &[u8],
    report: &mut RecoveryReport,
    apply: &mut impl FnMut(Change),
) -> Result<(), RecoveryError> {
    let mut apply_unplaced = |change, _| apply(change);
    read_frames(
        name,
        u32::MAX,
        data,
        0,
        false,
        false,
        report,
        &mut apply_unplaced,
    )?;
    Ok(())
}

/// Applies the frames of `data` from `offset`; the places of bodies are in file number
/// `file`. Returns where the readable data ends, which is before the end only for a torn
/// or zero tail (when `tail_may_tear`).
#[allow(clippy::too_many_arguments)]
fn read_frames(
    path: &Path,
    file: u32,
    data: &[u8],
    mut offset: usize,
    tail_may_tear: bool,
    salvage: bool,
    report: &mut RecoveryReport,
    apply: &mut impl FnMut(Change, Option<BodyPlace>),
) -> Result<FramesRead, RecoveryError> {
    let mut successor = None;
    while offset < data.len() {
        let damage = match read_frame(&data[offset..]) {
            Frame::Good(payload, size) if successor.is_none() => {
                if let Some(next) = decode_segment_end(payload) {
                    successor = Some(next);
                    offset += size;
                    continue;
                }
                match decode_change(payload) {
                    Ok(change) => {
                        let place = match &change {
                            // The body ends the record.
                            Change::Put { body, .. } => {
                                Some((file, (offset + size - body.len()) as u64))
                            }
                            _ => None,
                        };
                        apply(change, place);
                        report.records += 1;
                        offset += size;
                        continue;
                    }
                    Err(e) => e.to_string(),
                }
            }
            Frame::Good(..) => "a record after the segment's end record".to_string(),
            Frame::Incomplete => "record runs past the end of the file".to_string(),
            Frame::Bad => "bad length or checksum".to_string(),
        };
        // In `always` mode the newest segment is zero-filled ahead of its records, so a
        // crash leaves zeros after the last one: nothing was written there (a torn record
        // is not all zeros). Older segments have theirs cut before a successor is made.
        if tail_may_tear && data[offset..].iter().all(|&b| b == 0) {
            return Ok(FramesRead {
                good_end: offset,
                successor,
                zero_tail: true,
            });
        }
        let next_good = find_next_frame(data, offset + 1);
        if tail_may_tear && next_good.is_none() {
            return Ok(FramesRead {
                good_end: offset,
                successor,
                zero_tail: false,
            });
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
    Ok(FramesRead {
        good_end: offset,
        successor,
        zero_tail: false,
    })
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
