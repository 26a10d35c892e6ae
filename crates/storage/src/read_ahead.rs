//! Reading bodies ahead: one `pread` for a run of bodies handed out in the order they were
//! written.
//!
//! A backlog's bodies sit one after another in the log, and a queue hands its jobs out in
//! about that order (priority, then id), as compaction copies them. Reading each body with
//! its own `pread` cost a system call per job handed out (+15 % server CPU per job when
//! draining a backlog, docs/performance.md). So when a body follows closely on the one read
//! before from the same file, the next [`WINDOW`] bytes are read at once and the following
//! bodies are copied from them. A read that does not continue a run reads just its body,
//! as before, so random access costs what it did.
//!
//! A window holds only bytes that were written before it was read and that never change:
//! a place is immutable once written, a window never reaches past the end of the bodies
//! published for its file (the bytes past them may be zeros written ahead in `always` mode,
//! or a record being written), and a file's index is never reused, so a window of a file
//! compaction let go of is simply never hit again.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Bytes read at once for a run. At ~160 bytes per 100-byte job's record, one read serves
/// some 400 jobs; the windows together stay under a third of a MiB.
pub(crate) const WINDOW: usize = 64 << 10;
/// Runs followed at once: a drain of one queue, compaction's copy, and a few more queues.
const WINDOWS: usize = 4;
/// A body at most this far past the end of the previous one continues a run: the bytes
/// between are its own record's header and records without bodies (deletes, releases).
const GAP: u64 = 4 << 10;
/// Larger bodies are read alone: the system call is small beside their copy.
const LARGEST_AHEAD: usize = WINDOW / 4;

/// Where a run is, and the bytes read ahead for it.
struct Window {
    index: u32,
    /// File offset of `bytes[0]`.
    start: u64,
    bytes: Vec<u8>,
    /// The end of the last body read in this run: the next one starts a little after.
    next: u64,
    /// For choosing the least recently used window to replace.
    used: u64,
}

impl Window {
    fn holds(&self, index: u32, offset: u64, len: usize) -> bool {
        self.index == index
            && offset >= self.start
            && offset + len as u64 <= self.start + self.bytes.len() as u64
    }

    fn continued_by(&self, index: u32, offset: u64) -> bool {
        self.index == index && offset >= self.next && offset - self.next <= GAP
    }

    fn copy(&mut self, offset: u64, len: usize, tick: u64) -> Vec<u8> {
        let from = (offset - self.start) as usize;
        self.next = offset + len as u64;
        self.used = tick;
        self.bytes[from..from + len].to_vec()
    }

    /// Reads up to `want` bytes from `offset`; fewer at the end of the file.
    fn fill(&mut self, file: &File, index: u32, offset: u64, want: usize) -> io::Result<()> {
        self.index = index;
        self.start = offset;
        self.bytes.resize(want, 0);
        let mut got = 0;
        while got < want {
            match file.read_at(&mut self.bytes[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.bytes.clear();
                    return Err(e);
                }
            }
        }
        self.bytes.truncate(got);
        Ok(())
    }
}

/// The windows of the runs being read.
#[derive(Default)]
pub(crate) struct ReadAhead {
    windows: Vec<Window>,
    tick: u64,
    /// Bodies read, and the system calls that read them (for tests and the docs' figures).
    pub bodies: u64,
    pub preads: u64,
}

impl ReadAhead {
    /// A copy of the body at `offset` of file `index`, if a window holds all of it.
    pub fn hit(&mut self, index: u32, offset: u64, len: usize) -> Option<Vec<u8>> {
        self.tick += 1;
        let tick = self.tick;
        let body = self
            .windows
            .iter_mut()
            .find(|w| w.holds(index, offset, len))
            .map(|w| w.copy(offset, len, tick))?;
        self.bodies += 1;
        Some(body)
    }

