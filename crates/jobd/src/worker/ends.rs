//! How a finished job's end reaches its row: in the commit of a fetch while fetches run
//! and other jobs are running ([`Carry`]), else through the done writer at once.

use super::carry::Carried;
use super::Worker;
use crate::launch::Outcome;

impl Worker {
    /// Hands ends no fetch will store (it failed, or none follows) to the done writer,
    /// each job's task hearing when its row is stored.
    pub(super) fn write_apart(&self, carried: Vec<Carried>) {
        for c in carried {
            let (id, outcome, stored) = c.into_parts();
            let w = self.clone();
            tokio::spawn(async move {
                if let Some(o) = w.inner.writer.write(id, outcome).await {
                    let _ = stored.send(o);
                }
            });
        }
    }

    /// Stores a job's end: in the commit of a fetch (the running one or the next) while
    /// fetches run and other jobs are running, else through the done writer at once.
    /// `None` only if the writer's task died with its runtime.
    ///
    /// A lone job's end does not ride: the fetch it starts may find nothing, and the end
    /// would then wait a round trip (the fetch's SELECT) for a commit it need not share
    /// (1x1 latency p50 4.05 -> 5.60 ms when it rode, A/B at load 5-6).
    pub(super) async fn store_end(&self, id: u64, outcome: Outcome) -> Option<Outcome> {
        let offered = {
            let mut st = self.inner.state.lock().unwrap();
            if st.sched.running() == 0 {
                Err(outcome)
            } else {
                st.carry.offer(id, outcome)
            }
        };
        match offered {
            Ok(stored) => stored.await.ok(),
            Err(outcome) => self.inner.writer.write(id, outcome).await,
        }
    }
}
