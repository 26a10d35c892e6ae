//! The transactional-enqueue consumer: on the leader of a PostgreSQL storage, one thread
//! turns the rows applications commit into `<schema>.enqueue` into jobs (docs/postgres.md,
//! *Transactional enqueue*).
//!
//! Each round reads the oldest rows and, in one engine turn, puts each as a job of its
//! queue, as any front end does. The turn's records go to the log with the ids of the rows
//! they came from ([`jobyard_storage::Log::append_consuming`]): the batch that makes the
//! puts durable deletes those rows in the same PostgreSQL transaction, so a row becomes a
//! job exactly once whatever crashes when. The round waits for that batch before reading
//! again, so no row is read twice. Rows matching a live job's unique key, and rows the
//! server cannot take, are settled after it (deleted; moved to `enqueue_rejected`).

use std::sync::Arc;

use crate::Broker;

impl Broker {
    /// Starts the transactional-enqueue consumer when this broker leads a PostgreSQL
    /// storage (nothing otherwise). Bodies over `max_job_size` are rejected, as a
    /// front end rejects them. Call once, inside a tokio runtime, after [`Broker::start`].
    pub fn start_enqueue(self: &Arc<Self>, max_job_size: usize) {
        #[cfg(feature = "postgres")]
        consumer::start(self, max_job_size);
        #[cfg(not(feature = "postgres"))]
        let _ = max_job_size;
    }
}

#[cfg(feature = "postgres")]
mod consumer {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;
    use jobyard_engine::flows::STAGE_QUEUE_PREFIX;
    use jobyard_engine::NewJob;
    use jobyard_storage::{EnqueueRow, EnqueueSource};

    use crate::{Broker, Lsn, Txn};

    /// Rows read per round.
    const BATCH_ROWS: usize = 1000;

    /// How long the consumer waits for a notification before it looks anyway: covers a
    /// notification lost while its connection was re-made.
    pub(super) const FALLBACK_CHECK: Duration = Duration::from_secs(5);

    /// While the log has no room for new jobs, how often the consumer looks again.
    const NO_ROOM_RETRY: Duration = Duration::from_millis(250);

    /// After a PostgreSQL error, the first pause before the consumer reconnects.
    const ERROR_PAUSE: Duration = Duration::from_millis(250);

    /// Log bytes a put's record takes besides its body (the front ends' estimate).
    const RECORD_OVERHEAD: usize = 64;

    /// Starts the consumer thread when `broker` leads a PostgreSQL storage.
    pub(super) fn start(broker: &Arc<Broker>, max_job_size: usize) {
        if broker.leadership.is_none() {
            return;
        }
        let broker = broker.clone();
        let runtime = tokio::runtime::Handle::current();
        let started = std::thread::Builder::new()
            .name("jobyard-enqueue".into())
            .spawn(move || consume(&broker, &runtime, max_job_size));
        if let Err(e) = started {
            tracing::error!("cannot start the enqueue consumer: {e}; enqueue rows wait");
        }
    }

    /// What one round found.
    enum Round {
        /// It took a full batch: more may be waiting.
        More,
        /// The table is empty (as far as this round could see).
        Idle,
        /// New jobs are refused (the log has no room, or the server drains): rows wait.
        Held,
    }

    /// The consumer thread: rounds until the table is empty, then waits for a notification
    /// (or the fallback check); reconnects after errors, until the broker stops.
    fn consume(broker: &Broker, runtime: &tokio::runtime::Handle, max_job_size: usize) {
        let Some(log) = broker.log() else { return };
        let mut pause = ERROR_PAUSE;
        while !broker.stopping.load(Ordering::Acquire) {
            let mut source = match log.enqueue_source() {
                Some(Ok(source)) => source,
                Some(Err(e)) => {
                    tracing::warn!("enqueue consumer: {e}; trying again in {pause:?}");
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(FALLBACK_CHECK);
                    continue;
                }
                None => return,
            };
            pause = ERROR_PAUSE;
            // Looks at once: rows may have been committed while no node led.
            let failed = loop {
                if broker.stopping.load(Ordering::Acquire) {
                    return;
                }
                let waited = match round(broker, runtime, &mut source, max_job_size) {
                    Ok(Round::More) => Ok(true),
                    Ok(Round::Idle) => source.wait(FALLBACK_CHECK),
                    Ok(Round::Held) => {
                        // Room may come back any moment; a drain ends only with a restart.
                        let pause = if broker.draining() {
                            FALLBACK_CHECK
                        } else {
                            NO_ROOM_RETRY
                        };
                        std::thread::sleep(pause);
                        Ok(true)
                    }
                    Err(e) => Err(e),
                };
                if let Err(e) = waited {
                    break e;
                }
            };
            tracing::warn!("enqueue consumer: {failed}; reconnecting in {pause:?}");
            std::thread::sleep(pause);
        }
    }

