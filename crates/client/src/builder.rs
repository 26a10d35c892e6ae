//! How a [`Client`] is made: the server's URL, the token it asks for, and the CA its
//! certificate is signed by; whatever is not given is read from the environment as
//! `jobyard ctl` and the Python client read it.

use std::path::PathBuf;

use crate::error::Error;
use crate::tls::CaSource;
use crate::transport::Transport;
use crate::Client;

/// The server's default HTTP listener, used when neither a URL nor `JOBYARD_URL` is given.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// Builds a [`Client`]; made by [`Client::builder`].
///
/// [`build`](ClientBuilder::build) fills what was not given from the environment:
/// `JOBYARD_URL` (else [`DEFAULT_URL`]), `JOBYARD_TOKEN` and `JOBYARD_CA_CERT` (a PEM
/// file). An empty variable counts as unset.
#[derive(Clone, Debug, Default)]
pub struct ClientBuilder {
    url: Option<String>,
    token: Option<String>,
    ca: Option<CaSource>,
    ignore_env: bool,
}

impl ClientBuilder {
    /// The base URL of the HTTP listener: `http://host:port` or `https://host:port`, with
    /// an optional path prefix.
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// The token sent as `Authorization: Bearer` on every request (docs/security.md: a
    /// `read` token may look, an `admin` token may also put, lease and delete). An empty
    /// token sends none.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Trusts only certificates signed by the CA(s) in this PEM text for `https:` URLs,
    /// instead of the platform's roots.
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca = Some(CaSource::Pem(pem.into()));
        self
    }

    /// As [`ca_pem`](Self::ca_pem), from a PEM file (read by [`build`](Self::build)).
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca = Some(CaSource::File(path.into()));
        self
    }

    /// The client. Fails on a URL that is not `http:`/`https:`, a CA that cannot be read
    /// or holds no certificate, or a token that cannot be a header value. Nothing is sent
    /// until the first call.
    pub fn build(self) -> Result<Client, Error> {
        let read_env = !self.ignore_env;
        let env = |name: &str| read_env.then(|| non_empty_var(name)).flatten();
        let url = (self.url)
            .or_else(|| env("JOBYARD_URL"))
            .unwrap_or_else(|| DEFAULT_URL.to_string());
        let token = (self.token)
            .or_else(|| env("JOBYARD_TOKEN"))
            .filter(|t| !t.is_empty());
        let ca = (self.ca).or_else(|| env("JOBYARD_CA_CERT").map(|p| CaSource::File(p.into())));
        Ok(Client {
            transport: Transport::new(&url, token.as_deref(), ca.as_ref())?,
        })
    }

    /// A builder that reads nothing from the environment: [`Client::new`] is exactly its
    /// URL, as it was before the environment was read.
    pub(crate) fn without_env() -> Self {
        ClientBuilder {
            ignore_env: true,
            ..ClientBuilder::default()
        }
    }
}

/// An environment variable's value; unset, empty and non-UTF-8 alike are none.
fn non_empty_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}
