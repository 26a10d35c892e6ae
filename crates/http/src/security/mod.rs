//! Everything that decides who may use the HTTP listener and how, in one place:
//!
//! - `settings`: [`Security`], the settings built from the flags (tokens, TLS files,
//!   `--http-insecure`), and the guard and the start-up log line they make;
//! - `tokens`: [`Tokens`] and their [`Role`]s (`read` may look, `admin` may also act),
//!   compared in constant time;
//! - `credentials`: the token a request presents (bearer, or basic auth's password);
//! - `guard`: the middleware every request passes before any route, what it grants
//!   ([`Granted`]) and `refusal`: what it refuses ([`Refusal`]);
//! - `browser`: no action on another site's behalf (CSRF);
//! - `loopback`: an open listener serves loopback only, and answers only loopback names;
//! - [`tls`]: HTTPS on the listener;
//! - `whoami`: the route that tells the dashboard what the caller was granted.
//!
//! Without tokens the listener is open (the server then refuses to listen beyond loopback
//! unless told it is fine). With tokens, every request needs one except `GET /metrics`,
//! which Prometheus scrapes. A refusal is JSON with a stable code and nothing else:
//! `auth_required` or `bad_token` (401), `forbidden`, `cross_site` or `host_not_local`
//! (403). docs/security.md has the model.
//!
//! It lives in the HTTP crate because the listener is the HTTP crate's: the guard wraps
//! every route the listener serves, the `/v1` API and the operator's routes from
//! `jobyard_ops` alike, and this crate depends on `jobyard_ops`, not the other way round.
//! So the operator's routes know nothing of tokens; the one admin route that reports on
//! them (`whoami`) is here.

mod browser;
mod credentials;
mod guard;
mod loopback;
mod refusal;
mod settings;
/// TLS on the listener: certificate files and the per-connection handshake.
pub mod tls;
mod tokens;
mod whoami;

pub use browser::check_browser;
pub use credentials::{decode_authorization, MAX_AUTHORIZATION_BYTES};
pub use guard::{check, require_token, Granted, Guard};
pub use refusal::Refusal;
pub use settings::Security;
pub use tls::TlsFiles;
pub use tokens::{Role, Tokens, MAX_TOKEN_BYTES, MIN_TOKEN_BYTES};
pub(crate) use whoami::routes as whoami_routes;