    /// Reads a body no window holds: with the bytes after it when it continues a run, and
    /// no further than `readable` (the end of what is known written to the file).
    pub fn miss(
        &mut self,
        file: &File,
        index: u32,
        offset: u64,
        len: usize,
        readable: u64,
    ) -> io::Result<Vec<u8>> {
        let end = offset + len as u64;
        let run = (len <= LARGEST_AHEAD)
            .then(|| {
                self.windows
                    .iter()
                    .position(|w| w.continued_by(index, offset))
            })
            .flatten();
        self.bodies += 1;
        self.preads += 1;
        let Some(i) = run else {
            let mut body = vec![0; len];
            file.read_exact_at(&mut body, offset)?;
            self.follow(index, offset, end);
            return Ok(body);
        };
        let want = (readable.max(end) - offset).min(WINDOW as u64) as usize;
        let tick = self.tick;
        let window = &mut self.windows[i];
        window.fill(file, index, offset, want.max(len))?;
        if window.bytes.len() < len {
            window.bytes.clear();
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(window.copy(offset, len, tick))
    }

    /// Watches for a run starting after a body read alone, in the least recently used
    /// window (its bytes are dropped, its memory kept for the next fill).
    fn follow(&mut self, index: u32, offset: u64, end: u64) {
        let watch = Window {
            index,
            start: offset,
            bytes: Vec::new(),
            next: end,
            used: self.tick,
        };
        if self.windows.len() < WINDOWS {
            self.windows.push(watch);
            return;
        }
        let oldest = self
            .windows
            .iter_mut()
            .min_by_key(|w| w.used)
            .expect("WINDOWS > 0");
        let mut bytes = std::mem::replace(oldest, watch).bytes;
        bytes.clear();
        oldest.bytes = bytes;
    }

    /// Drops the windows of files that were let go, so no window outlives its file.
    pub fn forget(&mut self, gone: &[u32]) {
        self.windows.retain(|w| !gone.contains(&w.index));
    }

    /// Bytes held by the windows (their buffers' capacity), for tests.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.windows.iter().map(|w| w.bytes.capacity()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A file of `n` bodies of 100 bytes, each after a 60-byte "header"; their offsets.
    fn file_of_bodies(n: usize) -> (tempfile::NamedTempFile, Vec<u64>) {
        let mut f = tempfile::NamedTempFile::new().expect("temp file");
        let mut offsets = Vec::new();
        let mut at = 0u64;
        for i in 0..n {
            f.write_all(&[0xEE; 60]).expect("write");
            at += 60;
            offsets.push(at);
            f.write_all(&body(i)).expect("write");
            at += 100;
        }
        (f, offsets)
    }

    fn body(i: usize) -> Vec<u8> {
        format!("{i:>100}").into_bytes()
    }

    fn read(ahead: &mut ReadAhead, f: &File, offset: u64, readable: u64) -> Vec<u8> {
        match ahead.hit(1, offset, 100) {
            Some(b) => b,
            None => ahead.miss(f, 1, offset, 100, readable).expect("reads"),
        }
    }

    #[test]
    fn a_run_is_served_from_one_window_after_its_first_two_bodies() {
        let (f, offsets) = file_of_bodies(1000);
        let mut ahead = ReadAhead::default();
        for (i, &at) in offsets.iter().enumerate().take(300) {
            // The first body is read alone, the second fills a window, the rest are hits.
            let read = match ahead.hit(1, at, 100) {
                Some(b) => b,
                None => {
                    assert!(i < 2, "body {i} is not in the window");
                    ahead
                        .miss(f.as_file(), 1, at, 100, u64::MAX)
                        .expect("reads")
                }
            };
            assert_eq!(read, body(i));
        }
        assert!(ahead.held() <= WINDOW * WINDOWS);
        assert_eq!(ahead.bodies, 300);
        assert!(ahead.preads <= 3, "{} reads for 300 bodies", ahead.preads);
    }

    #[test]
    fn the_windows_of_a_forgotten_file_go_with_it() {
        let (f, offsets) = file_of_bodies(10);
        let mut ahead = ReadAhead::default();
        for &at in &offsets[..3] {
            read(&mut ahead, f.as_file(), at, u64::MAX);
        }
        ahead.forget(&[2]);
        assert!(
            ahead.hit(1, offsets[5], 100).is_some(),
            "another file's window stays"
        );
        ahead.forget(&[1]);
        assert!(ahead.hit(1, offsets[5], 100).is_none());
        assert_eq!(ahead.held(), 0);
    }

    #[test]
    fn a_window_never_reaches_past_what_is_known_written() {
        let (f, offsets) = file_of_bodies(10);
        let mut ahead = ReadAhead::default();
        let readable = offsets[4] + 100;
        for (i, &at) in offsets.iter().enumerate().take(5) {
            assert_eq!(read(&mut ahead, f.as_file(), at, readable), body(i));
        }
        // Body 5 lies past the readable end the window was read with: not served from it.
        assert!(ahead.hit(1, offsets[5], 100).is_none());
        assert_eq!(read(&mut ahead, f.as_file(), offsets[5], u64::MAX), body(5));
    }

    #[test]
    fn scattered_reads_read_only_their_body() {
        let (f, offsets) = file_of_bodies(2000);
        let mut ahead = ReadAhead::default();
        for i in (0..2000).step_by(97).rev() {
            assert!(ahead.hit(1, offsets[i], 100).is_none());
            assert_eq!(read(&mut ahead, f.as_file(), offsets[i], u64::MAX), body(i));
        }
        assert_eq!(ahead.held(), 0, "no window was filled");
    }

    #[test]
    fn other_files_are_not_served_from_a_window() {
        let (f, offsets) = file_of_bodies(10);
        let mut ahead = ReadAhead::default();
        for &at in &offsets[..3] {
            read(&mut ahead, f.as_file(), at, u64::MAX);
        }
        assert!(ahead.hit(1, offsets[5], 100).is_some());
        assert!(ahead.hit(2, offsets[5], 100).is_none());
    }

    #[test]
    fn a_body_cut_from_the_file_is_an_error() {
        let (f, offsets) = file_of_bodies(10);
        let mut ahead = ReadAhead::default();
        read(&mut ahead, f.as_file(), offsets[0], u64::MAX);
        f.as_file().set_len(offsets[1] + 50).expect("cut");
        let err = ahead.miss(f.as_file(), 1, offsets[1], 100, u64::MAX);
        assert!(err.is_err());
    }
}
