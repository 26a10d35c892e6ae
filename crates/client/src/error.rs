//! What can go wrong talking to jobyard, split by who is to blame: the server refused
//! (a stable code to branch on), the network failed, or the reply made no sense.

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
    /// The server answered something this client does not understand.
    Protocol(String),
    /// The base URL is not an `http://host:port` URL.
    BadUrl(String),
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
            Error::Protocol(e) => write!(f, "unexpected reply from jobyard: {e}"),
            Error::BadUrl(e) => write!(f, "bad jobyard URL: {e}"),
        }
    }
}

impl std::error::Error for Error {}
