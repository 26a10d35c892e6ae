//! Write-behind for the final `done` UPDATEs, group-commit style: one task writes them,
//! at once when it is idle (a lone job's row is written without waiting for company), and
//! the ends of jobs that arrive while a write is in flight go together into the next one,
//! as one UPDATE statement (one round trip, one commit, one fsync, instead of one each per
//! job; see [`Store::finish_batch`]).
//!
//! Nothing is acknowledged before it is stored: [`DoneWriter::write`] returns when the
//! row is `done` in the table, so a run-manual caller hears of its job, and a shutdown
//! finds the worker idle, only after the write; a crash before it leaves the row
//! `running`, which the next start reclaims (as before batching). A batch the database
//! rejects is written again row by row through [`Store::finish`], which retries and
//! sanitises, so one bad row never holds the others back.

use std::sync::OnceLock;

use tokio::sync::{mpsc, oneshot};

use super::Store;
use crate::launch::Outcome;

/// Most rows in one transaction.
const MAX_BATCH: usize = 64;

struct End {
    id: u64,
    outcome: Outcome,
    stored: oneshot::Sender<Outcome>,
}

/// The write-behind queue of one worker (its task starts with the first write, so a
/// worker can be built outside a runtime).
pub struct DoneWriter {
    store: Store,
    queue: OnceLock<mpsc::UnboundedSender<End>>,
}

impl DoneWriter {
    /// A writer for `store`'s table.
    pub fn new(store: Store) -> DoneWriter {
        DoneWriter {
            store,
            queue: OnceLock::new(),
        }
    }

    /// Records the end of job `id` and returns once it is stored, handing the outcome
    /// back (`None` only if the writer task died with its runtime).
    pub async fn write(&self, id: u64, outcome: Outcome) -> Option<Outcome> {
        let queue = self.queue.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(run(self.store.clone(), rx));
            tx
        });
        let (stored, done) = oneshot::channel();
        let end = End {
            id,
            outcome,
            stored,
        };
        match queue.send(end) {
            Ok(()) => done.await.ok(),
            Err(mpsc::error::SendError(end)) => {
                self.store.finish(end.id, &end.outcome).await;
                Some(end.outcome)
            }
        }
    }
}

async fn run(store: Store, mut queue: mpsc::UnboundedReceiver<End>) {
    let mut batch: Vec<End> = Vec::new();
    while let Some(first) = queue.recv().await {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(end) => batch.push(end),
                Err(_) => break,
            }
        }
        if batch.len() == 1 {
            store.finish(batch[0].id, &batch[0].outcome).await;
        } else {
            let ends: Vec<(u64, &Outcome)> = batch.iter().map(|e| (e.id, &e.outcome)).collect();
            if let Err(e) = store.finish_batch(&ends).await {
                store.count_batch_error();
                tracing::warn!(rows = ends.len(), error = %e, "jobd: writing job ends together failed; writing them one by one");
                for (id, o) in ends {
                    store.finish(id, o).await;
                }
            }
        }
        for end in batch.drain(..) {
            let _ = end.stored.send(end.outcome);
        }
    }
}
