//! Listening sockets: TCP, UNIX (`unix:PATH`, as beanstalkd's `-l`), and sockets handed over
//! by systemd (socket activation), so existing service and socket units keep working.
//!
//! TCP listeners queue up to [`LISTEN_BACKLOG`] connections not yet accepted, not the 128
//! tokio's `TcpListener::bind` asks for: a client that opens a few hundred connections at
//! once would overflow 128, and the kernel drops the connects past it and has them retried
//! a second later (docs/operations.md, "The listen backlog").

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;

use tokio::net::{TcpListener, TcpSocket, TcpStream, ToSocketAddrs, UnixListener, UnixStream};

/// Connections a TCP listener queues before they are accepted. The kernel caps it at
/// `net.core.somaxconn` (4096 by default since Linux 5.4).
pub const LISTEN_BACKLOG: u32 = 4096;

/// The first descriptor systemd passes (`SD_LISTEN_FDS_START`).
const FIRST_ACTIVATED_FD: i32 = 3;

/// A listening socket of either family.
pub enum Listener {
    Tcp(TcpListener),
    /// `created` is the path this process bound, removed again at shutdown; `None` for an
    /// activated socket, whose file belongs to systemd.
    Unix {
        listener: UnixListener,
        created: Option<PathBuf>,
    },
}

/// An accepted connection of either family.
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// Who is on the other end of a session, as admin views show it.
#[derive(Clone, Debug, Default)]
pub struct Peer {
    /// The peer's address (`ip:port`), or a description for UNIX sockets.
    pub addr: String,
    /// The socket's descriptor (Gearman's admin `workers` shows it); -1 when none.
    pub fd: i32,
}

impl Peer {
    /// The address without its port (what Gearman's admin `workers` shows).
    pub fn ip(&self) -> &str {
        match self.addr.rsplit_once(':') {
            Some((ip, port)) if port.bytes().all(|b| b.is_ascii_digit()) => {
                ip.trim_start_matches('[').trim_end_matches(']')
            }
            _ => &self.addr,
        }
    }
}

impl Listener {
    /// Binds `host:port`, or `unix:PATH`. A stale socket file at PATH (left by a server that
    /// died) is replaced, as beanstalkd does; any other kind of file is an error.
    pub async fn bind(addr: &str) -> io::Result<Listener> {
        let Some(path) = addr.strip_prefix("unix:") else {
            return Ok(Listener::Tcp(bind_tcp(addr).await?));
        };
        if path.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "empty socket path",
            ));
        }
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path)?,
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{path} exists and is not a socket"),
                ))
            }
            Err(_) => {}
        }
        Ok(Listener::Unix {
            listener: UnixListener::bind(path)?,
            created: Some(PathBuf::from(path)),
        })
    }

    /// Wraps a descriptor inherited from systemd, whichever family it is.
    fn from_activated(fd: OwnedFd) -> io::Result<Listener> {
        let tcp = std::net::TcpListener::from(fd);
        if tcp.local_addr().is_ok() {
            tcp.set_nonblocking(true)?;
            return Ok(Listener::Tcp(TcpListener::from_std(tcp)?));
        }
        let unix = std::os::unix::net::UnixListener::from(OwnedFd::from(tcp));
        unix.local_addr()?;
        unix.set_nonblocking(true)?;
        Ok(Listener::Unix {
            listener: UnixListener::from_std(unix)?,
            created: None,
        })
    }

    /// The next connection and a printable peer for log lines.
    pub async fn accept(&self) -> io::Result<(Stream, String)> {
        match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                Ok((Stream::Tcp(s), peer.to_string()))
            }
            Listener::Unix { listener, .. } => {
                let (s, _) = listener.accept().await?;
                Ok((Stream::Unix(s), "a UNIX-socket client".into()))
            }
        }
    }

    /// Where it listens, for the start-up log line.
    pub fn describe(&self) -> String {
        match self {
            Listener::Tcp(l) => l.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            Listener::Unix { listener, .. } => listener
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(|p| format!("unix:{}", p.display())))
                .unwrap_or_else(|| "an unnamed UNIX socket".into()),
        }
    }

    pub fn is_unix(&self) -> bool {
        matches!(self, Listener::Unix { .. })
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix {
            created: Some(path),
            ..
        } = self
        {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Binds a TCP listener on `addr` (`HOST:PORT`, the host a name or an address: its first
/// address that binds) with a backlog of [`LISTEN_BACKLOG`]; every protocol's TCP listener
/// is made here.
pub async fn bind_tcp(addr: &str) -> io::Result<TcpListener> {
    bind_first(addr, addr).await
}

/// [`bind_tcp`] for a host and a port given apart (jobd's `host` and `port` settings),
/// so an IPv6 address needs no brackets.
pub async fn bind_tcp_to(host: &str, port: u16) -> io::Result<TcpListener> {
    bind_first((host, port), host).await
}

/// The first of `addrs`' addresses that binds; `shown` names them in the error when none
/// does.
async fn bind_first(addrs: impl ToSocketAddrs, shown: &str) -> io::Result<TcpListener> {
    let mut failure = None;
    for candidate in tokio::net::lookup_host(addrs).await? {
        match bind_tcp_at(candidate) {
            Ok(listener) => return Ok(listener),
            Err(e) => failure = Some(e),
        }
    }
    Err(failure.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{shown} names no address"),
        )
    }))
}

