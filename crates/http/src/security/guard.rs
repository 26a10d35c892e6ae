//! The check every request passes before any route runs: the listener's middleware,
//! what it grants (a role) and what it refuses.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::browser::check_browser;
use super::credentials::presented_token;
use super::{Refusal, Role, Tokens};

/// What the access check let a request do; handlers find it in the request's extensions
/// (the dashboard asks, to show a read-only view without buttons that would be refused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Granted {
    /// The role of the token presented; `Admin` on a listener without tokens.
    pub role: Role,
    /// Whether the listener asks for tokens at all.
    pub tokens_required: bool,
}

/// Routes a `read` token may POST to: they only read, and take a body because what they
/// are asked does not fit a URL (a lookup of up to 1000 flow job ids).
const READS_BY_POST: [&str; 1] = ["/v1/flow-jobs/lookup"];

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
    let looks = method == Method::GET
        || method == Method::HEAD
        || (method == Method::POST && READS_BY_POST.contains(&path));
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
    use axum::http::{header, HeaderValue};
    use base64::Engine as _;

    use super::*;
    use crate::security::MAX_AUTHORIZATION_BYTES;

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
        assert_eq!(
            role(&t, &post, "/v1/flow-jobs/lookup", &reader),
            Ok(Role::Read),
            "a lookup only reads"
        );
        assert_eq!(
            role(&t, &post, "/v1/flow-jobs/lookup/x", &reader),
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
}
