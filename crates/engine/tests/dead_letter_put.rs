//! A dead letter put by a front end that retried its attempts itself (jobd's launches):
//! buried in the dead-letter queue with its history, kept by replay and snapshots, out of
//! reach of waiters, and retried or discarded as any other dead letter.

use bytes::Bytes;
use jobyard_engine::{
    Change, EngineCore, Failure, FailureHistory, JobState, Lease, LeaseClose, Millis, NewJob,
    ReserveOutcome, WaitMode,
};

const T0: Millis = 1_700_000_000_000;

fn history() -> FailureHistory {
    FailureHistory {
        origin: Bytes::from_static(b"reports"),
        count: 2,
        failures: (1..=2)
            .map(|n| {
                Failure::new(
                    T0 + n,
                    7,
                    LeaseClose::Failed,
                    Some(Bytes::from(format!("exit code {n}"))),
                )
            })
            .collect(),
    }
}

#[test]
fn a_put_dead_letter_is_buried_with_its_history_and_survives_replay() {
    let mut e = EngineCore::new();
    let dead = e.queue_id_or_create(b"reports-dead");
    // A waiter on the dead-letter queue must not get it.
    assert_eq!(
        e.reserve(9, &[dead], WaitMode::Best, Lease::JobTtr, None, false, T0),
        ReserveOutcome::Waiting
    );
    let id = e.put_dead_letter(
        NewJob {
            queue: dead,
            body: Bytes::from_static(b"42"),
            ttr: 60,
            ..NewJob::default()
        },
        history(),
        T0,
    );
    assert!(e.take_notices().next().is_none(), "nobody was handed it");
    assert_eq!(e.job(id).unwrap().state, JobState::Buried);
    assert_eq!(e.list_dead_letters(dead, 10), vec![id]);
    assert_eq!(e.failure_history(id), Some(&history()));

    let log: Vec<Change> = e.take_changes().collect();
    for rebuilt in [log, e.snapshot()] {
        let mut r = EngineCore::new();
        for change in rebuilt {
            r.replay(change);
        }
        let q = r.queue_id(b"reports-dead").unwrap();
        assert_eq!(r.list_dead_letters(q, 10), vec![id]);
        assert_eq!(r.failure_history(id), Some(&history()));
        assert_eq!(r.retry_dead_letters(q, None, T0 + 10), vec![id]);
        let origin = r.queue_id(b"reports").unwrap();
        assert_eq!(r.job(id).unwrap().queue, origin);
        assert_eq!(r.job(id).unwrap().state, JobState::Ready);
    }
}
