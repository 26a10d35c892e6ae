//! Where a standby sends a client: the leader's advertised listener for the client's
//! protocol, as the cluster view says, reached within a bounded wait.

use std::sync::Arc;
use std::time::Duration;

use jobyard_broker::{ClusterState, ClusterView, Role};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// How long a connection accepted while no leader is known (or the known one does not
/// answer) waits for one before it is closed: a takeover takes about 3-4 s after a
/// leader's death, so a client that connects in between is carried over to the new one.
pub(crate) const LEADER_WAIT: Duration = Duration::from_secs(5);

/// How long one attempt to reach the leader may take; a leader that does not answer in
/// this time is tried again (the view may name another one by then).
const CONNECT_ATTEMPT: Duration = Duration::from_secs(1);

/// How often the view is read again while no leader can be reached.
const RETRY_EVERY: Duration = Duration::from_millis(100);

/// The protocols a standby forwards, each to the leader's listener of the same protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Forwarded {
    Beanstalk,
    Gearman,
    Http,
}

impl Forwarded {
    /// The protocol's name, as the log and the metrics' labels spell it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Forwarded::Beanstalk => "beanstalk",
            Forwarded::Gearman => "gearman",
            Forwarded::Http => "http",
        }
    }
}

/// The leader's `HOST:PORT` for `protocol`, if this node is a standby that knows of a
/// leader other than itself (never itself: a stale view must not make a node forward to
/// its own front door, round and round) that listens for that protocol.
pub(crate) fn leader_address(state: &ClusterState, protocol: Forwarded) -> Option<String> {
    if state.role != Role::Standby {
        return None;
    }
    let leader = state.leader.as_deref()?;
    if leader == state.node {
        return None;
    }
    let addrs = &state.leader_addrs;
    match protocol {
        Forwarded::Beanstalk => addrs.beanstalk.clone(),
        Forwarded::Gearman => addrs.gearman.clone(),
        Forwarded::Http => addrs.http.clone(),
    }
}

/// Whether a standby can serve its clients by forwarding: it knows a leader to forward to.
pub(crate) fn can_forward(state: &ClusterState) -> bool {
    state.role == Role::Standby && state.leader.as_deref().is_some_and(|l| l != state.node)
}

/// A connection to the leader's listener for `protocol` (TCP_NODELAY set, as every front
/// end sets it), and its address; `None` when no leader could be reached within `wait`.
/// The view is read again before every attempt, so a takeover during the wait is followed.
pub(crate) async fn connect_to_leader(
    view: &Arc<ClusterView>,
    protocol: Forwarded,
    wait: Duration,
) -> Option<(TcpStream, String)> {
    let deadline = Instant::now() + wait;
    loop {
        if let Some(addr) = leader_address(&view.get(), protocol) {
            let left = deadline.saturating_duration_since(Instant::now());
            let attempt = CONNECT_ATTEMPT.min(left).max(Duration::from_millis(10));
            match tokio::time::timeout(attempt, TcpStream::connect(&addr)).await {
                Ok(Ok(stream)) => {
                    let _ = stream.set_nodelay(true);
                    return Some((stream, addr));
                }
                Ok(Err(e)) => tracing::debug!("standby: leader at {addr} not reached: {e}"),
                Err(_) => tracing::debug!("standby: leader at {addr} did not answer in time"),
            }
        }
        if Instant::now() + RETRY_EVERY > deadline {
            return None;
        }
        tokio::time::sleep(RETRY_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobyard_broker::Addrs;

    fn standby_of(leader: &str) -> ClusterView {
        let view = ClusterView::new("me".into());
        view.update(|s| {
            s.role = Role::Standby;
            s.leader = Some(leader.into());
            s.leader_addrs = Addrs {
                beanstalk: Some("10.0.0.1:11300".into()),
                gearman: None,
                http: Some("10.0.0.1:8080".into()),
            };
        });
        view
    }

    #[test]
    fn a_standby_forwards_to_the_leaders_listener_of_the_same_protocol() {
        let state = standby_of("other").get();
        assert!(can_forward(&state));
        assert_eq!(
            leader_address(&state, Forwarded::Beanstalk).as_deref(),
            Some("10.0.0.1:11300")
        );
        assert_eq!(
            leader_address(&state, Forwarded::Http).as_deref(),
            Some("10.0.0.1:8080")
        );
        assert_eq!(
            leader_address(&state, Forwarded::Gearman),
            None,
            "the leader's Gearman listener is off"
        );
    }

    #[test]
    fn no_address_while_starting_leading_or_naming_itself() {
        let view = standby_of("me");
        assert!(!can_forward(&view.get()), "never forward to oneself");
        assert_eq!(leader_address(&view.get(), Forwarded::Beanstalk), None);
        let view = standby_of("other");
        view.update(|s| s.role = Role::Starting);
        assert_eq!(leader_address(&view.get(), Forwarded::Beanstalk), None);
        view.update(|s| s.role = Role::Leader);
        assert!(!can_forward(&view.get()));
        view.update(|s| {
            s.role = Role::Standby;
            s.leader = None;
        });
        assert_eq!(leader_address(&view.get(), Forwarded::Beanstalk), None);
    }

    #[tokio::test]
    async fn the_wait_for_a_leader_follows_the_view_and_gives_up_in_time() {
        let view = Arc::new(ClusterView::new("me".into()));
        let started = Instant::now();
        let none = connect_to_leader(&view, Forwarded::Beanstalk, Duration::from_millis(300));
        assert!(none.await.is_none());
        assert!(started.elapsed() >= Duration::from_millis(200));

        let leader = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = leader.local_addr().unwrap().to_string();
        let later = {
            let view = view.clone();
            let addr = addr.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                view.update(|s| {
                    s.role = Role::Standby;
                    s.leader = Some("other".into());
                    s.leader_addrs.beanstalk = Some(addr);
                });
            })
        };
        let (_stream, reached) = connect_to_leader(&view, Forwarded::Beanstalk, LEADER_WAIT)
            .await
            .expect("the leader named during the wait is reached");
        assert_eq!(reached, addr);
        later.await.unwrap();
    }
}
