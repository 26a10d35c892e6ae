//! The loopback rule: a listener without tokens serves loopback only (unless the operator
//! passes `--http-insecure`), and then answers only to loopback names, so neither another
//! host nor a web page that rebinds its own name to 127.0.0.1 can use it.

use std::net::SocketAddr;

use super::Security;

impl Security {
    /// Refuses an open listener (no tokens) on `addr` unless it is loopback or the
    /// operator passed `--http-insecure`: anyone who reaches it could delete every job.
    pub fn check_exposure(&self, addr: SocketAddr) -> Result<(), String> {
        if self.tokens.is_empty() && !self.insecure && !addr.ip().is_loopback() {
            return Err(format!(
                "refusing to serve the HTTP API on {addr} without access control: anyone who \
                 reaches it could act on every job. Give tokens (--http-token or \
                 --http-token-file), listen on loopback, or pass --http-insecure \
                 (docs/security.md)"
            ));
        }
        Ok(())
    }
}

/// `localhost`, a `127.0.0.0/8` address or `[::1]`, with or without a port.
pub(super) fn is_local_host(host: &[u8]) -> bool {
    let Ok(host) = std::str::from_utf8(host) else {
        return false;
    };
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(name, _port)| name)
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_listener_stays_on_loopback_unless_told_otherwise() {
        let open = Security::default();
        assert!(open
            .check_exposure("127.0.0.1:8080".parse().unwrap())
            .is_ok());
        assert!(open.check_exposure("[::1]:8080".parse().unwrap()).is_ok());
        let err = open
            .check_exposure("0.0.0.0:8080".parse().unwrap())
            .unwrap_err();
        assert!(err.contains("--http-insecure"), "{err}");
        let insecure = Security {
            insecure: true,
            ..Security::default()
        };
        assert!(insecure
            .check_exposure("0.0.0.0:8080".parse().unwrap())
            .is_ok());
        let guarded =
            Security::from_flags(Some("admin-token-0123456789"), None, false, None, None).unwrap();
        assert!(guarded
            .check_exposure("10.1.2.3:8080".parse().unwrap())
            .is_ok());
    }
}
