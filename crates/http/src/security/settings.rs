//! The listener's security settings, built from the flags: the tokens, TLS files, and
//! whether an open listener may face the network; and what they make of the listener at
//! start (the middleware's guard, the log line that says how it is guarded).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::{Guard, Role, TlsFiles, Tokens};

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
