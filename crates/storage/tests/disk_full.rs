//! A full disk, for real: a small tmpfs mounted by the test, filled up by another file.
//! Mounting needs root, so these tests are ignored by default; scripts/test.sh runs them
//! with `--ignored` when it runs as root (as in CI), and run so without root they fail.
//!
//! What must hold: new jobs are refused (`has_room` false) instead of hanging; records
//! that do not add jobs (deletes) still become durable, from the reserve; space coming
//! back is noticed on its own; closing never hangs; everything acknowledged recovers.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use jobyard_engine::{Change, EngineCore, JobId, PutState};
use jobyard_storage::{recover, FsyncMode, Log, LogOptions, Lsn};

/// A tmpfs of `size` mounted on a fresh directory; unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// Panics when this process may not mount: a test asked to run must not pass unrun.
    fn mount(size: &str) -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status();
        match status {
            Ok(s) if s.success() => SmallDisk { dir },
            failed => {
                let why = failed.map_or_else(|e| e.to_string(), |s| format!("mount: {s}"));
                panic!(
                    "cannot mount a tmpfs ({why}): the disk-full tests need root \
                     (CAP_SYS_ADMIN); run them as root, or leave out --ignored"
                )
            }
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the file system with a file until it is full; returns the file.
    fn fill(&self) -> PathBuf {
        let filler = self.path().join("filler");
        let mut f = fs::File::create(&filler).unwrap();
        let chunk = vec![0xAB; 4096];
        while f.write_all(&chunk).is_ok() {}
        // Bytes that fit in a partial block.
        while f.write_all(&chunk[..1]).is_ok() {}
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

fn put(id: JobId) -> Change {
    put_sized(id, 300)
}

fn put_sized(id: JobId, size: usize) -> Change {
    Change::Put {
        id,
        queue: Bytes::from_static(b"q"),
        pri: 1,
        ttr: 60,
        delay: 0,
        created: 1_700_000_000_000,
        state: PutState::Ready,
        unique: None,
        attrs: None,
        attempt: 0,
        body: Bytes::from(vec![b'j'; size]),
    }
}

fn wait(log: &Log, lsn: Lsn) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while log.durable() < lsn {
        assert!(Instant::now() < deadline, "lsn {lsn} never became durable");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "{what} never happened");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn options() -> LogOptions {
    LogOptions {
        fsync: FsyncMode::Always,
        segment_bytes: 64 << 10,
        bodies_in_log: false,
    }
}

#[test]
#[ignore = "needs root: mounts a tmpfs"]
fn a_full_disk_refuses_new_jobs_keeps_deletes_and_recovers_when_space_returns() {
    let disk = SmallDisk::mount("4m");
    let dir = disk.path().join("data");
    fs::create_dir(&dir).unwrap();
    let log = Log::open(&dir, 1, options(), Box::new(|_| {})).unwrap();
    let mut acknowledged = Vec::new();
    for id in 1..=50 {
        wait(&log, log.append(std::iter::once(put(id))));
        acknowledged.push(id);
    }
    let filler = disk.fill();
    // Producers go on while there is room; once the next segment cannot be made, the
    // log says so instead of letting them wait.
    let mut id = 51;
    while log.has_room(400) {
        assert!(id < 5_000, "the disk never looked full");
        wait(&log, log.append(std::iter::once(put(id))));
        acknowledged.push(id);
        id += 1;
    }
    // Deletes still fit: they go into the reserve.
    let deleted: Vec<JobId> = acknowledged.drain(..40).collect();
    for &gone in &deleted {
        wait(
            &log,
            log.append(std::iter::once(Change::Delete { id: gone })),
        );
    }
    assert!(!log.has_room(400), "still full");
    // Space comes back: noticed without anything being appended.
    fs::remove_file(&filler).unwrap();
    wait_until("room for new jobs", || log.has_room(400));
    let lsn = log.append(std::iter::once(put(10_000)));
    wait(&log, lsn);
    acknowledged.push(10_000);
    log.close();

    let mut engine = EngineCore::new();
    recover(&dir, false, |c| engine.replay(c)).expect("recovers");
    let live: Vec<JobId> = (0..=10_000).filter(|&i| engine.job(i).is_some()).collect();
    assert_eq!(live, acknowledged);
}

#[test]
#[ignore = "needs root: mounts a tmpfs"]
fn closing_does_not_hang_when_nothing_can_be_written() {
    let disk = SmallDisk::mount("2m");
    let dir = disk.path().join("data");
    fs::create_dir(&dir).unwrap();
    let log = Log::open(&dir, 1, options(), Box::new(|_| {})).unwrap();
    wait(&log, log.append(std::iter::once(put(1))));
    disk.fill();
    // Far more than the reserve: this write cannot succeed.
    let big = put_sized(2, 3 << 20);
    let lsn = log.append(std::iter::once(big));
    // A snapshot asked for with the write that will fail (or just after it) is given up,
    // whichever the writer sees first.
    let feed = log.begin_snapshot(3);
    wait_until("the snapshot to be given up", || !log.snapshot_running());
    drop(feed);
    std::thread::sleep(Duration::from_millis(200));
    assert!(log.durable() < lsn, "cannot have been written");
    assert!(!log.has_room(10), "failing writes refuse new jobs");
    // A snapshot cannot be made meanwhile, and none is left pending (a shutdown waits for a
    // running snapshot).
    assert!(log.begin_snapshot(3).is_none());
    assert!(!log.snapshot_running());
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let closer = std::thread::spawn(move || {
        log.close();
        done_tx.send(()).unwrap();
    });
    done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("close returned");
    closer.join().unwrap();
    let mut engine = EngineCore::new();
    recover(&dir, false, |c| engine.replay(c)).expect("recovers");
    assert!(engine.job(1).is_some(), "the acknowledged job is kept");
    assert!(engine.job(2).is_none());
}
