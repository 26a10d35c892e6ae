//! One JSON request/response over HTTP/1.1 (plain or TLS) with a connection pool. Kept
//! apart so the API methods read as what they ask, not how bytes travel.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderValue, AUTHORIZATION};
use hyper::{Method, Request};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as Pool;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::error::Error;
use crate::tls::{self, CaSource};

/// Replies larger than this are refused: a job body is at most a few MiB, so a bigger
/// answer means the URL points at something that is not jobyard.
const MAX_REPLY_BYTES: usize = 64 << 20;

/// The base URL, the token, and the pooled connections to it.
#[derive(Clone, Debug)]
pub(crate) struct Transport {
    base: String,
    /// `Bearer <token>`, marked sensitive so `Debug` never prints it.
    authorization: Option<HeaderValue>,
    pool: Pool<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Transport {
    /// Checks `url` (`http://host:port` or `https://host:port`, an optional path prefix,
    /// no trailing slash needed) and prepares what `https:` needs.
    pub(crate) fn new(
        url: &str,
        token: Option<&str>,
        ca: Option<&CaSource>,
    ) -> Result<Transport, Error> {
        let base = url.trim_end_matches('/').to_string();
        let uri: hyper::Uri = base
            .parse()
            .map_err(|e| Error::BadUrl(format!("{url}: {e}")))?;
        let secure = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(bad_url(url)),
        };
        if uri.host().is_none() {
            return Err(bad_url(url));
        }
        let tls = if secure {
            tls::client_config(ca)?
        } else {
            tls::unused_config()
        };
        // Requests are small and answered at once: send each as soon as it is written,
        // never held back waiting for the previous segment's acknowledgement (Nagle).
        let mut tcp = HttpConnector::new();
        tcp.set_nodelay(true);
        tcp.enforce_http(false);
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(tcp);
        let pool = Pool::builder(TokioExecutor::new()).build(connector);
        Ok(Transport {
            base,
            authorization: token.map(bearer).transpose()?,
            pool,
        })
    }

    /// Sends one request and returns the reply's JSON; a non-2xx reply becomes
    /// [`Error::Api`] with the server's code.
    pub(crate) async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, Error> {
        let payload = match body {
            Some(v) => Bytes::from(serde_json::to_vec(v).expect("JSON values serialize")),
            None => Bytes::new(),
        };
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("content-type", "application/json");
        if let Some(authorization) = &self.authorization {
            request = request.header(AUTHORIZATION, authorization.clone());
        }
        let request = request
            .body(Full::new(payload))
            .map_err(|e| Error::BadUrl(e.to_string()))?;
        let reply = self
            .pool
            .request(request)
            .await
            .map_err(|e| connection_error(&e))?;
        let status = reply.status().as_u16();
        let bytes = http_body_util::Limited::new(reply.into_body(), MAX_REPLY_BYTES)
            .collect()
            .await
            .map_err(|e| Error::Transport(e.to_string()))?
            .to_bytes();
        let json: Value = serde_json::from_slice(&bytes).map_err(|_| {
            Error::Protocol(format!(
                "status {status}, not JSON: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            ))
        })?;
        if (200..300).contains(&status) {
            return Ok(json);
        }
        let field = |k: &str| json["error"][k].as_str().unwrap_or_default().to_string();
        Err(Error::Api {
            status,
            code: field("code"),
            message: field("message"),
        })
    }
}

fn bad_url(url: &str) -> Error {
    Error::BadUrl(format!(
        "{url}: expected http://host:port or https://host:port"
    ))
}

/// The `Authorization` header for `token`.
fn bearer(token: &str) -> Result<HeaderValue, Error> {
    let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| Error::Config("the token holds characters a header cannot carry".into()))?;
    value.set_sensitive(true);
    Ok(value)
}

/// A failed connection as [`Error::Tls`] when TLS refused it (a certificate not signed by
/// the trusted CA, a name mismatch, a plain-HTTP server), else [`Error::Transport`]; either
/// way with every cause's text, since hyper's own says only "client error (Connect)".
fn connection_error(error: &(dyn std::error::Error + 'static)) -> Error {
    let mut text = error.to_string();
    let mut tls = false;
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        tls |= is_tls(e);
        cause = e.source();
    }
    if tls {
        Error::Tls(text)
    } else {
        Error::Transport(text)
    }
}

/// Whether `error` is rustls' own. hyper-rustls and tokio-rustls hand it on inside
/// `io::Error`s (nested), whose `source` skips what they wrap, so those are opened here.
fn is_tls(error: &(dyn std::error::Error + 'static)) -> bool {
    if error.is::<rustls::Error>() {
        return true;
    }
    let inner = error
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref());
    inner.is_some_and(|inner| is_tls(inner))
}
