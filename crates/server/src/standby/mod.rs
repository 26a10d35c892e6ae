//! A standby's front door: while `Broker::open` blocks (another node leads the PostgreSQL
//! storage), the node still listens on its beanstalkd, Gearman and HTTP addresses and
//! passes its clients to the leader, so clients and load balancers may use any node's
//! address (docs/postgres.md, "Any node serves clients").
//!
//! - beanstalkd and Gearman: every connection is forwarded unchanged to the leader's
//!   listener of the same protocol ([`splice`]), the leader looked up in the cluster view
//!   per connection ([`leader`]);
//! - HTTP: `GET /v1/health` and `GET /v1/cluster` are answered here, anything else is
//!   forwarded ([`http`]); with HTTPS the whole connection is forwarded unread (TLS ends at
//!   the leader).
//!
//! WMP and the jobd worker are not served here: they run on the leader only.
//!
//! When this node comes to lead, the door closes ([`FrontDoor::close`]): it stops
//! accepting, closes every connection it forwarded (they point at the former leader, dead
//! or fenced; closing them at once spares their clients TCP's timeouts when that node
//! vanished without a word), and hands its beanstalkd and Gearman listening sockets to
//! the real front ends, so connections arriving meanwhile wait in the socket's backlog
//! instead of being refused. The HTTP listener is closed and bound again by the HTTP front
//! end (a moment in which that port refuses).

mod http;
mod leader;
mod splice;

use std::sync::Arc;
use std::time::Duration;

use jobyard_broker::{ClusterView, Role};
use jobyard_net::{listen, Gate, Listener, Stream};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use leader::Forwarded;
use splice::{forward, ForwardCounts};

/// What a standby's front door listens on: the node's own listener settings.
pub(crate) struct DoorConfig {
    /// The beanstalkd listener's address (`HOST:PORT` or `unix:PATH`), if on.
    pub beanstalk: Option<String>,
    /// The Gearman listener's address, if on.
    pub gearman: Option<String>,
    /// The HTTP listener's address and security, if on.
    pub http: Option<(String, jobyard_http::Security)>,
    /// Connections held at once (`--max-connections`).
    pub max_connections: usize,
}

/// What every accept loop and connection of the door shares.
#[derive(Clone)]
pub(crate) struct Door {
    /// The connection limit, and the signal that closes the door.
    gate: Gate,
    view: Arc<ClusterView>,
    counts: Arc<ForwardCounts>,
}

