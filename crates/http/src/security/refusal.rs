//! Why a request was refused, and how the refusal reads: JSON with a stable code and
//! nothing else.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

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
