//! One JSON request/response over HTTP/1.1 with a connection pool. Kept apart so the
//! API methods read as what they ask, not how bytes travel.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as Pool;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::error::Error;

/// Replies larger than this are refused: a job body is at most a few MiB, so a bigger
/// answer means the URL points at something that is not jobyard.
const MAX_REPLY_BYTES: usize = 64 << 20;

/// The base URL and the pooled connections to it.
#[derive(Clone, Debug)]
pub(crate) struct Transport {
    base: String,
    pool: Pool<HttpConnector, Full<Bytes>>,
}

impl Transport {
    /// Checks `url` (`http://host:port`, an optional path prefix, no trailing slash needed).
    pub(crate) fn new(url: &str) -> Result<Transport, Error> {
        let base = url.trim_end_matches('/').to_string();
        let uri: hyper::Uri = base
            .parse()
            .map_err(|e| Error::BadUrl(format!("{url}: {e}")))?;
        if uri.scheme_str() != Some("http") || uri.host().is_none() {
            return Err(Error::BadUrl(format!(
                "{url}: expected http://host:port (put a TLS proxy's plain side here)"
            )));
        }
        // Requests are small and answered at once: send each as soon as it is written,
        // never held back waiting for the previous segment's acknowledgement (Nagle).
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let pool = Pool::builder(TokioExecutor::new()).build(connector);
        Ok(Transport { base, pool })
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
        let request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(Full::new(payload))
            .map_err(|e| Error::BadUrl(e.to_string()))?;
        let reply = self
            .pool
            .request(request)
            .await
            .map_err(|e| Error::Transport(e.to_string()))?;
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
