//! Access control on the HTTP listener: bearer tokens (or basic auth, for browsers) with a
//! role each, checked before any route runs.
//!
//! Without tokens the listener is open, as it always was (the server then refuses to
//! listen beyond loopback unless told it is fine: see `jobyard_http`). With tokens, every
//! request needs one except `GET /metrics`, which Prometheus scrapes; a `read` token may
//! look (GET and HEAD: the dashboard, listings, `/v1` reads) and an `admin` token may also
//! act (every other method). A refusal is JSON with a stable code and nothing else:
//! `auth_required` or `bad_token` (401), `forbidden` (403). docs/security.md has the model.

use std::fmt;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use serde_json::json;

/// Shortest token accepted: a guessable token is worse than none, because it looks safe.
pub const MIN_TOKEN_BYTES: usize = 16;
/// Longest token accepted, and so the bound on a credential the server decodes.
pub const MAX_TOKEN_BYTES: usize = 512;
/// Longest `Authorization` header the server reads; a longer one is refused unread.
pub const MAX_AUTHORIZATION_BYTES: usize = 1024;

/// What a token lets its holder do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Look: GET and HEAD on every route (dashboard, admin views, `/v1` reads).
    Read,
    /// Look and act: every method on every route (actions, puts, leases, drain).
    Admin,
}

impl Role {
    fn parse(s: &str) -> Result<Role, String> {
        match s {
            "read" => Ok(Role::Read),
            "admin" => Ok(Role::Admin),
            other => Err(format!("unknown role {other:?}: use read or admin")),
        }
    }

    /// The role's name as written in settings and token files.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Admin => "admin",
        }
    }
}

/// The configured tokens. Its `Debug` never shows a token, so settings can be logged.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Tokens {
    entries: Vec<(Role, String)>,
}

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let roles: Vec<&str> = self.entries.iter().map(|(r, _)| r.as_str()).collect();
        write!(f, "Tokens({roles:?})")
    }
}

fn check_token(token: &str) -> Result<(), String> {
    if token.len() < MIN_TOKEN_BYTES || token.len() > MAX_TOKEN_BYTES {
        return Err(format!(
            "a token is {MIN_TOKEN_BYTES} to {MAX_TOKEN_BYTES} bytes long (this one is {})",
            token.len()
        ));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic() && b != b',') {
        return Err("a token is printable ASCII without spaces or commas".into());
    }
    Ok(())
}

impl Tokens {
    /// No tokens: the listener is open.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many tokens of `role` there are.
    pub fn count(&self, role: Role) -> usize {
        self.entries.iter().filter(|(r, _)| *r == role).count()
    }

    /// Adds `token` with `role`, refusing a short or malformed token.
    pub fn add(&mut self, role: Role, token: &str) -> Result<(), String> {
        check_token(token)?;
        self.entries.push((role, token.to_string()));
        Ok(())
    }

    /// `--http-token`: a comma-separated list of `[ROLE:]TOKEN`, where a token without a
    /// role is an admin token (the common case of one token for the operator).
    pub fn add_list(&mut self, list: &str) -> Result<(), String> {
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (role, token) = match item.split_once(':') {
                Some((role, token)) if role == "read" || role == "admin" => {
                    (Role::parse(role)?, token)
                }
                _ => (Role::Admin, item),
            };
            self.add(role, token)
                .map_err(|e| format!("--http-token: {e}"))?;
        }
        Ok(())
    }

    /// `--http-token-file`: one `ROLE TOKEN` per line; blank lines and `#` comments are
    /// skipped. `name` is the file's name, for messages.
    pub fn add_file(&mut self, name: &str, text: &str) -> Result<(), String> {
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = |e: String| format!("{name}:{}: {e}", n + 1);
            let mut words = line.split_whitespace();
            let (Some(role), Some(token), None) = (words.next(), words.next(), words.next()) else {
                return Err(at("expected `ROLE TOKEN` (role read or admin)".into()));
            };
            self.add(Role::parse(role).map_err(at)?, token)
                .map_err(at)?;
        }
        Ok(())
    }

    /// The role of a presented token, if it is one of ours. Every configured token is
    /// compared in full, in time that does not depend on where they differ.
    pub fn role_of(&self, presented: &[u8]) -> Option<Role> {
        let mut found = None;
        for (role, token) in &self.entries {
            if constant_time_eq(token.as_bytes(), presented) {
                found = found.max(Some(*role));
            }
        }
        found
    }
}