/// One address's listener on the current tokio runtime.
fn bind_tcp_at(addr: SocketAddr) -> io::Result<TcpListener> {
    TcpListener::from_std(bind_tcp_std(addr)?)
}

/// A non-blocking listener on `addr` with a backlog of [`LISTEN_BACKLOG`], for a front end
/// with an event loop of its own (the WMP manager's `mio` poll), which cannot take a
/// tokio listener; [`bind_tcp`] wraps the same socket. Address reuse is on, as
/// `TcpListener::bind` sets it, so a restarted server binds while its old connections
/// linger in TIME_WAIT.
pub fn bind_tcp_std(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    // tokio's own `listen` would register the socket with a runtime's reactor; this one
    // must not depend on a runtime, so the descriptor leaves tokio's socket before it.
    // SAFETY: `into_raw_fd` gives up the socket's only owner of the descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(socket.into_raw_fd()) };
    // SAFETY: a plain system call on a descriptor this function owns.
    if unsafe { libc::listen(fd.as_raw_fd(), LISTEN_BACKLOG as libc::c_int) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let listener = std::net::TcpListener::from(fd);
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Listening sockets passed by systemd socket activation, in order, with their names
/// (`FileDescriptorName=`, from `LISTEN_FDNAMES`). Empty unless `LISTEN_PID` is this process.
pub fn activated() -> io::Result<Vec<(Option<String>, Listener)>> {
    let for_us = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        == Some(std::process::id());
    if !for_us {
        return Ok(Vec::new());
    }
    let count: i32 = std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|&n| (0..=64).contains(&n))
        .unwrap_or(0);
    let names: Vec<String> = std::env::var("LISTEN_FDNAMES")
        .map(|n| n.split(':').map(str::to_string).collect())
        .unwrap_or_default();
    (0..count)
        .map(|i| {
            // SAFETY: systemd's protocol hands this process descriptors 3..3+LISTEN_FDS
            // (LISTEN_PID checked above); nothing else in the process owns them.
            let fd = unsafe { OwnedFd::from_raw_fd(FIRST_ACTIVATED_FD + i) };
            let name = names.get(i as usize).filter(|n| !n.is_empty()).cloned();
            Ok((name, Listener::from_activated(fd)?))
        })
        .collect()
}

/// Names that pick a protocol's socket (`FileDescriptorName=` in the socket unit).
const PROTOCOL_NAMES: [&str; 2] = ["beanstalk", "gearman"];

/// A protocol's listener: the activated socket meant for it if systemd passed one, else
/// its configured address.
pub async fn listener_for(
    addr: &str,
    activated: &mut Vec<(Option<String>, Listener)>,
    protocol: &str,
) -> io::Result<Listener> {
    match take_activated(activated, protocol) {
        Some(l) => Ok(l),
        None => Listener::bind(addr).await,
    }
}

/// Picks the activated socket for a protocol: the one named after it, else the first socket
/// not named after any protocol (systemd names sockets after their unit by default). Call
/// for beanstalkd first, so a single unnamed socket serves beanstalkd as in beanstalkd.
pub fn take_activated(
    sockets: &mut Vec<(Option<String>, Listener)>,
    protocol: &str,
) -> Option<Listener> {
    let named = |n: &Option<String>| n.as_deref() == Some(protocol);
    let unclaimed = |n: &Option<String>| !n.as_deref().is_some_and(|n| PROTOCOL_NAMES.contains(&n));
    let i = sockets
        .iter()
        .position(|(n, _)| named(n))
        .or_else(|| sockets.iter().position(|(n, _)| unclaimed(n)))?;
    Some(sockets.remove(i).1)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn tcp() -> Listener {
        Listener::bind("127.0.0.1:0").await.unwrap()
    }

    /// The backlog the kernel keeps for the listening socket on `port`: the Send-Q column
    /// `ss -ltn` shows for a listener.
    fn kernel_backlog(port: u16) -> u32 {
        let out = std::process::Command::new("ss")
            .args(["-ltnH", &format!("sport = :{port}")])
            .output()
            .expect("ss (iproute2) runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().next().expect("ss lists the listener");
        let send_q = line.split_whitespace().nth(2).expect("a Send-Q column");
        send_q.parse().expect("Send-Q is a number")
    }

    /// [`LISTEN_BACKLOG`] as the kernel caps it (`net.core.somaxconn`).
    fn expected_backlog() -> u32 {
        let somaxconn: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .expect("a Linux kernel")
            .trim()
            .parse()
            .expect("a number");
        LISTEN_BACKLOG.min(somaxconn)
    }

    #[tokio::test]
    async fn a_tcp_listener_has_the_burst_backlog_capped_by_somaxconn() {
        let bound = tcp().await;
        let Listener::Tcp(listener) = &bound else {
            panic!("a TCP address gives a TCP listener");
        };
        let port = listener.local_addr().unwrap().port();
        assert_eq!(kernel_backlog(port), expected_backlog());
    }

    #[test]
    fn a_listener_for_an_event_loop_of_its_own_has_the_same_backlog_without_a_runtime() {
        let listener = bind_tcp_std("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = listener.local_addr().unwrap().port();
        assert_eq!(kernel_backlog(port), expected_backlog());
        // Non-blocking, as an event loop needs: no one is connecting, so accept returns.
        let refused = listener.accept().unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::WouldBlock);
    }

    #[tokio::test]
    async fn a_host_name_binds_its_address() {
        let listener = bind_tcp("localhost:0").await.unwrap();
        assert!(listener.local_addr().unwrap().ip().is_loopback());
        let apart = bind_tcp_to("localhost", 0).await.unwrap();
        assert!(apart.local_addr().unwrap().ip().is_loopback());
    }

    #[tokio::test]
    async fn a_host_and_port_given_apart_bind_with_the_burst_backlog() {
        let listener = bind_tcp_to("127.0.0.1", 0).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        assert_eq!(kernel_backlog(port), expected_backlog());
    }

    #[tokio::test]
    async fn named_sockets_go_to_their_protocol_and_others_in_order() {
        let mut s = vec![
            (Some("jobyard.socket".to_string()), tcp().await),
            (Some("gearman".to_string()), tcp().await),
            (None, tcp().await),
        ];
        let first = s[0].1.describe();
        let gearman = s[1].1.describe();
        assert_eq!(
            take_activated(&mut s, "gearman").unwrap().describe(),
            gearman
        );
        assert_eq!(
            take_activated(&mut s, "beanstalk").unwrap().describe(),
            first
        );
        assert_eq!(s.len(), 1);
        let mut none = Vec::new();
        assert!(take_activated(&mut none, "beanstalk").is_none());
    }

    #[tokio::test]
    async fn a_unix_listener_replaces_a_stale_socket_but_not_a_file_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bs.sock");
        let addr = format!("unix:{}", path.display());
        let first = Listener::bind(&addr).await.unwrap();
        assert!(first.is_unix());
        assert_eq!(first.describe(), addr);
        std::mem::forget(first); // a server that died: the socket file stays
        let second = Listener::bind(&addr).await.unwrap();
        drop(second);
        assert!(!path.exists(), "the socket file is removed at shutdown");
        std::fs::write(&path, b"not a socket").unwrap();
        assert!(Listener::bind(&addr).await.is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"not a socket");
    }
}