    /// Reads a batch of rows, puts what can be put, and settles the rest.
    fn round(
        broker: &Broker,
        runtime: &tokio::runtime::Handle,
        source: &mut EnqueueSource,
        max_job_size: usize,
    ) -> Result<Round, jobyard_storage::PgError> {
        let rows = source.fetch(BATCH_ROWS)?;
        if rows.is_empty() {
            return Ok(Round::Idle);
        }
        let full = rows.len() == BATCH_ROWS;
        let mut taken = Taken::default();
        let lsn = put_rows(broker, &rows, max_job_size, &mut taken);
        // The rows' deletion commits with the batch: once it is durable they are gone, and
        // the next read cannot see them again.
        runtime.block_on(broker.wait_durable(lsn));
        let counts = broker.log().map(|log| log.stats());
        if let Some(counts) = counts {
            // Counted now: the rows are gone whatever happens to the settling below.
            let put = taken.put as u64;
            counts.enqueue_consumed.fetch_add(put, Ordering::Relaxed);
        }
        source.settle(&taken.coalesced, &taken.rejected)?;
        if let Some(counts) = counts {
            let coalesced = taken.coalesced.len() as u64;
            counts
                .enqueue_consumed
                .fetch_add(coalesced, Ordering::Relaxed);
            let rejected = taken.rejected.len() as u64;
            counts
                .enqueue_rejected
                .fetch_add(rejected, Ordering::Relaxed);
        }
        for (id, reason) in &taken.rejected {
            tracing::warn!("enqueue row {id} rejected: {reason} (moved to enqueue_rejected)");
        }
        Ok(if taken.held {
            Round::Held
        } else if full {
            Round::More
        } else {
            Round::Idle
        })
    }

    /// What a turn did with its rows.
    #[derive(Default)]
    struct Taken {
        /// Rows put as jobs.
        put: usize,
        /// Rows whose unique key matched a live job: deleted without a job.
        coalesced: Vec<i64>,
        /// Rows refused, with the reason.
        rejected: Vec<(i64, String)>,
        /// New jobs were refused before the end of the rows: the rest wait.
        held: bool,
    }

    /// Puts `rows` in one engine turn, in id order, stopping at the first row that must wait
    /// (the log has no room, or the server drains); returns the turn's log position.
    fn put_rows(
        broker: &Broker,
        rows: &[EnqueueRow],
        max_job_size: usize,
        taken: &mut Taken,
    ) -> Lsn {
        let Some(log) = broker.log() else { return 0 };
        let now = Broker::now();
        let mut txn = broker.lock();
        let mut consumed = Vec::with_capacity(rows.len());
        for row in rows {
            if let Some(reason) = refusal(row, max_job_size) {
                taken.rejected.push((row.id, reason));
                continue;
            }
            // A draining server takes no new jobs until it restarts, and a full log none
            // until it has room: the rows stay for later (or for the next leader).
            if broker.draining() || !log.has_room(row.body.len() + RECORD_OVERHEAD) {
                taken.held = true;
                break;
            }
            let q = txn.queue_id_or_create(row.queue.as_bytes());
            // An empty key is no key, as in Gearman.
            let unique = row
                .unique_key
                .as_deref()
                .filter(|k| !k.is_empty())
                .map(str::as_bytes);
            if unique.is_some_and(|key| txn.find_unique(q, key).is_some()) {
                taken.coalesced.push(row.id);
                continue;
            }
            let delay = row.delay_seconds;
            txn.put_job(
                NewJob {
                    queue: q,
                    pri: row.priority,
                    // beanstalkd's rule: a TTR of 0 is taken as 1 second.
                    ttr: row.ttr_seconds.max(1),
                    ready_at: if delay > 0 {
                        now + delay as u64 * 1000
                    } else {
                        0
                    },
                    delay,
                    body: Bytes::copy_from_slice(&row.body),
                    unique: unique.map(Bytes::copy_from_slice),
                    durable: true,
                    attrs: None,
                },
                now,
            );
            consumed.push(row.id);
        }
        taken.put = consumed.len();
        commit_consuming(txn, consumed)
    }

    /// Commits a turn whose puts came from the enqueue rows `ids`: its records go to the log
    /// with the ids, so the batch that writes them also deletes the rows.
    fn commit_consuming(mut txn: Txn<'_>, ids: Vec<i64>) -> Lsn {
        if let Some(log) = txn.broker.log() {
            let engine = &mut txn.core.engine;
            if engine.has_changes() {
                txn.lsn = log.append_consuming(engine.take_changes(), ids);
            }
        }
        txn.commit()
    }

    /// Why a row cannot become a job, if it cannot (the table's checks cover the queue name's
    /// length and the numbers' ranges).
    fn refusal(row: &EnqueueRow, max_job_size: usize) -> Option<String> {
        if row.body.len() > max_job_size {
            return Some(format!(
                "body of {} bytes is over --max-job-size ({max_job_size})",
                row.body.len()
            ));
        }
        queue_refusal(&row.queue)
    }

    /// Why a queue name is refused: the rule of the HTTP API's puts (1 to 200 bytes, no
    /// whitespace or control characters, not a flow stage's queue).
    fn queue_refusal(queue: &str) -> Option<String> {
        if queue.is_empty() || queue.len() > 200 {
            return Some(format!("queue name of {} bytes (1 to 200)", queue.len()));
        }
        if queue.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Some(format!(
                "queue name {queue:?} has whitespace or control characters"
            ));
        }
        if queue.starts_with(STAGE_QUEUE_PREFIX) {
            return Some(format!(
                "queue {queue:?} holds a flow's stage: jobs enter it only through its flow"
            ));
        }
        None
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn row(queue: &str, body: &[u8]) -> EnqueueRow {
            EnqueueRow {
                id: 1,
                queue: queue.into(),
                body: body.to_vec(),
                priority: 1024,
                delay_seconds: 0,
                ttr_seconds: 60,
                unique_key: None,
            }
        }

        #[test]
        fn refuses_bodies_over_the_limit_and_names_the_api_refuses() {
            assert_eq!(refusal(&row("emails", b"12345"), 5), None);
            assert!(refusal(&row("emails", b"123456"), 5)
                .is_some_and(|why| why.contains("--max-job-size")));
            assert!(refusal(&row("two words", b""), 5).is_some());
            assert!(refusal(&row("", b""), 5).is_some());
            assert!(refusal(&row(&format!("{STAGE_QUEUE_PREFIX}x"), b""), 5).is_some());
        }
    }
}
