//! `wait-ready`: how long a (re)started server takes to accept a connection and to hold
//! every job again, for any protocol that can count its jobs over one connection.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::conn::Conn;

/// Pause before connecting or asking again: short beside a restart, which takes seconds,
/// so the measured time is late by at most this much.
const POLL_INTERVAL: Duration = Duration::from_millis(2);

/// One protocol's way of asking a server how many jobs it holds.
pub trait JobCount {
    /// The jobs' state the count is of, for the error at the time limit.
    const STATE: &'static str;

    /// Sends one request on `conn` and reads the count from its reply.
    async fn count(&self, conn: &mut Conn) -> io::Result<u64>;
}

/// When the server could be reached and when it held enough jobs.
pub struct Ready {
    /// Seconds from the start of the clock to the first accepted connection.
    pub connect_s: f64,
    /// Seconds from the start of the clock to the count reaching its target.
    pub ready_s: f64,
    /// The count then.
    pub jobs: u64,
}

/// Asks `probe` for the count until it reaches `count` or the clock reaches `limit`,
/// connecting again while refused and after a connection fails. Times are from `since`.
pub async fn wait_ready<P: JobCount>(
    addr: SocketAddr,
    probe: P,
    count: u64,
    since: Instant,
    limit: Instant,
) -> Result<Ready, String> {
    let mut last = 0;
    let mut connected_at = None;
    while Instant::now() < limit {
        let Ok(mut conn) = Conn::connect(addr).await else {
            tokio::time::sleep(POLL_INTERVAL).await;
            continue;
        };
        let connected = *connected_at.get_or_insert_with(Instant::now);
        while Instant::now() < limit {
            let Ok(jobs) = probe.count(&mut conn).await else {
                break;
            };
            last = jobs;
            if jobs >= count {
                return Ok(Ready {
                    connect_s: connected.duration_since(since).as_secs_f64(),
                    ready_s: Instant::now().duration_since(since).as_secs_f64(),
                    jobs,
                });
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
    Err(format!(
        "only {last} of {count} jobs {} before the time limit",
        P::STATE
    ))
}
