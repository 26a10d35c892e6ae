//! A standby's HTTP listener: `GET /v1/health` and `GET /v1/cluster` are answered here,
//! from the cluster view (they are about this node); any other request forwards the whole
//! connection to the leader.
//!
//! Only a connection's first request line is read to decide. A connection whose first
//! request is forwarded stays spliced to the leader for its whole life, so on a keep-alive
//! connection a later `/v1/cluster` is the leader's answer; a request answered here is
//! answered with `Connection: close`, so the client's next request comes on a new
//! connection and is decided anew. The answers pass the listener's own access checks
//! (tokens, the loopback rule) as the leader's routes do.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use jobyard_broker::ClusterState;
use jobyard_http::security::{check, check_browser, Guard};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::leader::{can_forward, Forwarded};
use super::splice::forward;
use super::Door;

/// The longest first request line looked at: a longer one is no route answered here, so
/// the connection goes to the leader, which judges it.
const MAX_REQUEST_LINE: usize = 8 * 1024;

/// The longest request head of a route answered here (the leader's own bound on headers
/// is larger, but these routes take no more than a token and a few browser headers).
const MAX_HEAD: usize = 64 * 1024;

/// How long a client may take to send its request head.
const HEAD_WAIT: Duration = Duration::from_secs(30);

/// The routes a standby answers itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Local {
    Health,
    Cluster,
}

/// Serves one plain-HTTP connection of the standby's listener.
pub(crate) async fn serve(mut stream: TcpStream, peer: String, door: &Door, guard: &Guard) {
    let mut buf = Vec::with_capacity(1024);
    let route = loop {
        if let Some(end) = find(&buf, b"\n") {
            break local_route(&buf[..end]);
        }
        if buf.len() >= MAX_REQUEST_LINE {
            break None;
        }
        if !read_more(&mut stream, &mut buf).await {
            return;
        }
    };
    let Some(route) = route else {
        forward(
            stream,
            &buf,
            Forwarded::Http,
            &peer,
            &door.view,
            &door.counts,
        )
        .await;
        return;
    };
    let head_end = loop {
        if let Some(end) = find(&buf, b"\r\n\r\n") {
            break end + 4;
        }
        if buf.len() >= MAX_HEAD {
            let refusal = (StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "").into_response();
            let _ = write_response(&mut stream, refusal).await;
            return;
        }
        if !read_more(&mut stream, &mut buf).await {
            return;
        }
    };
    let response = match headers_of(&buf[..head_end]) {
        Some(headers) => answer(route, &headers, guard, &door.view.get()),
        None => (StatusCode::BAD_REQUEST, "bad request head\n").into_response(),
    };
    let _ = write_response(&mut stream, response).await;
}

/// Reads what the client sent next into `buf`; false when it closed, failed or was
/// too slow.
async fn read_more<S: AsyncRead + Unpin>(stream: &mut S, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 4096];
    match tokio::time::timeout(HEAD_WAIT, stream.read(&mut chunk)).await {
        Ok(Ok(n)) if n > 0 => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
        _ => false,
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The route answered here that a request line asks for, if any: `GET` of `/v1/health`
/// or `/v1/cluster`, with or without a query.
fn local_route(line: &[u8]) -> Option<Local> {
    let line = std::str::from_utf8(line).ok()?.trim_end();
    let mut parts = line.split(' ');
    let (method, target) = (parts.next()?, parts.next()?);
    if method != "GET" || !parts.next()?.starts_with("HTTP/1.") {
        return None;
    }
    match target.split('?').next()? {
        "/v1/health" => Some(Local::Health),
        "/v1/cluster" => Some(Local::Cluster),
        _ => None,
    }
}

/// The headers of a complete request head; `None` when it does not parse.
fn headers_of(head: &[u8]) -> Option<HeaderMap> {
    let mut parsed = [httparse::EMPTY_HEADER; 100];
    let mut request = httparse::Request::new(&mut parsed);
    if !matches!(request.parse(head), Ok(httparse::Status::Complete(_))) {
        return None;
    }
    let mut headers = HeaderMap::new();
    for h in request.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes()).ok()?;
        headers.append(name, HeaderValue::from_bytes(h.value).ok()?);
    }
    Some(headers)
}

