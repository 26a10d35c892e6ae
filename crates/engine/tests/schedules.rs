//! Periodic jobs' schedules in the engine: a tick's job and the schedule's last tick logged
//! together, overlaps passed over, and both brought back by replay and snapshots.

use bytes::Bytes;
use jobyard_engine::{
    Change, EngineCore, Fired, Lease, Millis, MissedTicks, Overlap, Schedule, Timing, WaitMode,
};

const T0: Millis = 1_700_000_000_000;
const SEC: Millis = 1000;

fn every_second(name: &str, overlap: Overlap) -> Schedule {
    Schedule {
        name: Bytes::copy_from_slice(name.as_bytes()),
        queue: Bytes::from_static(b"reports"),
        body: Bytes::from_static(b"build the report"),
        pri: 5,
        ttr: 60,
        timing: Timing::Interval("1s".into()),
        overlap,
        missed: MissedTicks::Skip,
        paused: false,
        last_tick: 0,
        last_job: 0,
    }
}

fn replayed(changes: Vec<Change>) -> EngineCore {
    let mut e = EngineCore::new();
    for change in changes {
        e.replay(change);
    }
    e
}

#[test]
fn a_tick_puts_its_job_and_records_itself_in_front_of_it() {
    let mut e = EngineCore::new();
    assert!(e.declare_schedule(every_second("s", Overlap::Allow), T0));
    assert_eq!(e.schedule(b"s").unwrap().last_tick, T0);
    e.take_changes().for_each(drop);

    let Some(Fired::Put(id)) = e.fire_schedule(b"s", T0 + SEC, T0 + SEC) else {
        panic!("the tick enqueues");
    };
    let job = e.job(id).unwrap();
    assert_eq!((job.pri, job.ttr), (5, 60));
    let attrs: serde_json::Value = serde_json::from_slice(e.attrs_of(id).unwrap()).unwrap();
    assert_eq!(
        attrs,
        serde_json::json!({"schedule": "s", "tick": T0 + SEC})
    );
    let changes: Vec<Change> = e.take_changes().collect();
    assert!(
        matches!(&changes[0], Change::Schedule { schedule: Some(s), .. }
        if s.last_tick == T0 + SEC && s.last_job == id)
    );
    assert!(matches!(&changes[1], Change::Put { id: put, .. } if *put == id));
    assert_eq!(changes.len(), 2);

    // The same tick (or an earlier one) never enqueues again.
    assert_eq!(e.fire_schedule(b"s", T0 + SEC, T0 + 2 * SEC), None);
    assert_eq!(e.fire_schedule(b"s", T0, T0 + 2 * SEC), None);
    assert_eq!(e.fire_schedule(b"nope", T0 + 5 * SEC, T0 + 5 * SEC), None);
}

#[test]
fn overlap_skip_passes_over_ticks_while_the_previous_job_is_live() {
    let mut e = EngineCore::new();
    e.declare_schedule(every_second("s", Overlap::Skip), T0);
    let Some(Fired::Put(first)) = e.fire_schedule(b"s", T0 + SEC, T0 + SEC) else {
        panic!("the first tick enqueues");
    };
    // Ready: skipped, but the tick is still done.
    assert_eq!(
        e.fire_schedule(b"s", T0 + 2 * SEC, T0 + 2 * SEC),
        Some(Fired::Overlapped)
    );
    assert_eq!(e.schedule(b"s").unwrap().last_tick, T0 + 2 * SEC);
    // Leased: still skipped.
    let q = e.queue_id(b"reports").unwrap();
    e.reserve(
        1,
        &[q],
        WaitMode::Best,
        Lease::JobTtr,
        Some(0),
        false,
        T0 + 2 * SEC,
    );
    assert_eq!(
        e.fire_schedule(b"s", T0 + 3 * SEC, T0 + 3 * SEC),
        Some(Fired::Overlapped)
    );
    // Done: the next tick enqueues.
    assert!(e.delete(1, first));
    assert!(matches!(
        e.fire_schedule(b"s", T0 + 4 * SEC, T0 + 4 * SEC),
        Some(Fired::Put(_))
    ));

    // A schedule that allows overlaps enqueues every tick.
    e.declare_schedule(every_second("a", Overlap::Allow), T0);
    assert!(matches!(
        e.fire_schedule(b"a", T0 + SEC, T0 + SEC),
        Some(Fired::Put(_))
    ));
    assert!(matches!(
        e.fire_schedule(b"a", T0 + 2 * SEC, T0 + 2 * SEC),
        Some(Fired::Put(_))
    ));
}

#[test]
fn replay_and_snapshots_bring_back_schedules_and_their_last_ticks() {
    let mut e = EngineCore::new();
    e.declare_schedule(every_second("s", Overlap::Skip), T0);
    e.declare_schedule(every_second("gone", Overlap::Allow), T0);
    let Some(Fired::Put(id)) = e.fire_schedule(b"s", T0 + SEC, T0 + SEC) else {
        panic!("the tick enqueues");
    };
    assert!(e.pause_schedule(b"s", true, T0 + SEC));
    assert!(e.delete_schedule(b"gone"));
    let log: Vec<Change> = e.take_changes().collect();

    for back in [replayed(log), replayed(e.snapshot_of(&e.snapshot_order()))] {
        let s = back.schedule(b"s").unwrap();
        assert_eq!((s.last_tick, s.last_job, s.paused), (T0 + SEC, id, true));
        assert!(back.schedule(b"gone").is_none());
        assert!(back.job(id).is_some());
        assert_eq!(back.schedules().count(), 1);
    }
}

#[test]
fn declaring_again_keeps_progress_and_pause_and_logs_only_a_change() {
    let mut e = EngineCore::new();
    e.declare_schedule(every_second("s", Overlap::Allow), T0);
    e.fire_schedule(b"s", T0 + SEC, T0 + SEC);
    e.pause_schedule(b"s", true, T0 + SEC);
    e.take_changes().for_each(drop);

    assert!(!e.declare_schedule(every_second("s", Overlap::Allow), T0 + 9 * SEC));
    assert_eq!(e.take_changes().count(), 0);

    let changed = Schedule {
        timing: Timing::Cron {
            expr: "0 3 * * *".into(),
            time_zone: "Europe/Berlin".into(),
        },
        ..every_second("s", Overlap::Allow)
    };
    assert!(!e.declare_schedule(changed, T0 + 9 * SEC));
    let s = e.schedule(b"s").unwrap();
    assert_eq!((s.last_tick, s.paused), (T0 + SEC, true));
    assert_eq!(e.take_changes().count(), 1);

    // Resuming goes on from now: ticks passed while paused never enqueue.
    e.pause_schedule(b"s", false, T0 + 20 * SEC);
    assert_eq!(e.schedule(b"s").unwrap().last_tick, T0 + 20 * SEC);
    assert_eq!(e.fire_schedule(b"s", T0 + 15 * SEC, T0 + 20 * SEC), None);
}