/// Equal bytes, compared without an early exit (the length is not secret).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why a request was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No credentials (401 `auth_required`).
    Missing,
    /// Credentials that are not a configured token, or not readable (401 `bad_token`).
    Unknown,
    /// A read-only token asked to act (403 `forbidden`).
    ReadOnly,
    /// An action sent by a browser on behalf of another site (403 `cross_site`).
    CrossSite,
    /// An open loopback listener reached under a name that is not local, as a DNS
    /// rebinding attack would (403 `host_not_local`).
    HostNotLocal,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let (status, code, message) = match self {
            Refusal::Missing => (
                StatusCode::UNAUTHORIZED,
                "auth_required",
                "this server needs a token: send `Authorization: Bearer TOKEN` (or basic auth with the token as password)",
            ),
            Refusal::Unknown => (
                StatusCode::UNAUTHORIZED,
                "bad_token",
                "the token is not one this server knows",
            ),
            Refusal::ReadOnly => (
                StatusCode::FORBIDDEN,
                "forbidden",
                "this token may only read; actions need an admin token",
            ),
            Refusal::CrossSite => (
                StatusCode::FORBIDDEN,
                "cross_site",
                "actions are taken only from this server's own pages, not from another site's",
            ),
            Refusal::HostNotLocal => (
                StatusCode::FORBIDDEN,
                "host_not_local",
                "this listener has no tokens and answers only to localhost, 127.0.0.1 or [::1]",
            ),
        };
        let body = Json(json!({ "error": { "code": code, "message": message } }));
        if status == StatusCode::UNAUTHORIZED {
            // Lets a browser ask its user for the token (as the basic-auth password).
            let challenge = [(
                header::WWW_AUTHENTICATE,
                "Basic realm=\"jobyard\", charset=\"UTF-8\"",
            )];
            (status, challenge, body).into_response()
        } else {
            (status, body).into_response()
        }
    }
}

/// The token in `Authorization: Bearer TOKEN`, or the password of
/// `Authorization: Basic base64(USER:PASSWORD)` (the user name is not checked).
fn presented_token(headers: &HeaderMap) -> Result<Option<Vec<u8>>, Refusal> {
    headers
        .get(header::AUTHORIZATION)
        .map(|value| decode_authorization(value.as_bytes()))
        .transpose()
}

/// Decodes an `Authorization` header value into the token it presents (public for the
/// fuzz target, fuzz/fuzz_targets/http_credentials.rs). Bounded: a value over
/// [`MAX_AUTHORIZATION_BYTES`] is refused before it is decoded.
pub fn decode_authorization(value: &[u8]) -> Result<Vec<u8>, Refusal> {
    if value.len() > MAX_AUTHORIZATION_BYTES {
        return Err(Refusal::Unknown);
    }
    let (scheme, rest) = match value.iter().position(|&b| b == b' ') {
        Some(i) => (&value[..i], value[i + 1..].trim_ascii()),
        None => (value, &b""[..]),
    };
    if scheme.eq_ignore_ascii_case(b"bearer") {
        Ok(rest.to_vec())
    } else if scheme.eq_ignore_ascii_case(b"basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .map_err(|_| Refusal::Unknown)?;
        let colon = decoded.iter().position(|&b| b == b':');
        Ok(colon.map_or(Vec::new(), |i| decoded[i + 1..].to_vec()))
    } else {
        Err(Refusal::Unknown)
    }
}

/// What the access check let a request do; handlers find it in the request's extensions
/// (the dashboard asks, to show a read-only view without buttons that would be refused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Granted {
    /// The role of the token presented; `Admin` on a listener without tokens.
    pub role: Role,
    /// Whether the listener asks for tokens at all.
    pub tokens_required: bool,
}

/// What a request may do: what it was granted, else the refusal.
pub fn check(
    tokens: &Tokens,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
) -> Result<Granted, Refusal> {
    if tokens.is_empty() {
        return Ok(Granted {
            role: Role::Admin,
            tokens_required: false,
        });
    }
    let looks = method == Method::GET || method == Method::HEAD;
    if path == "/metrics" && looks {
        return Ok(Granted {
            role: Role::Read,
            tokens_required: true,
        });
    }
    let presented = presented_token(headers)?.ok_or(Refusal::Missing)?;
    let role = tokens.role_of(&presented).ok_or(Refusal::Unknown)?;
    if role == Role::Read && !looks {
        return Err(Refusal::ReadOnly);
    }
    Ok(Granted {
        role,
        tokens_required: true,
    })
}

