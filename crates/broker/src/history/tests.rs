use super::*;

fn reading(name: &'static str, put: u64, completed: u64, ready: u32) -> QueueReading {
    QueueReading {
        name: Bytes::from_static(name.as_bytes()),
        put,
        completed,
        ready,
        ..QueueReading::default()
    }
}

#[test]
fn each_sample_becomes_a_point_of_its_queue_and_of_the_overall_series() {
    let h = History::default();
    h.record(
        vec![reading("a", 10, 0, 10), reading("b", 0, 0, 0)],
        1001,
        1000,
    );
    h.record(
        vec![reading("a", 30, 5, 25), reading("b", 4, 4, 0)],
        1002,
        1000,
    );
    h.record(
        vec![reading("a", 30, 25, 5), reading("b", 4, 4, 0)],
        1003,
        2000,
    );
    let a = h.view(Some(b"a"), 60).unwrap();
    assert_eq!((a.step_s, a.end_s), (1, 1003));
    let puts: Vec<f32> = a.points.iter().map(|p| p.put).collect();
    assert_eq!(puts, vec![10.0, 20.0, 0.0]);
    assert_eq!(a.points[2].completed, 10.0, "20 in a 2 s interval");
    assert_eq!(a.points[2].ready, 5);
    let all = h.view(None, 60).unwrap();
    assert_eq!(all.points[1].put, 24.0);
    assert_eq!(all.points[1].completed, 9.0);
    assert_eq!(all.points[1].ready, 25);
    assert_eq!(h.view(Some(b"a"), 2).unwrap().points.len(), 2);
    assert!(h.view(Some(b"nope"), 60).is_none());
}

#[test]
fn latency_percentiles_come_from_the_buckets_completed_in_each_interval() {
    let h = History::default();
    let mut r = reading("q", 0, 0, 0);
    r.latency[4] = 1_000; // long before: 1-2.5 ms
    h.record(vec![r.clone()], 11, 1000);
    r.latency[9] += 100; // this second: 50-100 ms
    h.record(vec![r.clone()], 12, 1000);
    h.record(vec![r], 13, 1000);
    let p = h.view(Some(b"q"), 60).unwrap().points;
    assert_eq!(p[1].p50_us, 75_000, "only this second's leases count");
    assert_eq!(p[1].p99_us, 99_500);
    assert_eq!(p[2].p50_us, NO_LATENCY, "nothing completed");
}

#[test]
fn rings_keep_a_bounded_number_of_points_and_coarse_ones_add_up_ten_seconds() {
    let h = History::default();
    let start = 10_000; // a multiple of the coarse step
    for s in 1..=(FINE_POINTS as u64 + 50) {
        h.record(vec![reading("q", s * 2, s, 7)], start + s, 1000);
    }
    let fine = h.view(Some(b"q"), 100_000).unwrap();
    assert_eq!(fine.step_s, COARSE_STEP_S);
    assert_eq!(
        fine.points.len(),
        (FINE_POINTS + 50) / COARSE_STEP_S as usize
    );
    assert!(fine.points[1..]
        .iter()
        .all(|p| p.put == 2.0 && p.completed == 1.0));
    assert_eq!(fine.points[0].ready, 7);
    let all_fine = h.view(Some(b"q"), FINE_POINTS as u64).unwrap();
    assert_eq!(
        all_fine.points.len(),
        FINE_POINTS,
        "never more than the ring holds"
    );
    let one_queue = h.bytes() / 2;
    assert!(one_queue < 54_000, "about 53 KB a queue: {one_queue}");
}

#[test]
fn gone_queues_drop_to_zero_and_are_forgotten_later() {
    let h = History::default();
    h.record(
        vec![reading("gone", 5, 0, 5), reading("live", 0, 0, 1)],
        100,
        1000,
    );
    h.record(vec![reading("live", 0, 0, 1)], 101, 1000);
    let gone = h.view(Some(b"gone"), 10).unwrap();
    assert_eq!(gone.points[1].ready, 0);
    // Made again, it counts from zero.
    h.record(
        vec![reading("gone", 2, 0, 2), reading("live", 0, 0, 1)],
        102,
        1000,
    );
    assert_eq!(h.view(Some(b"gone"), 10).unwrap().points[2].put, 2.0);
    for s in 103..(103 + FORGET_AFTER_S) {
        h.record(vec![reading("live", 0, 0, 1)], s, 1000);
    }
    assert_eq!(h.queues(), vec![Bytes::from_static(b"live")]);
    assert!(h.view(Some(b"gone"), 10).is_none());
}

#[test]
fn queues_past_the_cap_count_only_in_the_overall_depth() {
    let h = History::default();
    let names: Vec<&'static str> = (0..=MAX_QUEUES)
        .map(|i| &*Box::leak(format!("q{i:04}").into_boxed_str()))
        .collect();
    h.record(names.iter().map(|n| reading(n, 1, 0, 1)).collect(), 5, 1000);
    assert_eq!(h.queues().len(), MAX_QUEUES);
    let all = h.view(None, 10).unwrap().points[0];
    assert_eq!(all.ready, MAX_QUEUES as u32 + 1);
    assert_eq!(all.put, MAX_QUEUES as f32);
}
