//! The connection layer with a toy line protocol: what any front end gets from it —
//! replies in order, blocking requests answered by engine notices, the connection limit,
//! half-close while waiting, and shutdown.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, BytesMut};
use jobyard_broker::{Broker, ProtocolMetrics};
use jobyard_engine::{ConnId, Lease, NoticeKind, ReserveOutcome, WaitMode};
use jobyard_net::placement::{Placement, Where};
use jobyard_net::{Decode, FrontEnd, Gate, Listener, Peer, Protocol, Session, Step, TcpFrontEnd};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// `PUT body` → `OK id`; `TAKE` blocks until a job is ready → `GOT id`; `QUIT` closes.
struct Toy {
    broker: Arc<Broker>,
    metrics: Arc<ProtocolMetrics>,
}

struct Lines;

impl Decode for Lines {
    type Request = Vec<u8>;
    fn decode(&mut self, buf: &mut BytesMut) -> Option<Vec<u8>> {
        let end = buf.iter().position(|&b| b == b'\n')?;
        let line = buf[..end].to_vec();
        buf.advance(end + 1);
        Some(line)
    }
}

struct ToySession {
    toy: Arc<Toy>,
    conn: ConnId,
    waiting: bool,
}

impl Session for ToySession {
    type Request = Vec<u8>;

    fn execute(&mut self, req: Vec<u8>, out: &mut BytesMut) -> Step {
        let now = Broker::now();
        let mut txn = self.toy.broker.lock();
        let q = txn.queue_id_or_create(b"toy");
        match req.as_slice() {
            b"QUIT" => Step::Close,
            b"TAKE" => match txn.reserve(
                self.conn,
                &[q],
                WaitMode::Best,
                Lease::Unlimited,
                None,
                false,
                now,
            ) {
                ReserveOutcome::Reserved(id) => {
                    out.put_slice(format!("GOT {id}\n").as_bytes());
                    Step::Done(txn.commit())
                }
                _ => {
                    self.waiting = true;
                    Step::Wait
                }
            },
            line => {
                let body = line.strip_prefix(b"PUT ").unwrap_or(line).to_vec();
                let id = txn.put(q, 1, 0, 60, body.into(), true, now).id;
                out.put_slice(format!("OK {id}\n").as_bytes());
                Step::Done(txn.commit())
            }
        }
    }

    fn notice(&mut self, notice: NoticeKind, out: &mut BytesMut) -> Step {
        match notice {
            NoticeKind::Reserved(id) if self.waiting => {
                self.waiting = false;
                out.put_slice(format!("GOT {id}\n").as_bytes());
                Step::Done(0)
            }
            _ if self.waiting => Step::Wait,
            _ => Step::Done(0),
        }
    }

    fn half_closed(&mut self, out: &mut BytesMut) {
        self.toy.broker.lock().cancel_wait(self.conn);
        out.put_slice(b"BYE\n");
    }

    fn stop_waiting(&mut self) {
        self.toy.broker.lock().cancel_wait(self.conn);
    }

    fn close(self) {}
}

impl Protocol for Toy {
    type Decoder = Lines;
    type Session = ToySession;
    fn name(&self) -> &'static str {
        "toy"
    }
    fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }
    fn metrics(&self) -> &Arc<ProtocolMetrics> {
        &self.metrics
    }
    fn decoder(&self) -> Lines {
        Lines
    }
    fn open(self: &Arc<Self>, conn: ConnId, _peer: &Peer) -> ToySession {
        ToySession {
            toy: self.clone(),
            conn,
            waiting: false,
        }
    }
}

async fn start(max: usize) -> (String, Gate, Arc<Toy>) {
    start_at(Gate::new(max)).await
}

