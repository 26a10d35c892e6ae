//! `GET /admin/api/whoami`: what the caller may do, so the dashboard can hide actions a
//! read-only token would be refused. It answers from what the guard granted, so it lives
//! with the guard rather than with the admin API it sits beside.

use axum::routing::get;
use axum::{Extension, Json, Router};
use serde_json::{json, Value};

use super::{Granted, Role};

/// The route, for the listener to serve beside the operator's.
pub(crate) fn routes() -> Router {
    Router::new().route("/admin/api/whoami", get(whoami))
}

/// The caller's role and whether tokens are asked for. Without the access check in front
/// (it is always there on the listener) the caller is treated as on an open listener.
async fn whoami(granted: Option<Extension<Granted>>) -> Json<Value> {
    let granted = granted.map_or(
        Granted {
            role: Role::Admin,
            tokens_required: false,
        },
        |Extension(g)| g,
    );
    Json(json!({
        "role": granted.role.as_str(),
        "tokens_required": granted.tokens_required,
    }))
}
