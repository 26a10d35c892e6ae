//! Polling (docs/jobd.md, "The jobs table") with jobd's bugs fixed: a poll takes at most as many rows per
//! target as it has free slots (never while paused), re-polls while a fetch came back
//! full, and parks targets that are full until a job ends or `continue` arrives. A fetch
//! that fails (database gone) is retried with growing pauses. A busy target's fetch may
//! wait for more free slots ([`batching`]), and ends of jobs ride on fetches' commits
//! ([`Carry`](super::carry::Carry)).

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::batching;
use super::carry::Carried;
use super::timing::Fetched;
use super::{State, Worker};
use crate::launch::Outcome;
use crate::store::{self, Claimed};

impl Worker {
    /// Starts a fetch for pending targets with free slots, unless one is running. A busy
    /// target waits for more free slots (see [`batching`]).
    pub(super) fn kick(&self) {
        self.kick_with(false);
    }

    /// [`Worker::kick`]; `now` fetches busy targets too (the batching wait is over).
    pub(super) fn kick_with(&self, now: bool) {
        if self.inner.shutting_down.load(Ordering::SeqCst) {
            return;
        }
        let (wants, arm_wait) = {
            let mut st = self.inner.state.lock().unwrap();
            if st.polling || st.pending.is_empty() {
                return;
            }
            let (wants, waiting) = fetch_wants(&mut st, now, self.inner.fetch_limit);
            if wants.is_empty() {
                let arm = waiting && !st.batch_wait_armed;
                if arm {
                    st.batch_wait_armed = true;
                    st.carry.open();
                }
                (None, arm)
            } else {
                st.polling = true;
                st.carry.open();
                (Some(wants), false)
            }
        };
        if arm_wait {
            self.fetch_after_batch_wait();
        }
        if let Some(wants) = wants {
            let w = self.clone();
            tokio::spawn(async move { w.fetch(wants).await });
        }
    }

    /// Ends a batching wait at [`batching::MAX_WAIT`]: fetches whatever is free then, and
    /// if no fetch follows, writes the ends that waited for one.
    pub(super) fn fetch_after_batch_wait(&self) {
        let w = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(batching::MAX_WAIT).await;
            w.inner.state.lock().unwrap().batch_wait_armed = false;
            w.kick_with(true);
            w.close_carry_unless_fetching();
        });
    }

    pub(super) async fn fetch(&self, wants: Vec<(String, u64)>) {
        let began = std::time::Instant::now();
        let (result, carried) = self.claim(&wants).await;
        // An end the database refused (a value its column rejects) failed the fetch, not a
        // lost database: fetch again at once; the done writer sanitises the end.
        let refused_end = carried && matches!(&result, Err(e) if store::is_data_error(e));
        let fetched = Fetched {
            began,
            committed: std::time::Instant::now(),
        };
        let mut retry_in = None;
        let mut orphans = Vec::new();
        {
            let mut st = self.inner.state.lock().unwrap();
            st.polling = false;
            match result {
                Ok(rows) => {
                    self.inner.metrics.rows_taken(rows.len());
                    st.retry_pause = Duration::from_millis(200);
                    for (t, limit) in &wants {
                        let got = rows.iter().filter(|r| &r.target == t).count() as u64;
                        if got == *limit {
                            st.pending.insert(t.clone());
                        }
                    }
                    for r in &rows {
                        if st.sched.free(&r.target) > 0 {
                            st.sched.push(&r.target, r.id);
                            st.premarked.insert(r.id, fetched);
                        } else {
                            // The target was paused, filled by run-manual or removed while
                            // the fetch ran: hand the row back rather than hold a `running`
                            // row that has not started, and poll again later.
                            orphans.push((r.id, r.target.clone()));
                        }
                    }
                }
                Err(e) => {
                    self.inner.metrics.db_error(true);
                    for (t, _) in &wants {
                        st.pending.insert(t.clone());
                    }
                    if refused_end {
                        tracing::warn!(error = %e, "jobd: the database refused a job's end written with a fetch; writing it on its own");
                    } else {
                        tracing::warn!(error = %e, "jobd: fetching jobs failed; will retry");
                        if !st.retry_armed {
                            st.retry_armed = true;
                            retry_in = Some(st.retry_pause);
                            st.retry_pause = (st.retry_pause * 2).min(Duration::from_secs(10));
                        }
                    }
                }
            }
        }
        if !orphans.is_empty() {
            let ids: Vec<u64> = orphans.iter().map(|o| o.0).collect();
            let released = self.inner.store.release(&ids, "waiting").await;
            {
                let mut st = self.inner.state.lock().unwrap();
                for (_, t) in orphans {
                    if st.sched.serves(&t) {
                        st.pending.insert(t);
                    }
                }
            }
            if let Err(e) = released {
                self.inner.metrics.db_error(false);
                tracing::error!(error = %e, "jobd: could not hand back fetched rows; the next start reclaims them");
            }
        }
        self.start_ready();
        match retry_in {
            Some(pause) => {
                let w = self.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(pause).await;
                    w.inner.state.lock().unwrap().retry_armed = false;
                    w.kick();
                });
            }
            None => self.kick(),
        }
        self.close_carry_unless_fetching();
    }

    /// When no fetch follows this one, the ends waiting for one go to the done writer.
    pub(super) fn close_carry_unless_fetching(&self) {
        let left = {
            let mut st = self.inner.state.lock().unwrap();
            if st.polling || st.batch_wait_armed {
                return;
            }
            st.carry.close()
        };
        self.write_apart(left);
    }

    /// Runs one fetch: opens it, then commits it with the ends of jobs that came since the
    /// previous fetch took its own (see [`Carry`]). Those ends are acknowledged once
    /// committed, or handed to the done writer if the fetch failed. Also says whether any
    /// end rode on it.
    pub(super) async fn claim(
        &self,
        wants: &[(String, u64)],
    ) -> (Result<Vec<Claimed>, sqlx::Error>, bool) {
        let opened = self.inner.store.open_fetch(wants).await;
        let carried = self.inner.state.lock().unwrap().carry.take();
        let result = match opened {
            Ok(open) => {
                let ends: Vec<(u64, &Outcome)> =
                    carried.iter().map(|c| (c.id, &c.outcome)).collect();
                self.inner.store.commit_fetch(open, &ends).await
            }
            Err(e) => Err(e),
        };
        let any = !carried.is_empty();
        if result.is_ok() {
            carried.into_iter().for_each(Carried::stored);
        } else {
            self.write_apart(carried);
        }
        (result, any)
    }
}

/// The pending targets to fetch now and how many rows each (its free slots, capped by
/// `fetch_limit`), dropping targets no longer served; also whether a busy target was left
/// pending to wait for more free slots (never when `now`).
fn fetch_wants(st: &mut State, now: bool, fetch_limit: u64) -> (Vec<(String, u64)>, bool) {
    let pending: Vec<String> = st.pending.iter().cloned().collect();
    let mut wants = Vec::new();
    let mut waiting = false;
    for t in pending {
        if !st.sched.serves(&t) {
            st.pending.remove(&t);
            continue;
        }
        let free = st.sched.free(&t);
        if !now && batching::wait_for_more(free, st.sched.concurrency(&t), fetch_limit) {
            waiting = true;
            continue;
        }
        let free = if fetch_limit > 0 {
            free.min(fetch_limit)
        } else {
            free
        };
        if free > 0 {
            st.pending.remove(&t);
            wants.push((t, free));
        }
    }
    (wants, waiting)
}
