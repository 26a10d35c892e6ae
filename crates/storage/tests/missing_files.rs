//! Files of the log that are removed or cut to nothing: recovery must notice and refuse to
//! start (naming what is missing) unless salvaging, instead of silently losing jobs.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use jobyard_engine::{Change, EngineCore, JobId, PutState};
use jobyard_storage::{recover, FsyncMode, Log, LogOptions, Lsn, RecoveryError, RecoveryReport};

fn segment(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("seg-{seq:010}.log"))
}

fn snapshot(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("snap-{seq:010}.snap"))
}

fn put(id: JobId) -> Change {
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
        body: Bytes::from(vec![b'x'; 200]),
    }
}

fn wait(log: &Log, lsn: Lsn) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while log.durable() < lsn {
        assert!(Instant::now() < deadline, "never durable");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn small_segments() -> LogOptions {
    LogOptions {
        fsync: FsyncMode::Always,
        segment_bytes: 2048,
        bodies_in_log: false,
    }
}

/// Writes jobs 1..=n one append at a time through a log of small segments (several
/// segments), closes it, and returns the number of the newest segment.
fn write_jobs(dir: &Path, first_segment: u64, ids: std::ops::RangeInclusive<JobId>) -> u64 {
    let log = Log::open(dir, first_segment, small_segments(), Box::new(|_| {})).unwrap();
    for id in ids {
        let lsn = log.append(std::iter::once(put(id)));
        wait(&log, lsn);
    }
    let newest = log.current_segment();
    log.close();
    newest
}

fn recover_engine(
    dir: &Path,
    salvage: bool,
) -> Result<(EngineCore, RecoveryReport), RecoveryError> {
    let mut engine = EngineCore::new();
    let report = recover(dir, salvage, |c| engine.replay(c))?;
    Ok((engine, report))
}

fn expect_missing(dir: &Path, want: &[PathBuf]) {
    match recover_engine(dir, false) {
        Err(RecoveryError::Missing { files, reason }) => {
            assert_eq!(files, want, "{reason}");
            let message = RecoveryError::Missing { files, reason }.to_string();
            for f in want {
                assert!(message.contains(&f.display().to_string()), "{message}");
            }
            assert!(message.contains("--salvage"), "{message}");
        }
        Err(other) => panic!("expected Missing, got {other}"),
        Ok((e, _)) => panic!("started with {} jobs despite missing files", e.job_count()),
    }
}

#[test]
fn a_removed_middle_segment_stops_start_up_and_salvage_starts_with_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let newest = write_jobs(dir.path(), 1, 1..=60);
    assert!(newest >= 4, "several segments: {newest}");
    fs::remove_file(segment(dir.path(), 2)).unwrap();
    expect_missing(dir.path(), &[segment(dir.path(), 2)]);
    // Nothing was changed by the refusal: salvage still finds everything else.
    let (e, report) = recover_engine(dir.path(), true).unwrap();
    assert!(e.job_count() > 0 && e.job_count() < 60);
    assert_eq!(report.missing, vec![segment(dir.path(), 2)]);
}

#[test]
fn a_removed_snapshot_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), 1, small_segments(), Box::new(|_| {})).unwrap();
    let mut engine = EngineCore::new();
    for id in 1..=30 {
        engine.replay(put(id));
        wait(&log, log.append(std::iter::once(put(id))));
    }
    assert!(log.request_snapshot(engine.snapshot(), 31));
    while log.snapshot_running() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let snap_seq = log.current_segment();
    wait(&log, log.append(std::iter::once(put(31))));
    log.close();
    assert!(snapshot(dir.path(), snap_seq).exists());
    assert!(!segment(dir.path(), 1).exists(), "compacted away");
    let (e, _) = recover_engine(dir.path(), false).unwrap();
    assert_eq!(e.job_count(), 31);

    fs::remove_file(snapshot(dir.path(), snap_seq)).unwrap();
    expect_missing(dir.path(), &[snapshot(dir.path(), snap_seq)]);
    let (e, report) = recover_engine(dir.path(), true).unwrap();
    assert_eq!(
        e.job_count(),
        1,
        "only what came after the snapshot is left"
    );
    assert_eq!(report.missing, vec![snapshot(dir.path(), snap_seq)]);
}

