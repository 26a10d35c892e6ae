//! jobd-master: workers register with it; it fans poke, pause, continue, status,
//! run-manual and send-signal out to them and merges the answers (docs/jobd.md, "Protocol").
//!
//! Fixed on the way: pause/continue answer `"ok"`; a worker's error or disconnect during
//! run-manual becomes per-id `errors` instead of failing the whole call; status,
//! pause/continue and send-signal wait at most `worker_timeout` per worker; a worker that
//! stays silent for a whole ping interval is dropped; send-signal goes to the worker running
//! the job when known (else to every worker of the target); re-registration replaces a
//! worker's targets; a registration without targets is refused.

mod accept;
mod broadcast;
mod jobs;
mod manual;
mod poke;
mod registry;
mod signal;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub use accept::{start_master, MasterHandle};

use crate::connection::{PeerConnection, ReplyFuture, RequestHandler};

struct Registered {
    connection: Arc<PeerConnection>,
    name: String,
    targets: Vec<String>,
}

#[derive(Default)]
struct State {
    workers: Vec<Registered>,
    to_poke: BTreeSet<String>,
    /// Poked targets no worker serves yet, sent to the first one that registers them.
    waiting_to_poke: BTreeSet<String>,
    last_flush: Option<Instant>,
    flush_armed: bool,
    /// Which worker runs each job of an in-flight run-manual (for send-signal).
    job_worker: HashMap<u64, Arc<PeerConnection>>,
    round_robin: usize,
}

struct Inner {
    state: Mutex<State>,
    throttle: Duration,
    worker_timeout: Duration,
}

/// A cheap handle on the master's state.
#[derive(Clone)]
pub struct Master {
    inner: Arc<Inner>,
}

fn ok() -> Result<Value, String> {
    Ok(Value::String("ok".into()))
}

impl Master {
    async fn dispatch(
        &self,
        link: Arc<PeerConnection>,
        kind: &str,
        data: Value,
    ) -> Result<Value, String> {
        match kind {
            "register-worker" => self.register(link, &data),
            "poke" => self.poke(&data),
            "pause" => self.pause(&data, "pause").await,
            "continue" => self.pause(&data, "continue").await,
            "status" => Ok(self.status(&data).await),
            "run-manual" => self.run_manual(&data).await,
            "send-signal" => self.send_signal(&data).await,
            other => Err(format!("unknown request type: '{other}'")),
        }
    }
}

impl RequestHandler for Master {
    fn handle(&self, link: Arc<PeerConnection>, kind: String, data: Value) -> ReplyFuture {
        let m = self.clone();
        Box::pin(async move { m.dispatch(link, &kind, data).await })
    }
}
