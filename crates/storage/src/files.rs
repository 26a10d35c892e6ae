//! Names and headers of the files in a data directory.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Each segment starts with this magic and its sequence number (u64 LE).
pub(crate) const SEGMENT_MAGIC: &[u8; 8] = b"JYLOG001";
/// Each snapshot starts with this magic, its sequence number and the next job id.
pub(crate) const SNAPSHOT_MAGIC: &[u8; 8] = b"JYSNAP01";
/// A snapshot is complete only if it ends with this marker followed by its record count.
pub(crate) const SNAPSHOT_END: &[u8; 8] = b"JYSNEND1";
pub(crate) const HEADER_LEN: usize = 16;

pub(crate) fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("seg-{seq:010}.log"))
}

pub(crate) fn snapshot_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("snap-{seq:010}.snap"))
}

/// A file of the data directory that jobyard owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum DataFile {
    Segment(u64),
    Snapshot(u64),
    Temp,
}

pub(crate) fn classify(name: &str) -> Option<DataFile> {
    if name.ends_with(".tmp") {
        return Some(DataFile::Temp);
    }
    let seq = |prefix: &str, suffix: &str| {
        name.strip_prefix(prefix)?
            .strip_suffix(suffix)?
            .parse::<u64>()
            .ok()
    };
    if let Some(n) = seq("seg-", ".log") {
        return Some(DataFile::Segment(n));
    }
    seq("snap-", ".snap").map(DataFile::Snapshot)
}

/// The jobyard files in `dir`, sorted.
pub(crate) fn list(dir: &Path) -> io::Result<Vec<(DataFile, PathBuf)>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if let Some(kind) = name.to_str().and_then(classify) {
            out.push((kind, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// Bytes the log and snapshots take on disk: what compaction keeps in bounds.
pub fn disk_bytes(dir: &Path) -> u64 {
    list(dir)
        .map(|files| {
            files
                .iter()
                .filter_map(|(_, p)| fs::metadata(p).ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Makes a rename or unlink in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

pub(crate) fn header(magic: &[u8; 8], seq: u64) -> [u8; HEADER_LEN] {
    let mut h = [0; HEADER_LEN];
    h[..8].copy_from_slice(magic);
    h[8..].copy_from_slice(&seq.to_le_bytes());
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_classify_back_to_what_made_them() {
        let dir = Path::new("/d");
        let seg = segment_path(dir, 42);
        let snap = snapshot_path(dir, 7);
        let name = |p: &Path| p.file_name().unwrap().to_str().unwrap().to_string();
        assert_eq!(classify(&name(&seg)), Some(DataFile::Segment(42)));
        assert_eq!(classify(&name(&snap)), Some(DataFile::Snapshot(7)));
        assert_eq!(classify("snap-1.snap.tmp"), Some(DataFile::Temp));
        assert_eq!(classify("lock"), None);
        assert_eq!(classify("seg-x.log"), None);
    }
}
