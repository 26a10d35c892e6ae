//! Forwarding one client connection to the leader unchanged, byte for byte, both ways,
//! until either side closes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use jobyard_broker::ClusterView;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::leader::{connect_to_leader, Forwarded, LEADER_WAIT};

/// Connections forwarded since the front door opened, per protocol: each is logged at
/// debug level with its running count, and the totals when the door closes.
#[derive(Debug, Default)]
pub(crate) struct ForwardCounts {
    beanstalk: AtomicU64,
    gearman: AtomicU64,
    http: AtomicU64,
}

impl ForwardCounts {
    fn counter(&self, protocol: Forwarded) -> &AtomicU64 {
        match protocol {
            Forwarded::Beanstalk => &self.beanstalk,
            Forwarded::Gearman => &self.gearman,
            Forwarded::Http => &self.http,
        }
    }

    /// Counts one more forwarded connection; returns the count so far.
    fn add(&self, protocol: Forwarded) -> u64 {
        self.counter(protocol).fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The count of `protocol` so far.
    pub(crate) fn get(&self, protocol: Forwarded) -> u64 {
        self.counter(protocol).load(Ordering::Relaxed)
    }
}

/// Forwards `client` (whose first bytes, `already_read`, were read to decide where it
/// goes) to the leader's listener for `protocol`, and copies both ways until either side
/// closes. With no leader reached within [`LEADER_WAIT`], the client is closed unanswered:
/// nothing it sent went anywhere, so it may safely retry.
pub(crate) async fn forward<S>(
    mut client: S,
    already_read: &[u8],
    protocol: Forwarded,
    peer: &str,
    view: &Arc<ClusterView>,
    counts: &ForwardCounts,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // The epoch before connecting: a leader that took over after this is a newer one,
    // which only shortens the splice.
    let epoch = view.get().epoch;
    let Some((mut leader, addr)) = connect_to_leader(view, protocol, LEADER_WAIT).await else {
        tracing::debug!(
            protocol = protocol.name(),
            "standby: no leader reached within {LEADER_WAIT:?}; closing {peer}"
        );
        return;
    };
    let count = counts.add(protocol);
    tracing::debug!(
        protocol = protocol.name(),
        "standby: forwarding {peer} to the leader at {addr} ({count} {} connection(s) so far)",
        protocol.name()
    );
    if !already_read.is_empty() && leader.write_all(already_read).await.is_err() {
        return;
    }
    // Ends when either side closes (or fails), or when another node takes the lease: the
    // spliced node is then dead or fenced, and a paused one would hold this client until
    // it ran again. The other side is closed by dropping it.
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut leader) => {}
        _ = leader_replaced(view, epoch) => tracing::debug!(
            protocol = protocol.name(),
            "standby: the leader at {addr} was replaced; closing {peer}"
        ),
    }
}

/// How often a spliced connection looks whether its leader was replaced.
const REPLACED_POLL: Duration = Duration::from_millis(200);

/// Resolves once the view shows a leader of a newer epoch than `epoch`.
async fn leader_replaced(view: &ClusterView, epoch: u64) {
    while view.get().epoch <= epoch {
        tokio::time::sleep(REPLACED_POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobyard_broker::Role;
    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};

    /// A "leader" that answers every read with the same bytes, upper-cased.
    async fn shouting_leader() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n @ 1..) = s.read(&mut buf).await {
                        let loud = buf[..n].to_ascii_uppercase();
                        if s.write_all(&loud).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_client_is_spliced_to_the_leader_with_the_bytes_already_read_first() {
        let addr = shouting_leader().await;
        let view = Arc::new(ClusterView::new("me".into()));
        view.update(|s| {
            s.role = Role::Standby;
            s.leader = Some("other".into());
            s.leader_addrs.gearman = Some(addr);
        });
        let door = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let door_addr = door.local_addr().unwrap();
        let counts = Arc::new(ForwardCounts::default());
        let serving = {
            let counts = counts.clone();
            tokio::spawn(async move {
                let (client, _) = door.accept().await.unwrap();
                forward(client, b"first ", Forwarded::Gearman, "t", &view, &counts).await;
            })
        };
        let mut client = TcpStream::connect(door_addr).await.unwrap();
        client.write_all(b"then more").await.unwrap();
        let mut got = Vec::new();
        while got.len() < b"FIRST THEN MORE".len() {
            let mut buf = [0u8; 64];
            let n = client.read(&mut buf).await.unwrap();
            assert!(n > 0, "the leader's answer arrives");
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, b"FIRST THEN MORE");
        drop(client);
        serving.await.unwrap();
        assert_eq!(counts.get(Forwarded::Gearman), 1);
        assert_eq!(counts.get(Forwarded::Beanstalk), 0);
    }

    #[tokio::test]
    async fn a_splice_ends_when_another_node_takes_the_lease() {
        // A leader that accepts and then never answers, as a paused one does.
        let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = silent.local_addr().unwrap().to_string();
        let held = tokio::spawn(async move { silent.accept().await.map(|(s, _)| s) });
        let view = Arc::new(ClusterView::new("me".into()));
        view.update(|s| {
            s.role = Role::Standby;
            s.epoch = 4;
            s.leader = Some("paused".into());
            s.leader_addrs.beanstalk = Some(addr);
        });
        let door = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let door_addr = door.local_addr().unwrap();
        let serving = {
            let view = view.clone();
            tokio::spawn(async move {
                let (client, _) = door.accept().await.unwrap();
                let counts = ForwardCounts::default();
                forward(client, b"", Forwarded::Beanstalk, "t", &view, &counts).await;
            })
        };
        let mut client = TcpStream::connect(door_addr).await.unwrap();
        let _leader_side = held.await.unwrap().unwrap();
        view.update(|s| {
            s.epoch = 5;
            s.leader = Some("next".into());
        });
        let mut buf = [0u8; 8];
        let read = tokio::time::timeout(Duration::from_secs(10), client.read(&mut buf)).await;
        assert!(matches!(read, Ok(Ok(0))), "the client is closed: {read:?}");
        serving.await.unwrap();
    }
}
