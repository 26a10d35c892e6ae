//! The manager front end on a real (in-memory) engine with the Rust worker SDK in the same
//! process (libzmq on the worker's end, the manager's own ZMTP on the other): jobs put into the engine by any front end are run by a WMP
//! worker, a watcher (what a Gearman foreground client is) gets the DONE's result or
//! failure, and a job without watchers is gone after `ok`. The black-box tests with pyzmq,
//! greenstalk and gearman3 against the real binary are in tests/wmp/test_manager.py.

use std::time::Duration;

use bytes::Bytes;
use jobyard_broker::Broker;
use jobyard_engine::{EndStatus, NewJob, NoticeKind};
use jobyard_net::{FrontEnd, Gate};
use jobyard_wmp::{ManagerConfig, WmpFrontEnd};
use jobyard_wmp_worker::worker::{Outcome, Worker};

/// Generous bound so a broken build fails instead of hanging; not a timing assertion.
const PATIENCE: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_worker_runs_engine_jobs_and_watchers_get_the_outcome() {
    let broker = Broker::in_memory();
    broker.start();
    let gate = Gate::new(100);
    let config = ManagerConfig {
        name: Some("m-test".into()),
        ..ManagerConfig::default()
    };
    let front = WmpFrontEnd::bind(broker.clone(), "tcp://127.0.0.1:*", config).unwrap();
    assert_eq!(front.manager_name(), "m-test");
    let endpoint = front.endpoint().to_owned();
    assert!(endpoint.starts_with("tcp://127.0.0.1:") && !endpoint.ends_with('*'));
    let serving = Box::new(front).start(gate.clone());

    let (client, mut mailbox) = broker.connect();
    let (watched_ok, watched_fail, plain) = {
        let mut txn = broker.lock();
        let upper = txn.queue_id_or_create(b"upper");
        let boom = txn.queue_id_or_create(b"boom");
        let mut put = |queue, body: &'static [u8]| {
            let job = NewJob {
                queue,
                ttr: 60,
                body: Bytes::from_static(body),
                durable: true,
                ..NewJob::default()
            };
            txn.put_job(job, Broker::now()).id
        };
        let ids = (put(upper, b"abc"), put(boom, b"x"), put(upper, b"plain"));
        assert!(txn.watch(client, ids.0) && txn.watch(client, ids.1));
        txn.commit();
        ids
    };

    let worker = Worker::builder()
        .connect(endpoint)
        .concurrency(2)
        .handle("upper", |job| async move {
            Outcome::Ok(Bytes::from(job.body.to_ascii_uppercase()))
        })
        .handle("boom", |_job| async move {
            Outcome::Fail {
                error: Some("exit_4".into()),
                message: Bytes::from_static(b"it broke"),
            }
        })
        .build()
        .unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(stop_rx));

    let mut ends = Vec::new();
    while ends.len() < 2 {
        match tokio::time::timeout(PATIENCE, mailbox.recv()).await {
            Ok(Some(NoticeKind::Ended(id, end))) => ends.push((id, end)),
            Ok(Some(_)) => {}
            other => panic!("no end in time: {other:?}"),
        }
    }
    ends.sort_by_key(|(id, _)| *id);
    assert_eq!(ends[0].0, watched_ok);
    assert_eq!(ends[0].1.status, EndStatus::Ok);
    assert_eq!(ends[0].1.result, Bytes::from_static(b"ABC"));
    assert_eq!(ends[1].0, watched_fail);
    assert_eq!(ends[1].1.status, EndStatus::Failed);
    assert_eq!(ends[1].1.error.as_deref(), Some(&b"it broke"[..]));

    let deadline = tokio::time::Instant::now() + PATIENCE;
    while broker.lock().job(plain).is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the plain job was not done"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    stop_tx.send(()).unwrap();
    let stats = tokio::time::timeout(PATIENCE, running)
        .await
        .unwrap()
        .unwrap();
    assert!(stats.ok >= 2 && stats.failed >= 1, "{stats:?}");
    assert!(
        gate.shut_down(PATIENCE).await,
        "the manager gives its place back"
    );
    tokio::time::timeout(PATIENCE, serving)
        .await
        .unwrap()
        .unwrap();
    let m = broker.metrics().protocol("wmp", &[]);
    assert!(m.command(5) >= 3, "TAKEs counted");
}

/// A READY flood from new paths stops at the registry bound: the rest are dropped and
/// counted, and a GIVE is still served (it needs no remembered READY).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readys_beyond_the_registry_bound_are_dropped_and_counted() {
    use jobyard_wmp::RegistryConfig;
    use jobyard_wmp_wire::{decode, encode, Command, Give, Limits, Message, Ready};
    use jobyard_wmp_worker::transport::{AsyncSocket, SocketOptions};
    use jobyard_wmp_worker::zmq;

    let broker = Broker::in_memory();
    broker.start();
    let gate = Gate::new(100);
    let config = ManagerConfig {
        name: Some("m-bound".into()),
        registry: RegistryConfig {
            max_entries: 2,
            ..RegistryConfig::default()
        },
        ..ManagerConfig::default()
    };
    let front = WmpFrontEnd::bind(broker.clone(), "tcp://127.0.0.1:*", config).unwrap();
    let endpoint = front.endpoint().to_owned();
    let serving = Box::new(front).start(gate.clone());

    let ctx = zmq::Context::new();
    let ready = Message::new(
        Vec::new(),
        Command::Ready(Ready {
            roles: Some(vec!["q".into()]),
            worker: None,
        }),
    );
    let mut dealers = Vec::new();
    for _ in 0..5 {
        let mut d = AsyncSocket::new(&ctx, zmq::DEALER, &SocketOptions::default()).unwrap();
        d.socket().connect(&endpoint).unwrap();
        // Queued in libzmq until the connection is up.
        assert!(d.try_send(&encode(&ready)).unwrap());
        dealers.push(d);
    }
    let metrics = broker.metrics().protocol("wmp", &[]);
    let full = metrics
        .commands()
        .position(|(name, _)| name == "registry_full")
        .unwrap();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while metrics.command(full) < 3 {
        assert!(tokio::time::Instant::now() < deadline, "3 READYs refused");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(metrics.command(0), 5, "all five READYs counted as received");

    // A GIVE from a refused path still gets an answer.
    let give = Message::new(
        Vec::new(),
        Command::Give(Give {
            lock: "x".into(),
            roles: Some(vec!["q".into()]),
            queue: Some("q".into()),
        }),
    );
    let last = dealers.last_mut().unwrap();
    assert!(last.try_send(&encode(&give)).unwrap());
    let frames = tokio::time::timeout(PATIENCE, last.recv())
        .await
        .unwrap()
        .unwrap();
    let answer = decode(&frames, &Limits::default()).unwrap();
    assert!(matches!(answer.command, Command::No(_)), "{answer:?}");

    drop(dealers);
    assert!(gate.shut_down(PATIENCE).await);
    tokio::time::timeout(PATIENCE, serving)
        .await
        .unwrap()
        .unwrap();
    let _ = tokio::task::spawn_blocking(move || drop(ctx)).await;
}