/// The answer to a local route: the listener's access checks first, as on the leader.
fn answer(route: Local, headers: &HeaderMap, guard: &Guard, state: &ClusterState) -> Response {
    let path = match route {
        Local::Health => "/v1/health",
        Local::Cluster => "/v1/cluster",
    };
    let checked = check_browser(headers, &Method::GET, guard.local_hosts_only)
        .and_then(|()| check(&guard.tokens, &Method::GET, path, headers));
    if let Err(refusal) = checked {
        return refusal.into_response();
    }
    match route {
        Local::Health => health(state),
        Local::Cluster => Json(jobyard_http::cluster_document(state)).into_response(),
    }
}

/// `GET /v1/health` on a standby: 200 while it can serve by forwarding (it knows a
/// leader), else 503; either way with its role, its name and the leader's.
fn health(state: &ClusterState) -> Response {
    let serving = can_forward(state);
    let status = if serving {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = json!({
        "status": if serving { "ok" } else { "unavailable" },
        "role": state.role.as_str(),
        "node": state.node,
        "leader": state.leader,
        "version": env!("CARGO_PKG_VERSION"),
    });
    (status, Json(body)).into_response()
}

/// Writes `response` as HTTP/1.1 and closes the connection.
async fn write_response(stream: &mut TcpStream, response: Response) -> std::io::Result<()> {
    let (parts, body) = response.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        parts.status.as_u16(),
        parts.status.canonical_reason().unwrap_or("")
    )
    .into_bytes();
    for (name, value) in &parts.headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(
        format!(
            "content-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    out.extend_from_slice(&body);
    stream.write_all(&out).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobyard_broker::{ClusterView, Role};

    #[test]
    fn only_gets_of_health_and_cluster_are_answered_here() {
        assert_eq!(
            local_route(b"GET /v1/health HTTP/1.1\r"),
            Some(Local::Health)
        );
        assert_eq!(
            local_route(b"GET /v1/cluster?x=1 HTTP/1.0\r"),
            Some(Local::Cluster)
        );
        assert_eq!(local_route(b"POST /v1/health HTTP/1.1\r"), None);
        assert_eq!(local_route(b"GET /v1/queues HTTP/1.1\r"), None);
        assert_eq!(local_route(b"GET /v1/healthz HTTP/1.1\r"), None);
        assert_eq!(local_route(b"GET /v1/health\r"), None);
    }

    fn standby(leader: Option<&str>) -> ClusterState {
        let view = ClusterView::new("me".into());
        view.update(|s| {
            s.role = Role::Standby;
            s.leader = leader.map(String::from);
        });
        view.get()
    }

    #[test]
    fn health_is_ok_only_with_a_leader_to_forward_to() {
        assert_eq!(health(&standby(Some("other"))).status(), StatusCode::OK);
        assert_eq!(
            health(&standby(None)).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        let starting = ClusterView::new("me".into()).get();
        assert_eq!(health(&starting).status(), StatusCode::SERVICE_UNAVAILABLE);
    }

    #[test]
    fn the_local_answers_pass_the_listeners_access_checks() {
        let mut guard = Guard::default();
        guard.tokens.add_list("admin-token-0123456789").unwrap();
        let head = b"GET /v1/cluster HTTP/1.1\r\nHost: x\r\n\r\n";
        let headers = headers_of(head).unwrap();
        let state = standby(Some("other"));
        let refused = answer(Local::Cluster, &headers, &guard, &state);
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
        let head =
            b"GET /v1/cluster HTTP/1.1\r\nAuthorization: Bearer admin-token-0123456789\r\n\r\n";
        let headers = headers_of(head).unwrap();
        let granted = answer(Local::Cluster, &headers, &guard, &state);
        assert_eq!(granted.status(), StatusCode::OK);
        let open_loopback = Guard {
            local_hosts_only: true,
            ..Guard::default()
        };
        let rebound = headers_of(b"GET /v1/health HTTP/1.1\r\nHost: evil.example\r\n\r\n").unwrap();
        let refused = answer(Local::Health, &rebound, &open_loopback, &state);
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    }
}