/// What the listener's middleware checks.
#[derive(Clone, Debug, Default)]
pub struct Guard {
    /// Empty: no token asked for.
    pub tokens: Tokens,
    /// Answer only requests addressed to a loopback name (`localhost`, `127.0.0.0/8`,
    /// `[::1]`): set for an open listener on loopback, where a web page the operator
    /// visits could otherwise rebind its own domain to 127.0.0.1 and use the API.
    pub local_hosts_only: bool,
}

/// Refuses what a browser sends on another site's behalf (CSRF): an action (any method
/// but GET and HEAD) whose `Origin` is not this server, or that the browser marks as not
/// same-origin (`Sec-Fetch-Site`). Programs send neither header and are not affected.
/// With `local_hosts_only`, also refuses a `Host` that is not a loopback name.
pub fn check_browser(
    headers: &HeaderMap,
    method: &Method,
    local_hosts_only: bool,
) -> Result<(), Refusal> {
    let host = headers.get(header::HOST).map(|h| h.as_bytes());
    if local_hosts_only && !host.is_none_or(is_local_host) {
        return Err(Refusal::HostNotLocal);
    }
    if method == Method::GET || method == Method::HEAD {
        return Ok(());
    }
    if let Some(site) = headers.get("sec-fetch-site") {
        if !matches!(site.as_bytes(), b"same-origin" | b"none") {
            return Err(Refusal::CrossSite);
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.as_bytes();
        let authority = origin
            .windows(3)
            .position(|w| w == b"://")
            .map(|i| &origin[i + 3..]);
        match (authority, host) {
            (Some(a), Some(h)) if a.eq_ignore_ascii_case(h) => {}
            _ => return Err(Refusal::CrossSite),
        }
    }
    Ok(())
}

/// `localhost`, a `127.0.0.0/8` address or `[::1]`, with or without a port.
fn is_local_host(host: &[u8]) -> bool {
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

/// Middleware for the whole listener (`axum::middleware::from_fn_with_state`).
pub async fn require_token(
    State(guard): State<Arc<Guard>>,
    mut req: Request,
    next: Next,
) -> Response {
    let checked = check_browser(req.headers(), req.method(), guard.local_hosts_only)
        .and_then(|()| check(&guard.tokens, req.method(), req.uri().path(), req.headers()));
    match checked {
        Ok(granted) => {
            req.extensions_mut().insert(granted);
            next.run(req).await
        }
        Err(refusal) => refusal.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    const ADMIN: &str = "admin-token-0123456789";
    const READER: &str = "reader-token-0123456789";

    fn tokens() -> Tokens {
        let mut t = Tokens::default();
        t.add_list(&format!("{ADMIN},read:{READER}")).unwrap();
        t
    }

    fn with(auth: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(auth).unwrap());
        h
    }

    fn basic(user: &str, password: &str) -> HeaderMap {
        let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        with(&format!("Basic {b64}"))
    }

    /// The role a request was granted, or why it was refused.
    fn role(t: &Tokens, method: &Method, path: &str, headers: &HeaderMap) -> Result<Role, Refusal> {
        check(t, method, path, headers).map(|g| g.role)
    }

    #[test]
    fn without_tokens_everything_is_open() {
        let open = Tokens::default();
        let granted = check(&open, &Method::POST, "/admin/api/drain", &HeaderMap::new());
        assert_eq!(
            granted,
            Ok(Granted {
                role: Role::Admin,
                tokens_required: false
            })
        );
    }

    #[test]
    fn roles_decide_between_looking_and_acting() {
        let t = tokens();
        let get = Method::GET;
        let post = Method::POST;
        assert_eq!(
            role(&t, &get, "/", &HeaderMap::new()),
            Err(Refusal::Missing)
        );
        assert_eq!(
            role(&t, &get, "/metrics", &HeaderMap::new()),
            Ok(Role::Read)
        );
        assert_eq!(
            role(&t, &post, "/metrics", &HeaderMap::new()),
            Err(Refusal::Missing)
        );
        let reader = with(&format!("Bearer {READER}"));
        assert_eq!(
            role(&t, &get, "/admin/api/overview", &reader),
            Ok(Role::Read)
        );
        assert_eq!(role(&t, &Method::HEAD, "/", &reader), Ok(Role::Read));
        assert_eq!(
            role(&t, &post, "/admin/api/drain", &reader),
            Err(Refusal::ReadOnly)
        );
        assert_eq!(
            role(&t, &Method::DELETE, "/v1/jobs/1", &reader),
            Err(Refusal::ReadOnly)
        );
        let admin = with(&format!("bearer {ADMIN}"));
        assert_eq!(role(&t, &post, "/admin/api/drain", &admin), Ok(Role::Admin));
        assert_eq!(
            role(&t, &post, "/v1/lease", &basic("anyone", ADMIN)),
            Ok(Role::Admin)
        );
        assert_eq!(role(&t, &get, "/", &basic("", READER)), Ok(Role::Read));
    }

    #[test]
    fn wrong_or_unreadable_credentials_are_refused() {
        let t = tokens();
        let get = Method::GET;
        for bad in [
            "Bearer nope-nope-nope-nope",
            "Bearer ",
            "Bearer",
            &format!("Bearer {ADMIN}x"),
            &format!("Token {ADMIN}"),
            "Basic !!!not-base64!!!",
        ] {
            assert_eq!(
                role(&t, &get, "/", &with(bad)),
                Err(Refusal::Unknown),
                "{bad}"
            );
        }
        assert_eq!(
            role(&t, &get, "/", &basic(ADMIN, "")),
            Err(Refusal::Unknown)
        );
        let huge = format!("Bearer {}", "a".repeat(MAX_AUTHORIZATION_BYTES));
        assert_eq!(role(&t, &get, "/", &with(&huge)), Err(Refusal::Unknown));
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        h
    }

    #[test]
    fn actions_from_another_site_are_refused() {
        let post = Method::POST;
        let ours = [
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
        ];
        assert_eq!(check_browser(&headers(&ours), &post, true), Ok(()));
        let program = [("host", "jobs.internal:8080")];
        assert_eq!(check_browser(&headers(&program), &post, false), Ok(()));
        for bad in [
            vec![
                ("host", "127.0.0.1:8080"),
                ("origin", "http://evil.example"),
            ],
            vec![("host", "127.0.0.1:8080"), ("origin", "null")],
            vec![
                ("host", "127.0.0.1:8080"),
                ("origin", "http://127.0.0.1:9999"),
            ],
            vec![("host", "127.0.0.1:8080"), ("sec-fetch-site", "cross-site")],
            vec![("host", "127.0.0.1:8080"), ("sec-fetch-site", "same-site")],
        ] {
            assert_eq!(
                check_browser(&headers(&bad), &post, true),
                Err(Refusal::CrossSite),
                "{bad:?}"
            );
        }
        // Looking is not guarded: another site cannot read the answer anyway.
        let look = [("host", "127.0.0.1:8080"), ("sec-fetch-site", "cross-site")];
        assert_eq!(check_browser(&headers(&look), &Method::GET, true), Ok(()));
    }

    #[test]
    fn an_open_loopback_listener_answers_only_to_loopback_names() {
        for host in [
            "localhost",
            "LOCALHOST:8080",
            "127.0.0.1:8080",
            "127.3.4.5",
            "[::1]:8080",
            "[::1]",
        ] {
            assert_eq!(
                check_browser(&headers(&[("host", host)]), &Method::GET, true),
                Ok(()),
                "{host}"
            );
        }
        for host in [
            "evil.example:8080",
            "10.0.0.1:8080",
            "localhost.evil.example",
            "[::2]:80",
            "",
        ] {
            let refused = check_browser(&headers(&[("host", host)]), &Method::GET, true);
            assert_eq!(refused, Err(Refusal::HostNotLocal), "{host}");
            assert_eq!(
                check_browser(&headers(&[("host", host)]), &Method::GET, false),
                Ok(())
            );
        }
    }

    #[test]
    fn token_settings_are_checked_and_never_shown() {
        let mut t = Tokens::default();
        assert!(t.add_list("short").unwrap_err().contains("16 to 512"));
        assert!(t.add_list("read:with space in it!!").is_err());
        let file = "# operators\nadmin  admin-token-0123456789\n\nread reader-token-0123456789\n";
        t.add_file("tokens", file).unwrap();
        assert_eq!((t.count(Role::Admin), t.count(Role::Read)), (1, 1));
        assert!(!format!("{t:?}").contains("0123456789"));
        let err = t
            .add_file("tokens", "writer some-token-0123456789\n")
            .unwrap_err();
        assert!(err.starts_with("tokens:1: unknown role"), "{err}");
        let err = t.add_file("tokens", "\nadmin\n").unwrap_err();
        assert!(err.starts_with("tokens:2: expected"), "{err}");
        // A token may contain a colon; only `read:`/`admin:` prefixes name a role.
        t.add_list("weird:token-0123456789").unwrap();
        assert_eq!(t.role_of(b"weird:token-0123456789"), Some(Role::Admin));
    }
}
