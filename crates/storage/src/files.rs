//! Names and headers of the files in a data directory.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
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

/// Creates segment `seq` with its header, `prealloc` bytes of disk space reserved for it,
/// and returns it open for appending.
///
/// The file is completed under a temporary name, synced and only then renamed into place:
/// a segment that exists under its own name always has its header, so a newest segment
/// found shorter than that was cut, not interrupted while being made.
pub(crate) fn create_segment(dir: &Path, seq: u64, prealloc: u64) -> io::Result<File> {
    let path = segment_path(dir, seq);
    let tmp = path.with_extension("log.tmp");
    let made = (|| {
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&tmp)?;
        file.write_all(&header(SEGMENT_MAGIC, seq))?;
        preallocate(
            &file,
            HEADER_LEN as u64,
            prealloc.saturating_sub(HEADER_LEN as u64),
        )?;
        file.sync_all()?;
        fs::rename(&tmp, &path)?;
        sync_dir(dir)?;
        Ok(file)
    })();
    if made.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    made
}

/// Reserves disk blocks for `len` bytes from `offset` without changing the file's size,
/// so appends into them cannot fail for lack of space. A file system that cannot
/// preallocate (`EOPNOTSUPP`) is not an error: it just gives no such promise.
pub(crate) fn preallocate(file: &File, offset: u64, len: u64) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    // SAFETY: fallocate on a descriptor `file` owns for the whole call; no memory is shared.
    let rc = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_KEEP_SIZE,
            offset as libc::off_t,
            len as libc::off_t,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => Ok(()),
        _ => Err(e),
    }
}

/// Gives back the blocks reserved past the end of a file that will not grow any more.
/// Zeros written ahead of the records (`always` mode) are cut off as well.
pub(crate) fn release_preallocation(file: &File, len: u64, reserved_to: u64) {
    if file.metadata().is_ok_and(|m| m.len() > len) {
        // Failure only leaves a zero tail, which recovery reads as the end of the records.
        let _ = file.set_len(len);
    }
    if reserved_to <= len {
        return;
    }
    // SAFETY: as in `preallocate`. Failure only leaves the blocks reserved.
    unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            len as libc::off_t,
            (reserved_to - len) as libc::off_t,
        );
    }
}

/// Bytes an unprivileged writer may still allocate on the file system holding `dir`.
pub(crate) fn free_bytes(dir: &Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
    // SAFETY: statvfs fills the zeroed struct we pass; the path is a valid C string.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut st) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
    }
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
