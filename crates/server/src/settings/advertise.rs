//! `--advertise-host`: the host other nodes sharing the storage use to reach this node's
//! listeners. A standby forwards its clients to the leader's advertised addresses
//! (docs/postgres.md, "Any node serves clients"), so each node writes its own into its
//! `nodes` row.

use std::net::IpAddr;

use jobyard_storage::Addrs;

/// This node's listeners as other nodes reach them: each TCP listener's port on `host`
/// (`--advertise-host`), else on the listener's own host when that is a specific address
/// or name, else (an unspecified address: `0.0.0.0`, `::`, or none) on this machine's
/// host name. A UNIX-socket listener, or one that is off, is not advertised.
pub(crate) fn advertised(
    host: Option<&str>,
    beanstalk: Option<&str>,
    gearman: Option<&str>,
    http: Option<&str>,
) -> Addrs {
    let at = |listen: Option<&str>| listen.and_then(|l| advertised_addr(host, l));
    Addrs {
        beanstalk: at(beanstalk),
        gearman: at(gearman),
        http: at(http),
    }
}

/// One listener's advertised `HOST:PORT` (`[V6]:PORT`), if it is a TCP listener.
fn advertised_addr(advertise_host: Option<&str>, listen: &str) -> Option<String> {
    if listen.starts_with("unix:") {
        return None;
    }
    let (host, port) = listen.rsplit_once(':')?;
    let host = unbracketed(host);
    let host = match advertise_host {
        Some(given) => unbracketed(given).to_string(),
        None if is_unspecified(host) => hostname(),
        None => host.to_string(),
    };
    Some(if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    })
}

fn unbracketed(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// Whether a listener's host listens on every address: no host, `0.0.0.0` or `::`.
fn is_unspecified(host: &str) -> bool {
    host.is_empty() || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified())
}

/// This machine's host name (`localhost` when the kernel does not say).
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_specific_listen_host_is_advertised_as_it_is() {
        let addrs = advertised(
            None,
            Some("10.1.2.3:11300"),
            Some("db-node.example:4730"),
            Some("[fd00::5]:8080"),
        );
        assert_eq!(addrs.beanstalk.as_deref(), Some("10.1.2.3:11300"));
        assert_eq!(addrs.gearman.as_deref(), Some("db-node.example:4730"));
        assert_eq!(addrs.http.as_deref(), Some("[fd00::5]:8080"));
    }

    #[test]
    fn an_unspecified_listen_host_is_advertised_as_the_host_name() {
        let name = hostname();
        let addrs = advertised(
            None,
            Some("0.0.0.0:11300"),
            Some("[::]:4730"),
            Some(":8080"),
        );
        assert_eq!(addrs.beanstalk, Some(format!("{name}:11300")));
        assert_eq!(addrs.gearman, Some(format!("{name}:4730")));
        assert_eq!(addrs.http, Some(format!("{name}:8080")));
    }

    #[test]
    fn the_advertise_host_replaces_every_listeners_host() {
        let addrs = advertised(
            Some("node1.internal"),
            Some("0.0.0.0:11300"),
            None,
            Some("127.0.0.1:8080"),
        );
        assert_eq!(addrs.beanstalk.as_deref(), Some("node1.internal:11300"));
        assert_eq!(
            addrs.gearman, None,
            "a listener that is off is not advertised"
        );
        assert_eq!(addrs.http.as_deref(), Some("node1.internal:8080"));
        let v6 = advertised(Some("fd00::7"), Some("0.0.0.0:11300"), None, None);
        assert_eq!(v6.beanstalk.as_deref(), Some("[fd00::7]:11300"));
    }

    #[test]
    fn a_unix_socket_is_not_advertised() {
        let addrs = advertised(Some("h"), Some("unix:/run/jobyard.sock"), None, None);
        assert_eq!(addrs.beanstalk, None);
    }
}
