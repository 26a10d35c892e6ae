//! The Rust worker SDK in-process against a manager built from this crate's own ROUTER
//! helpers (libzmq on both ends): handlers per role, a panicking handler, and graceful stop.
//! Interop with independent libzmq peers (pyzmq) is tested in tests/wmp/.

use std::time::Duration;

use bytes::Bytes;
use jobyard_wmp_wire::*;
use jobyard_wmp_worker::transport::{AsyncSocket, Sent, SocketOptions};
use jobyard_wmp_worker::worker::{self, Outcome, Worker};

/// Generous bound so a broken build fails instead of hanging; not a timing assertion.
const PATIENCE: Duration = Duration::from_secs(20);

struct Manager {
    router: AsyncSocket,
    _ctx: zmq::Context,
}

impl Manager {
    fn bind() -> (Manager, String) {
        let ctx = zmq::Context::new();
        let router = AsyncSocket::bind_router(
            &ctx,
            "tcp://127.0.0.1:*",
            &Limits::default(),
            &SocketOptions::default(),
        )
        .expect("bind");
        let endpoint = router.socket().get_last_endpoint().unwrap().unwrap();
        (Manager { router, _ctx: ctx }, endpoint)
    }

    async fn recv(&mut self) -> Message {
        loop {
            let frames = tokio::time::timeout(PATIENCE, self.router.recv())
                .await
                .expect("a message in time")
                .expect("recv");
            let msg = decode(&frames, &Limits::default()).expect("the SDK sends valid WMP/1");
            if !matches!(msg.command, Command::Ready(_)) {
                return msg;
            }
        }
    }

    async fn ready(&mut self) -> (Path, Ready) {
        let frames = tokio::time::timeout(PATIENCE, self.router.recv())
            .await
            .unwrap()
            .unwrap();
        let msg = decode(&frames, &Limits::default()).unwrap();
        match msg.command {
            Command::Ready(r) => (msg.path, r),
            other => panic!("expected READY, got {other:?}"),
        }
    }

    fn send(&mut self, path: &Path, command: Command) {
        assert_eq!(
            self.router
                .send_now(&encode(&Message::new(path.clone(), command))),
            Sent::Queued
        );
    }

    /// WAKE → GIVE → TAKE → DONE for one job.
    async fn run_job(&mut self, path: &Path, queue: &str, job: u64, body: &'static [u8]) -> Done {
        self.send(
            path,
            Command::Wake(Wake {
                queue: Some(queue.into()),
                manager: Some("m".into()),
            }),
        );
        let lock = match self.recv().await.command {
            Command::Give(g) => g.lock,
            other => panic!("expected GIVE, got {other:?}"),
        };
        self.send(
            path,
            Command::Take(Take {
                lock,
                manager: "m".into(),
                job,
                attempt: 1,
                queue: queue.into(),
                timeout_ms: 60_000,
                body: Bytes::from_static(body),
            }),
        );
        match self.recv().await.command {
            Command::Done(d) => d,
            other => panic!("expected DONE, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn handlers_per_role_and_a_panicking_handler() {
    let (mut m, endpoint) = Manager::bind();
    let worker = Worker::builder()
        .connect(endpoint)
        .concurrency(2)
        .handle("echo", |job| async move { Outcome::Ok(job.body) })
        .handle("boom", |_job| async move { panic!("handler bug") })
        .build()
        .unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(stop_rx));
    let (path, ready) = m.ready().await;
    assert_eq!(
        ready.roles,
        Some(vec!["boom".to_string(), "echo".to_string()])
    );

    let done = m.run_job(&path, "echo", 1, b"hi").await;
    assert_eq!(
        (done.status, done.result),
        (Status::Ok, Bytes::from_static(b"hi"))
    );

    let done = m.run_job(&path, "boom", 2, b"x").await;
    assert_eq!(
        (done.status, done.error.as_deref()),
        (Status::Fail, Some("panic"))
    );

    stop_tx.send(()).unwrap();
    let stats = tokio::time::timeout(PATIENCE, running)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((stats.jobs_done, stats.ok, stats.failed), (2, 1, 1));
}

#[tokio::test]
async fn build_errors() {
    assert!(matches!(
        Worker::builder()
            .handle("q", |j| async move { Outcome::Ok(j.body) })
            .build(),
        Err(worker::BuildError::NoManagers)
    ));
    assert!(matches!(
        Worker::builder().connect("tcp://127.0.0.1:1").build(),
        Err(worker::BuildError::NoHandlers)
    ));
    assert!(matches!(
        Worker::builder()
            .connect("tcp://127.0.0.1:1")
            .handle("a,b", |j| async move { Outcome::Ok(j.body) })
            .build(),
        Err(worker::BuildError::BadRole(_))
    ));
    assert!(matches!(
        Worker::builder()
            .connect("127.0.0.1:5570")
            .handle("q", |j| async move { Outcome::Ok(j.body) })
            .build(),
        Err(worker::BuildError::BadEndpoint(_))
    ));
}

#[tokio::test]
async fn any_queue_handler_announces_no_roles() {
    let (mut m, endpoint) = Manager::bind();
    let worker = Worker::builder()
        .connect(endpoint)
        .handle_any(|job| async move { Outcome::Ok(Bytes::from(job.queue.into_bytes())) })
        .build()
        .unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(stop_rx));
    let (path, ready) = m.ready().await;
    assert_eq!(ready.roles, None);
    let done = m.run_job(&path, "whatever", 1, b"").await;
    assert_eq!(done.result, Bytes::from_static(b"whatever"));
    stop_tx.send(()).unwrap();
    tokio::time::timeout(PATIENCE, running)
        .await
        .unwrap()
        .unwrap();
}
