//! What can go wrong talking to jobyard, split by who is to blame: the server refused
//! (a stable code to branch on), the network failed, TLS did not trust the server, the
//! reply made no sense, or the client was set up wrong.

use std::fmt;

/// A failed call. Branch on [`Error::code`] for refusals; the codes are those of
/// docs/http-api.md ("Errors") and keep their meaning across versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The server refused the request.
    Api {
        /// HTTP status.
        status: u16,
        /// Stable error code, e.g. `stale_token`, `not_found`.
        code: String,
        /// Text for people.
        message: String,
    },
    /// The request did not reach the server, or its answer did not come back.
    Transport(String),
    /// The TLS handshake failed: the server's certificate is not signed by a trusted CA
    /// or not for this host, or the server does not speak TLS. Repeating will not help.
    Tls(String),
    /// The server answered something this client does not understand.
    Protocol(String),
    /// The base URL is not an `http://host:port` or `https://host:port` URL.
    BadUrl(String),
    /// The client's settings cannot be used: an unreadable CA file or one without a
    /// certificate, a token that cannot be sent as a header.
    Config(String),
}

impl Error {
    /// The server's error code, for refusals.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// Whether retrying the same call later may succeed (the server was unreachable,
    /// busy or stopping), as opposed to a refusal that will repeat.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Transport(_) => true,
            Error::Api { status, .. } => *status == 503,
            _ => false,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Api {
                status,
                code,
                message,
            } => write!(f, "jobyard refused ({status} {code}): {message}"),
            Error::Transport(e) => write!(f, "jobyard unreachable: {e}"),
            Error::Tls(e) => write!(f, "TLS with jobyard failed: {e}"),
            Error::Protocol(e) => write!(f, "unexpected reply from jobyard: {e}"),
            Error::BadUrl(e) => write!(f, "bad jobyard URL: {e}"),
            Error::Config(e) => write!(f, "bad jobyard client setting: {e}"),
        }
    }
}

impl std::error::Error for Error {}