/// A listening socket the door gives back when it closes.
enum Returned {
    /// A byte-stream protocol's listener, named as the real front end asks for it.
    Stream(&'static str, Listener),
    Http(TcpListener),
}

/// The listeners of a closed door, for the real front ends.
pub(crate) struct HandedOver {
    /// beanstalkd's and Gearman's listeners, named after their protocol, in the form
    /// `jobyard_net::listen::listener_for` takes systemd's sockets.
    pub streams: Vec<(Option<String>, Listener)>,
    /// The HTTP listener: to drop just before the HTTP front end binds its address.
    pub http: Option<TcpListener>,
}

/// An open front door.
pub(crate) struct FrontDoor {
    door: Door,
    accept_loops: Vec<JoinHandle<Returned>>,
}

/// Resolves once the cluster view shows that this node heard from PostgreSQL and is a
/// standby (or is catching up under a known leader): the moment the door opens. A node
/// that leads at once never opens it.
pub(crate) async fn standing_by(view: &ClusterView) {
    loop {
        let state = view.get();
        let heard = state.leader.is_some() || state.epoch > 0;
        match state.role {
            Role::Standby => return,
            Role::Starting if heard => return,
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl FrontDoor {
    /// Binds the node's listeners (systemd's sockets where it passed them, as the real
    /// front ends would) and starts forwarding. An error names the address that failed.
    pub(crate) async fn open(
        config: &DoorConfig,
        view: Arc<ClusterView>,
        activated: &mut Vec<(Option<String>, Listener)>,
    ) -> Result<FrontDoor, String> {
        let door = Door {
            gate: Gate::new(config.max_connections),
            view,
            counts: Arc::new(ForwardCounts::default()),
        };
        let cannot =
            |addr: &str, e: &dyn std::fmt::Display| format!("cannot listen on {addr}: {e}");
        let mut accept_loops = Vec::new();
        let mut listening = Vec::new();
        if let Some(addr) = &config.beanstalk {
            let listener = listen::listener_for(addr, activated, "beanstalk")
                .await
                .map_err(|e| cannot(addr, &e))?;
            listening.push(format!("beanstalk {}", listener.describe()));
            accept_loops.push(tokio::spawn(accept_streams(
                Forwarded::Beanstalk,
                listener,
                door.clone(),
            )));
        }
        if let Some(addr) = &config.gearman {
            let listener = listen::listener_for(addr, activated, "gearman")
                .await
                .map_err(|e| cannot(addr, &e))?;
            if listener.is_unix() {
                return Err("the Gearman listener takes TCP addresses only".into());
            }
            listening.push(format!("gearman {}", listener.describe()));
            accept_loops.push(tokio::spawn(accept_streams(
                Forwarded::Gearman,
                listener,
                door.clone(),
            )));
        }
        if let Some((addr, security)) = &config.http {
            let listener = listen::bind_tcp(addr).await.map_err(|e| cannot(addr, &e))?;
            let local = listener.local_addr().map_err(|e| cannot(addr, &e))?;
            security.check_exposure(local)?;
            let scheme = if security.tls.is_some() {
                "https"
            } else {
                "http"
            };
            listening.push(format!("http {scheme}://{local}"));
            accept_loops.push(tokio::spawn(accept_http(
                listener,
                security.clone(),
                door.clone(),
            )));
        }
        tracing::info!(
            "standby front door open: forwarding clients to the leader ({})",
            listening.join(", ")
        );
        Ok(FrontDoor { door, accept_loops })
    }

    /// Closes the door (this node now leads): no more accepts, every connection closed;
    /// returns the listening sockets for the real front ends.
    pub(crate) async fn close(self) -> HandedOver {
        if !self.door.gate.shut_down(Duration::from_secs(5)).await {
            tracing::warn!("standby front door: some connections did not close within 5 s");
        }
        let mut handed = HandedOver {
            streams: Vec::new(),
            http: None,
        };
        for accept_loop in self.accept_loops {
            match accept_loop.await {
                Ok(Returned::Stream(name, listener)) => {
                    handed.streams.push((Some(name.to_string()), listener))
                }
                Ok(Returned::Http(listener)) => handed.http = Some(listener),
                Err(e) => tracing::warn!("standby front door: an accept loop failed: {e}"),
            }
        }
        let counts = &self.door.counts;
        tracing::info!(
            "standby front door closed: this node leads; it had forwarded {} beanstalk, {} \
             gearman and {} http connection(s)",
            counts.get(Forwarded::Beanstalk),
            counts.get(Forwarded::Gearman),
            counts.get(Forwarded::Http)
        );
        handed
    }
}

/// Accepts beanstalkd or Gearman connections and forwards each; returns the listener
/// when the door closes.
async fn accept_streams(protocol: Forwarded, listener: Listener, door: Door) -> Returned {
    let mut closing = door.gate.shutdown_signal();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = closing.wait_for(|&c| c) => return Returned::Stream(protocol.name(), listener),
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(
                    "standby front door: {}: accept failed: {e}",
                    protocol.name()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(slot) = door.gate.try_enter(&peer) else {
            continue;
        };
        let door = door.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let mut closing = door.gate.shutdown_signal();
            let forwarding = async {
                match stream {
                    Stream::Tcp(s) => {
                        let _ = s.set_nodelay(true);
                        forward(s, &[], protocol, &peer, &door.view, &door.counts).await
                    }
                    Stream::Unix(s) => {
                        forward(s, &[], protocol, &peer, &door.view, &door.counts).await
                    }
                }
            };
            tokio::select! {
                _ = forwarding => {}
                _ = closing.wait_for(|&c| c) => {}
            }
        });
    }
}

/// Accepts HTTP connections: answers or forwards each ([`http`]); with TLS, forwards the
/// whole connection unread. Returns the listener when the door closes.
async fn accept_http(
    listener: TcpListener,
    security: jobyard_http::Security,
    door: Door,
) -> Returned {
    let guard = Arc::new(security.guard());
    let tls = security.tls.is_some();
    let mut closing = door.gate.shutdown_signal();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = closing.wait_for(|&c| c) => return Returned::Http(listener),
        };
        let (stream, peer) = match accepted {
            Ok((s, peer)) => (s, peer.to_string()),
            Err(e) => {
                tracing::warn!("standby front door: http: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(slot) = door.gate.try_enter(&peer) else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (door, guard) = (door.clone(), guard.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let mut closing = door.gate.shutdown_signal();
            let serving = async {
                if tls {
                    forward(
                        stream,
                        &[],
                        Forwarded::Http,
                        &peer,
                        &door.view,
                        &door.counts,
                    )
                    .await
                } else {
                    http::serve(stream, peer.clone(), &door, &guard).await
                }
            };
            tokio::select! {
                _ = serving => {}
                _ = closing.wait_for(|&c| c) => {}
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    #[tokio::test]
    async fn a_closed_door_hands_its_sockets_over_with_new_connections_waiting_in_them() {
        let leader = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let view = Arc::new(ClusterView::new("me".into()));
        let leader_addr = leader.local_addr().unwrap().to_string();
        view.update(|s| {
            s.role = Role::Standby;
            s.leader = Some("other".into());
            s.leader_addrs.beanstalk = Some(leader_addr);
        });
        // Bound beforehand and passed as systemd would, so the test knows the port.
        let bound = Listener::bind("127.0.0.1:0").await.unwrap();
        let door_addr = bound.describe();
        let mut activated = vec![(Some("beanstalk".to_string()), bound)];
        let config = DoorConfig {
            beanstalk: Some(door_addr.clone()),
            gearman: None,
            http: None,
            max_connections: 10,
        };
        let door = FrontDoor::open(&config, view, &mut activated)
            .await
            .unwrap();
        assert!(activated.is_empty(), "the door took the passed socket");

        let mut client = TcpStream::connect(&door_addr).await.unwrap();
        client.write_all(b"list-tubes\r\n").await.unwrap();
        let (mut at_leader, _) = leader.accept().await.unwrap();
        let mut got = [0u8; 12];
        at_leader.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"list-tubes\r\n");

        let mut handed = door.close().await;
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut rest));
        assert!(
            matches!(closed.await, Ok(Ok(0))),
            "the forwarded connection is closed"
        );
        let _waiting = TcpStream::connect(&door_addr).await.unwrap();
        let (name, listener) = handed.streams.pop().expect("the beanstalkd socket");
        assert_eq!(name.as_deref(), Some("beanstalk"));
        assert_eq!(listener.describe(), door_addr);
        let accepted = tokio::time::timeout(Duration::from_secs(10), listener.accept()).await;
        assert!(
            matches!(accepted, Ok(Ok(_))),
            "the connection made after the close waits in the handed socket"
        );
    }
}
