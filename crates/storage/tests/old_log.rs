//! A log written by an earlier version of jobyard (before segments named their successor)
//! still opens, recovers the same jobs, and can be continued.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use jobyard_engine::{Change, EngineCore, JobState, PutState};
use jobyard_storage::{recover, FsyncMode, Log, LogOptions};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/log-v1");

fn copy_fixture(to: &Path) -> Vec<u64> {
    let mut expected = String::new();
    for entry in fs::read_dir(FIXTURE).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        if name == "expected-live-ids.txt" {
            expected = fs::read_to_string(entry.path()).unwrap();
        } else if name.ends_with(".log") || name.ends_with(".snap") {
            fs::copy(entry.path(), to.join(&name)).unwrap();
        }
    }
    expected
        .trim_matches(|c| c == '[' || c == ']' || c == '\n')
        .split(", ")
        .map(|n| n.parse().unwrap())
        .collect()
}

fn live_ids(e: &EngineCore) -> Vec<u64> {
    (0..200).filter(|&id| e.job(id).is_some()).collect()
}

#[test]
fn a_log_written_by_the_previous_version_opens_and_continues() {
    let dir = tempfile::tempdir().unwrap();
    let expected = copy_fixture(dir.path());
    let mut engine = EngineCore::new();
    let report = recover(dir.path(), false, |c| engine.replay(c)).expect("old log opens");
    assert_eq!(live_ids(&engine), expected);
    assert_eq!(engine.job(21).unwrap().state, JobState::Buried);
    assert_eq!(report.snapshot, Some(5));
    assert!(report.torn_tail.is_none() && report.salvaged.is_empty());
    assert_eq!(report.next_segment, 8);

    // Continue it with this version, then recover both together.
    let options = LogOptions {
        fsync: FsyncMode::Always,
        segment_bytes: 1024,
        bodies_in_log: false,
    };
    let log = Log::open(dir.path(), report.next_segment, options, Box::new(|_| {})).unwrap();
    let lsn = log.append(std::iter::once(Change::Put {
        id: 100,
        queue: Bytes::from_static(b"new"),
        pri: 1,
        ttr: 60,
        delay: 0,
        created: 1_700_000_000_000,
        state: PutState::Ready,
        unique: None,
        attrs: None,
        attempt: 0,
        body: Bytes::from_static(b"written by this version"),
    }));
    let deadline = Instant::now() + Duration::from_secs(20);
    while log.durable() < lsn {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    log.close();
    let mut again = EngineCore::new();
    recover(dir.path(), false, |c| again.replay(c)).expect("mixed log opens");
    let mut want = expected.clone();
    want.push(100);
    assert_eq!(live_ids(&again), want);
}
