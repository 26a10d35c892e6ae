//! Who may reach the HTTP listener and how: tokens (checked by
//! [`jobyard_ops::access`]), TLS, and the refusal to serve an open listener beyond
//! loopback unless the operator says so.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use jobyard_ops::access::{Guard, Role, Tokens};

use crate::tls::TlsFiles;

/// The listener's access settings (`--http-token`, `--http-token-file`,
/// `--http-insecure`, `--http-tls-cert`, `--http-tls-key`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Security {
    /// Empty: no token is asked for (loopback only, unless `insecure`).
    pub tokens: Tokens,
    /// Serve without tokens on an address other hosts can reach.
    pub insecure: bool,
    /// `Some`: HTTPS with this certificate and key.
    pub tls: Option<TlsFiles>,
}

impl Security {
    /// Builds the settings from the flags' values, reading the token file; a bad token,
    /// an unreadable file or half a TLS pair is an error that says which.
    pub fn from_flags(
        token: Option<&str>,
        token_file: Option<&Path>,
        insecure: bool,
        tls_cert: Option<PathBuf>,
        tls_key: Option<PathBuf>,
    ) -> Result<Security, String> {
        let mut tokens = Tokens::default();
        if let Some(list) = token {
            tokens.add_list(list)?;
        }
        if let Some(path) = token_file {
            let name = path.display().to_string();
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("--http-token-file {name}: {e}"))?;
            let before = tokens.count(Role::Admin) + tokens.count(Role::Read);
            tokens.add_file(&name, &text)?;
            if tokens.count(Role::Admin) + tokens.count(Role::Read) == before {
                return Err(format!("--http-token-file {name}: the file has no token"));
            }
        }
        let tls = match (tls_cert, tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            (None, None) => None,
            _ => return Err("--http-tls-cert and --http-tls-key go together".into()),
        };
        Ok(Security {
            tokens,
            insecure,
            tls,
        })
    }

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

    /// What the middleware checks. An open listener that is not declared insecure is on
    /// loopback ([`Security::check_exposure`]), so it answers only to loopback names.
    pub fn guard(&self) -> Guard {
        Guard {
            tokens: self.tokens.clone(),
            local_hosts_only: self.tokens.is_empty() && !self.insecure,
        }
    }

    /// Says at start how the listener on `addr` is guarded, so an operator reading the log
    /// sees an open listener for what it is.
    pub fn log_access(&self, addr: SocketAddr) {
        if !self.tokens.is_empty() {
            tracing::info!(
                "http: tokens required ({} admin, {} read-only)",
                self.tokens.count(Role::Admin),
                self.tokens.count(Role::Read)
            );
        } else if addr.ip().is_loopback() {
            tracing::info!("http: no tokens configured; open to local clients only");
        } else {
            tracing::warn!(
                "http: no tokens on {addr} (--http-insecure): anyone who reaches it may act"
            );
        }
    }
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

    #[test]
    fn flags_are_checked() {
        let half = Security::from_flags(None, None, false, Some("c.pem".into()), None);
        assert!(half.unwrap_err().contains("go together"));
        let missing =
            Security::from_flags(None, Some(Path::new("/nonexistent/t")), false, None, None);
        assert!(missing.unwrap_err().contains("/nonexistent/t"));
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("tokens");
        std::fs::write(&empty, "# nothing yet\n").unwrap();
        let none = Security::from_flags(None, Some(&empty), false, None, None);
        assert!(none.unwrap_err().contains("no token"));
        // Even with tokens from the flag: an empty file is a mistake worth stopping for.
        let flag = Some("admin-token-0123456789");
        let both = Security::from_flags(flag, Some(&empty), false, None, None);
        assert!(both.unwrap_err().contains("no token"));
    }
}
