//! Snapshot files: `snap-N.snap` written under a temporary name and renamed only once
//! complete and synced, then the segments and snapshots it covers deleted.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use jobyard_engine::Change;

use crate::bodies::{BodyFiles, FileKey};
use crate::codec::encode_change;
use crate::files::{
    header, list, snapshot_path, sync_dir, DataFile, HEADER_LEN, SNAPSHOT_END, SNAPSHOT_MAGIC,
};

/// Encoded records are handed to the file in pieces of about this size.
const CHUNK: usize = 60 << 10;

/// A snapshot being written.
pub(crate) struct SnapshotFile {
    seq: u64,
    out: io::BufWriter<File>,
    /// Dropped after `out`: the file is closed before it is removed.
    tmp: TempFile,
    buf: Vec<u8>,
    /// File offset of `buf`'s first byte.
    flushed: u64,
    jobs: u64,
    /// Where each body went in the file (job, offset, length), when bodies are kept in
    /// the log: they are read from here once the older files are gone.
    copied: Option<Vec<(u64, u64, usize)>>,
}

impl SnapshotFile {
    /// Starts `snap-<seq>.snap.tmp` with its header and the next job id.
    pub fn create(dir: &Path, seq: u64, next_id: u64, bodies: bool) -> io::Result<Self> {
        let tmp = TempFile(snapshot_path(dir, seq).with_extension("snap.tmp"));
        let mut out = io::BufWriter::with_capacity(1 << 20, File::create(&tmp.0)?);
        out.write_all(&header(SNAPSHOT_MAGIC, seq))?;
        out.write_all(&next_id.to_le_bytes())?;
        Ok(SnapshotFile {
            seq,
            out,
            tmp,
            buf: Vec::with_capacity(64 << 10),
            flushed: (HEADER_LEN + 8) as u64,
            jobs: 0,
            copied: bodies.then(Vec::new),
        })
    }

    /// Adds jobs; when bodies are kept in the log, notes where each body went.
    pub fn add(&mut self, jobs: &[Change]) -> io::Result<()> {
        for change in jobs {
            encode_change(change, &mut self.buf);
            if let (Some(copied), Change::Put { id, body, .. }) = (&mut self.copied, change) {
                let at = self.flushed + (self.buf.len() - body.len()) as u64;
                copied.push((*id, at, body.len()));
            }
            if self.buf.len() >= CHUNK {
                self.out.write_all(&self.buf)?;
                self.flushed += self.buf.len() as u64;
                self.buf.clear();
            }
        }
        self.jobs += jobs.len() as u64;
        Ok(())
    }

    /// Ends and syncs the file, renames it into place and syncs the directory; then the
    /// engine learns the copied bodies' places. Returns the number of jobs.
    pub fn complete(self, dir: &Path, bodies: Option<&BodyFiles>) -> io::Result<u64> {
        let SnapshotFile {
            seq,
            mut out,
            tmp,
            buf,
            jobs,
            copied,
            ..
        } = self;
        out.write_all(&buf)?;
        out.write_all(SNAPSHOT_END)?;
        out.write_all(&jobs.to_le_bytes())?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        let tmp = tmp.keep();
        let final_path = snapshot_path(dir, seq);
        fs::rename(&tmp, &final_path)?;
        sync_dir(dir)?;
        if let (Some(bodies), Some(copied)) = (bodies, copied) {
            // The engine learns the copies' places before the old files are forgotten: a
            // reader always finds a body either where it was or in the snapshot.
            let key = FileKey {
                seq,
                snapshot: true,
            };
            if let Some(index) = bodies.register_complete(key, &final_path) {
                let mut found = Vec::with_capacity(copied.len());
                for (id, at, len) in copied {
                    bodies.located_at(&mut found, id, index, at, len);
                }
                bodies.publish_moved(&mut found);
            }
        }
        Ok(jobs)
    }
}

/// Deletes every segment and snapshot older than snapshot `seq`, once readers of bodies
/// let go of them.
pub(crate) fn drop_covered(dir: &Path, seq: u64, bodies: Option<&BodyFiles>) -> io::Result<()> {
    if let Some(bodies) = bodies {
        bodies.forget_older_than(seq);
    }
    for (kind, path) in list(dir)? {
        let old = match kind {
            DataFile::Segment(n) | DataFile::Snapshot(n) => n < seq,
            DataFile::Temp => false,
        };
        if old {
            fs::remove_file(path)?;
        }
    }
    sync_dir(dir)
}

/// A snapshot's temporary file, removed unless kept: a snapshot that failed or was
/// abandoned leaves nothing recovery would trust (nor anything to clean up).
struct TempFile(PathBuf);

impl TempFile {
    /// The file is complete: it stays, and its path is returned.
    fn keep(self) -> PathBuf {
        let mut kept = std::mem::ManuallyDrop::new(self);
        std::mem::take(&mut kept.0)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}
