//! The ends of finished jobs written in the commit of the worker's next fetch, instead of
//! by the done writer in a transaction of their own.
//!
//! Why: under load a job's end and the fetch of the next row come together (the end
//! frees the slot the fetch fills). Written apart they cost MariaDB two commits (two log
//! flushes) and two wake-ups of a connection thread; written in the fetch's transaction,
//! one. The carry is open while fetches are running: an end that comes before a fetch
//! sends its second round trip (the UPDATEs and the `COMMIT`) rides on it, one that comes
//! later waits for the next fetch, which under load follows at once (the slot that end
//! freed is one it fills); when the fetches stop, the ends still waiting go to the done
//! writer. A fetch that waits for more free slots (`batching`) keeps the carry open: it
//! is coming, within `batching::MAX_WAIT`. Nothing is acknowledged before it is stored:
//! the job's task waits until the fetch has committed, and if the fetch fails its ends go
//! to the done writer (which retries and sanitises), so a row is never left `running` by
//! this.

use tokio::sync::oneshot;

use crate::launch::Outcome;

/// Largest output (stdout plus stderr, in bytes) an end may have to ride on a fetch: its
/// values go into the SQL text as hex literals (twice their size), and a large row would
/// slow the commit the next jobs wait for, so large outputs go to the done writer.
pub const MAX_CARRIED_OUTPUT: usize = 16 * 1024;

/// One end riding on a fetch.
pub struct Carried {
    /// The job's row id.
    pub id: u64,
    /// How it ended.
    pub outcome: Outcome,
    stored: oneshot::Sender<Outcome>,
}

impl Carried {
    /// Tells the job's task its row is `done` in the table (the fetch committed).
    pub fn stored(self) {
        let _ = self.stored.send(self.outcome);
    }

    /// Hands the end back to be written another way; the returned sender tells the job's
    /// task once that is done.
    pub fn into_parts(self) -> (u64, Outcome, oneshot::Sender<Outcome>) {
        (self.id, self.outcome, self.stored)
    }
}

/// The ends waiting for the next fetch's commit, while fetches run.
#[derive(Default)]
pub struct Carry {
    open: bool,
    ends: Vec<Carried>,
}

impl Carry {
    /// A fetch has started: ends may ride on it, or on the ones after it, until
    /// [`Carry::close`].
    pub fn open(&mut self) {
        self.open = true;
    }

    /// Offers a job's end to the fetches. `Ok`: it rides, and the receiver hears when it is
    /// stored; `Err`: no fetch is running or the output is too large, write it yourself.
    pub fn offer(
        &mut self,
        id: u64,
        outcome: Outcome,
    ) -> Result<oneshot::Receiver<Outcome>, Outcome> {
        if !self.open || outcome.stdout.len() + outcome.stderr.len() > MAX_CARRIED_OUTPUT {
            return Err(outcome);
        }
        let (stored, rx) = oneshot::channel();
        self.ends.push(Carried {
            id,
            outcome,
            stored,
        });
        Ok(rx)
    }

    /// A fetch sends its commit: it takes the ends that came so far; later ones wait for
    /// the next fetch.
    pub fn take(&mut self) -> Vec<Carried> {
        std::mem::take(&mut self.ends)
    }

    /// The fetches stopped: no more ends ride, and those still waiting are returned, to
    /// be written another way.
    pub fn close(&mut self) -> Vec<Carried> {
        self.open = false;
        self.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(stdout: &str) -> Outcome {
        Outcome {
            code: Some(0),
            signal: None,
            stdout: stdout.into(),
            stderr: String::new(),
        }
    }

    #[test]
    fn ends_ride_only_while_a_fetch_is_open() {
        let mut c = Carry::default();
        assert!(c.offer(1, ended("")).is_err());
        c.open();
        assert!(c.offer(2, ended("a")).is_ok());
        assert!(c.offer(3, ended("b")).is_ok());
        let taken: Vec<u64> = c.take().into_iter().map(|e| e.id).collect();
        assert_eq!(taken, vec![2, 3]);
        assert!(c.offer(4, ended("")).is_ok(), "waits for the next fetch");
        let left: Vec<u64> = c.close().into_iter().map(|e| e.id).collect();
        assert_eq!(left, vec![4]);
        assert!(c.offer(5, ended("")).is_err());
        assert!(c.close().is_empty());
    }

    #[test]
    fn large_outputs_do_not_ride() {
        let mut c = Carry::default();
        c.open();
        let big = "x".repeat(MAX_CARRIED_OUTPUT + 1);
        assert!(c.offer(1, ended(&big)).is_err());
    }

    #[tokio::test]
    async fn the_task_hears_when_its_end_is_stored() {
        let mut c = Carry::default();
        c.open();
        let rx = c.offer(5, ended("out")).ok().unwrap();
        for e in c.take() {
            e.stored();
        }
        assert_eq!(rx.await.unwrap().stdout, "out");
    }
}