async fn start_at(gate: Gate) -> (String, Gate, Arc<Toy>) {
    let broker = Broker::in_memory();
    broker.start();
    let metrics = broker.metrics().protocol("toy", &[]);
    let toy = Arc::new(Toy { broker, metrics });
    let listener = Listener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.describe();
    let front: Box<dyn FrontEnd> = Box::new(TcpFrontEnd {
        protocol: toy.clone(),
        listener,
    });
    jobyard_net::serve(vec![front], &gate);
    (addr, gate, toy)
}

struct Client {
    rd: BufReader<tokio::net::tcp::OwnedReadHalf>,
    wr: tokio::net::tcp::OwnedWriteHalf,
}

impl Client {
    async fn connect(addr: &str) -> Client {
        let (rd, wr) = TcpStream::connect(addr).await.unwrap().into_split();
        Client {
            rd: BufReader::new(rd),
            wr,
        }
    }
    async fn send(&mut self, text: &str) {
        self.wr.write_all(text.as_bytes()).await.unwrap();
    }
    /// The next line, or `None` at end of stream (within 5 s).
    async fn line(&mut self) -> Option<String> {
        let mut line = String::new();
        let n = tokio::time::timeout(Duration::from_secs(5), self.rd.read_line(&mut line))
            .await
            .expect("a reply within 5 s")
            .unwrap();
        (n > 0).then(|| line.trim_end().to_string())
    }
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order_and_a_wait_is_served_by_a_notice() {
    let (addr, _gate, toy) = start(10).await;
    let mut a = Client::connect(&addr).await;
    a.send("PUT x\nPUT y\nTAKE\nTAKE\nTAKE\nPUT z\n").await;
    assert_eq!(a.line().await.unwrap(), "OK 1");
    assert_eq!(a.line().await.unwrap(), "OK 2");
    assert_eq!(a.line().await.unwrap(), "GOT 1");
    assert_eq!(a.line().await.unwrap(), "GOT 2");
    // The third TAKE waits; `PUT z` behind it is not read until it is answered.
    let mut b = Client::connect(&addr).await;
    b.send("PUT w\n").await;
    assert_eq!(b.line().await.unwrap(), "OK 3");
    assert_eq!(a.line().await.unwrap(), "GOT 3");
    assert_eq!(a.line().await.unwrap(), "OK 4");
    assert_eq!(
        toy.metrics
            .connections_total
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
    a.send("QUIT\n").await;
    assert_eq!(a.line().await, None, "closed after QUIT");
}

#[tokio::test]
async fn the_limit_refuses_extra_connections_and_frees_places() {
    let (addr, _gate, toy) = start(1).await;
    let mut a = Client::connect(&addr).await;
    a.send("PUT x\n").await;
    assert_eq!(a.line().await.unwrap(), "OK 1");
    let mut b = Client::connect(&addr).await;
    assert_eq!(b.line().await, None, "refused at the limit");
    assert_eq!(
        toy.metrics
            .refused
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    a.send("QUIT\n").await;
    assert_eq!(a.line().await, None);
    // The place is free again (the closing session gave it back).
    let mut c = Client::connect(&addr).await;
    for _ in 0..50 {
        c.send("PUT y\n").await;
        if c.line().await.is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        c = Client::connect(&addr).await;
    }
    panic!("no place freed");
}

#[tokio::test]
async fn a_half_close_while_waiting_gets_the_protocols_last_reply() {
    let (addr, _gate, _toy) = start(10).await;
    let mut a = Client::connect(&addr).await;
    a.send("TAKE\n").await;
    a.wr.shutdown().await.unwrap();
    assert_eq!(a.line().await.unwrap(), "BYE");
    assert_eq!(a.line().await, None);
}

#[tokio::test]
async fn shutdown_ends_waiting_sessions_and_returns_once_all_are_gone() {
    let (addr, gate, toy) = start(10).await;
    let mut a = Client::connect(&addr).await;
    a.send("TAKE\n").await;
    let mut b = Client::connect(&addr).await;
    b.send("PUT x\n").await;
    // b's put may or may not be served to a's wait first; make a wait again if it was.
    let _ = b.line().await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(gate.shut_down(Duration::from_secs(5)).await);
    let waiting = toy.broker.lock().waiting_count();
    assert_eq!(waiting, 0, "no wait left behind");
    let mut rest = Vec::new();
    while let Some(l) = a.line().await {
        rest.push(l);
    }
    assert!(
        rest.len() <= 1,
        "at most the served job, then closed: {rest:?}"
    );
}

/// Producers pipelining puts and consumers pipelining blocking takes while every connection
/// is moved between the narrow and the wide runtime every millisecond: each put job is
/// handed out exactly once (a notice that arrives while its connection moves waits in the
/// mailbox, which moves with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_moved_between_runtimes_lose_no_job_and_hand_none_out_twice() {
    const PRODUCERS: usize = 4;
    const CONSUMERS: usize = 4;
    const PUTS_EACH: usize = 600;
    const BATCH: usize = 8;
    let placement = Placement::start(tokio::runtime::Handle::current()).unwrap();
    let gate = Gate::new(100).placed_by(Some(placement.clone()));
    let (addr, _gate, _toy) = start_at(gate).await;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flipper = tokio::spawn({
        let (placement, done) = (placement.clone(), done.clone());
        async move {
            let mut wide = false;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                wide = !wide;
                placement.move_all(if wide { Where::Wide } else { Where::Narrow });
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    });
    let take_each = PRODUCERS * PUTS_EACH / CONSUMERS;
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|_| tokio::spawn(take(addr.clone(), take_each)))
        .collect();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| tokio::spawn(put(addr.clone(), p, PUTS_EACH, BATCH)))
        .collect();
    let mut put_ids = std::collections::BTreeSet::new();
    for p in producers {
        put_ids.extend(p.await.unwrap());
    }
    // Each consumer's connection stays open until all are done: a closed one would give
    // its jobs back for the others to take again.
    let mut taken = Vec::new();
    let mut open = Vec::new();
    for c in consumers {
        let (ids, client) = c.await.unwrap();
        taken.extend(ids);
        open.push(client);
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    flipper.await.unwrap();
    assert_eq!(
        put_ids.len(),
        PRODUCERS * PUTS_EACH,
        "every put got its own id"
    );
    let taken_set: std::collections::BTreeSet<_> = taken.iter().cloned().collect();
    assert_eq!(taken_set.len(), taken.len(), "no job handed out twice");
    assert_eq!(taken_set, put_ids, "every job put was handed out");
    assert!(
        placement.moves() >= 20,
        "connections moved ({} moves)",
        placement.moves()
    );
}

/// Puts `count` jobs, `batch` at a time in one write; the ids the server gave them.
async fn put(addr: String, producer: usize, count: usize, batch: usize) -> Vec<String> {
    let mut c = Client::connect(&addr).await;
    let mut ids = Vec::new();
    for first in (0..count).step_by(batch) {
        let n = batch.min(count - first);
        let lines: String = (first..first + n)
            .map(|i| format!("PUT p{producer}-{i}\n"))
            .collect();
        c.send(&lines).await;
        for _ in 0..n {
            let line = c.line().await.expect("a reply to every put");
            ids.push(line.strip_prefix("OK ").expect("OK id").to_string());
        }
    }
    ids
}

/// Takes `count` jobs with two blocking takes always in flight; the ids handed out, and the
/// connection, which still holds them.
async fn take(addr: String, count: usize) -> (Vec<String>, Client) {
    let mut c = Client::connect(&addr).await;
    let mut sent = 2.min(count);
    c.send(&"TAKE\n".repeat(sent)).await;
    let mut ids = Vec::new();
    while ids.len() < count {
        let line = c.line().await.expect("a job for every take");
        ids.push(line.strip_prefix("GOT ").expect("GOT id").to_string());
        if sent < count {
            c.send("TAKE\n").await;
            sent += 1;
        }
    }
    (ids, c)
}
