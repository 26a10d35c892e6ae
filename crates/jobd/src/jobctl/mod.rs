//! jobctl: the command-line client for a jobd worker or jobd-master (docs/jobd.md, "Protocol"), with
//! the same commands and output. Also offers the commands jobd's README listed as
//! missing: add-target, remove-target, run-manual and send-signal. Its command line (the
//! options and `~/.jobctl.conf`) is read by the `jobyard` binary, which calls
//! [`run_command`].

mod render;
mod request;

use std::io::Write;
use std::sync::Arc;

use serde_json::Value;
use tokio::net::TcpStream;

use crate::connection::{
    ConnectionRules, PeerConnection, ReplyFuture, RequestError, RequestHandler,
};
use crate::protocol::MAX_RESPONSE_FRAME;

/// The daemon jobctl talks to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// A jobd-master (its commands) rather than a worker.
    pub master: bool,
    /// Host to connect to.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// Sent with the request, if any.
    pub password: Option<String>,
}

/// jobctl's side of the connection serves no requests.
struct NoRequests;

impl RequestHandler for NoRequests {
    fn handle(&self, _from: Arc<PeerConnection>, kind: String, _data: Value) -> ReplyFuture {
        Box::pin(async move { Err(format!("unknown request type: '{kind}'")) })
    }
}

/// Runs jobctl's `command` with `args` against `endpoint`, printing what jobctl prints to
/// `out` and `err`; returns its exit code (a daemon's error is printed and exits 0, as
/// jobctl did).
pub async fn run_command(
    endpoint: &Endpoint,
    command: &str,
    args: &[String],
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let (kind, data) = match request::build_request(endpoint.master, command, args) {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(err, "ERROR [jobctl] {e}");
            return 1;
        }
    };
    let (host, port) = (endpoint.host.as_str(), endpoint.port);
    let stream = match TcpStream::connect((host, port)).await {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(err, "ERROR [jobctl] cannot connect to {host}:{port}: {e}");
            return 1;
        }
    };
    let connection = PeerConnection::spawn(
        stream,
        ConnectionRules::new(None, true),
        Arc::new(NoRequests),
        MAX_RESPONSE_FRAME,
        endpoint.password.clone(),
    );
    let result = connection.request(kind, data, None).await;
    connection.close();
    match result {
        Ok(v) => {
            let _ = write!(out, "{}", render::render(endpoint.master, command, &v));
            0
        }
        Err(RequestError::Remote(e)) => {
            let _ = writeln!(err, "ERROR [jobctl] Worker error: {e}");
            0
        }
        Err(e) => {
            let _ = writeln!(err, "ERROR [jobctl] {e}");
            1
        }
    }
}