#[test]
fn a_removed_segment_right_after_the_snapshot_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), 1, small_segments(), Box::new(|_| {})).unwrap();
    wait(&log, log.append(std::iter::once(put(1))));
    assert!(log.request_snapshot(vec![put(1)], 2));
    while log.snapshot_running() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let snap_seq = log.current_segment();
    for id in 2..=40 {
        wait(&log, log.append(std::iter::once(put(id))));
    }
    log.close();
    fs::remove_file(segment(dir.path(), snap_seq)).unwrap();
    expect_missing(dir.path(), &[segment(dir.path(), snap_seq)]);
}

#[test]
fn removed_newest_segments_stop_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let newest = write_jobs(dir.path(), 1, 1..=60);
    // The newest segments, one by one: each time, the one before names it.
    fs::remove_file(segment(dir.path(), newest)).unwrap();
    expect_missing(dir.path(), &[segment(dir.path(), newest)]);
    fs::remove_file(segment(dir.path(), newest - 1)).unwrap();
    expect_missing(dir.path(), &[segment(dir.path(), newest - 1)]);
}

#[test]
fn the_segment_of_a_restart_is_named_too() {
    let dir = tempfile::tempdir().unwrap();
    let newest = write_jobs(dir.path(), 1, 1..=3);
    let (_, report) = recover_engine(dir.path(), false).unwrap();
    let second = write_jobs(dir.path(), report.next_segment, 4..=5);
    assert_eq!(second, newest + 1);
    fs::remove_file(segment(dir.path(), second)).unwrap();
    expect_missing(dir.path(), &[segment(dir.path(), second)]);
}

#[test]
fn a_newest_segment_cut_to_nothing_is_an_error_not_a_crash_tail() {
    for cut in [0usize, 7] {
        let dir = tempfile::tempdir().unwrap();
        let newest = write_jobs(dir.path(), 1, 1..=60);
        let path = segment(dir.path(), newest);
        let data = fs::read(&path).unwrap();
        fs::write(&path, &data[..cut]).unwrap();
        match recover_engine(dir.path(), false) {
            Err(RecoveryError::Corrupt { path: p, .. }) => assert_eq!(p, path),
            Err(other) => panic!("expected Corrupt, got {other}"),
            Ok(_) => panic!("a truncated newest segment was taken for a crash"),
        }
        assert!(path.exists(), "nothing removed by the refusal");
        let (e, report) = recover_engine(dir.path(), true).unwrap();
        assert!(e.job_count() < 60);
        assert_eq!(report.salvaged, vec![(path.clone(), 0, cut as u64)]);
        assert_eq!(report.next_segment, newest);
        // The log goes on from there (the segment before is not sealed twice), and the
        // next start is clean.
        let log = Log::open(dir.path(), newest, small_segments(), Box::new(|_| {})).unwrap();
        wait(&log, log.append(std::iter::once(put(1000))));
        log.close();
        let (again, report) = recover_engine(dir.path(), false).unwrap();
        assert!(report.salvaged.is_empty() && report.missing.is_empty());
        assert_eq!(again.job_count(), e.job_count() + 1);
    }
}

#[test]
fn a_lone_first_segment_cut_to_nothing_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), 1, LogOptions::default(), Box::new(|_| {})).unwrap();
    wait(&log, log.append(std::iter::once(put(1))));
    log.close();
    fs::write(segment(dir.path(), 1), b"").unwrap();
    assert!(matches!(
        recover_engine(dir.path(), false),
        Err(RecoveryError::Corrupt { .. })
    ));
}

#[test]
fn after_a_salvaged_start_and_a_snapshot_the_next_start_is_clean() {
    let dir = tempfile::tempdir().unwrap();
    write_jobs(dir.path(), 1, 1..=60);
    fs::remove_file(segment(dir.path(), 2)).unwrap();
    let (engine, report) = recover_engine(dir.path(), true).unwrap();
    assert!(!report.missing.is_empty());
    // What the server does after a salvaged start: snapshot at once.
    let log = Log::open(
        dir.path(),
        report.next_segment,
        small_segments(),
        Box::new(|_| {}),
    )
    .unwrap();
    assert!(log.request_snapshot(engine.snapshot(), engine.next_id()));
    while log.snapshot_running() {
        std::thread::sleep(Duration::from_millis(1));
    }
    log.close();
    let (again, report) = recover_engine(dir.path(), false).unwrap();
    assert!(report.missing.is_empty());
    assert_eq!(again.job_count(), engine.job_count());
}
