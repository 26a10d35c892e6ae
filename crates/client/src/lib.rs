//! An async Rust client for jobyard's HTTP API (docs/http-api.md).
//!
//! [`Client`] puts jobs on any queue (a queue is also a beanstalkd tube and a Gearman
//! function, so a job put here can be done by a worker of any protocol), describes and
//! deletes them, and waits for their outcome. [`Client::worker`] runs a handler over
//! leased jobs with N leases at once, heartbeats while the handler works, completes or
//! fails with the lease's fencing token, and stops gracefully: `stop` lets running
//! handlers finish and report before it returns.
//!
//! ```no_run
//! # async fn demo() -> Result<(), jobyard_client::Error> {
//! let client = jobyard_client::Client::new("http://127.0.0.1:8080")?;
//! let id = client.put("emails", "hello").await?;
//! let workers = client
//!     .worker(&["emails"])
//!     .concurrency(4)
//!     .start(|job: jobyard_client::Job| async move { Ok::<_, jobyard_client::Failure>(job.body) });
//! let outcome = client.wait(id, std::time::Duration::from_secs(5)).await?;
//! workers.stop().await;
//! # Ok(()) }
//! ```
//!
//! Flows (multi-stage jobs) have the same shape: [`Client::declare_flow`],
//! [`Client::create_flow_job`], and [`Client::stage_worker`] whose handler gets a
//! [`StageJob`] and returns the fields to merge into the job's state.
//!
//! # A secured server: tokens and HTTPS
//!
//! A server started with tokens (`--http-token-file`) wants one on every request, and one
//! with `--http-tls-cert` speaks only HTTPS (docs/security.md). [`Client::builder`] takes
//! both:
//!
//! ```no_run
//! # fn demo() -> Result<(), jobyard_client::Error> {
//! let client = jobyard_client::Client::builder()
//!     .url("https://jobs.internal:8080")
//!     .token("0c5bf4e1d7a2e5c8b3f6a9d2e7c1b4a8")
//!     .ca_file("/etc/jobyard/ca.pem")
//!     .build()?;
//! # Ok(()) }
//! ```
//!
//! - The token goes out as `Authorization: Bearer TOKEN`. A `read` token may look (jobs,
//!   counts, results); puts, leases and deletes need an `admin` token. A refused token is
//!   [`Error::Api`] with status 401 (`auth_required`, `bad_token`) or 403 (`forbidden`).
//! - HTTPS is rustls with the ring provider, as the server's listener. With a CA given
//!   (`ca_file`/`ca_pem`), only certificates it signed are trusted; with none, the
//!   platform's root certificates are (read from the system's certificate files when the
//!   client is built; no list is bundled). A certificate that is not trusted, or a server
//!   that does not speak TLS, is [`Error::Tls`].
//! - What the builder is not given comes from the environment, as `jobyard ctl` reads it:
//!   `JOBYARD_URL` (else `http://127.0.0.1:8080`), `JOBYARD_TOKEN`, `JOBYARD_CA_CERT` (a PEM
//!   file). [`Client::from_env`] is the builder given nothing; [`Client::new`] reads
//!   nothing from the environment.

mod builder;
mod error;
mod flows;
mod tls;
mod transport;
mod types;
mod worker;

use std::time::{Duration, Instant};

use hyper::Method;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::{json, Map, Value};

pub use builder::{ClientBuilder, DEFAULT_URL};
pub use error::Error;
pub use flows::{FlowJobOptions, StageJob};
pub use types::{Job, JobId, Outcome, PutOptions};
pub use worker::{Failure, Leased, Summary, WorkerBuilder, Workers};

use crate::transport::Transport;
use crate::types::{number, put_bytes};

/// The longest single wait the server accepts; longer waits are made of several.
const MAX_WAIT_MS: u64 = 60_000;

/// A handle on one jobyard server. Cheap to clone: clones share the connection pool.
#[derive(Clone, Debug)]
pub struct Client {
    transport: Transport,
}

impl Client {
    /// A client for the HTTP listener at `url` (e.g. `http://127.0.0.1:8080`), with no
    /// token and, for `https:`, the platform's roots; the environment is not read. Nothing
    /// is sent until the first call.
    pub fn new(url: &str) -> Result<Client, Error> {
        ClientBuilder::without_env().url(url).build()
    }

    /// A builder for a client with a token or a CA of its own; what it is not given comes
    /// from `JOBYARD_URL`, `JOBYARD_TOKEN` and `JOBYARD_CA_CERT`.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// A client set up entirely from the environment (`JOBYARD_URL`, else
    /// [`DEFAULT_URL`]; `JOBYARD_TOKEN`; `JOBYARD_CA_CERT`).
    pub fn from_env() -> Result<Client, Error> {
        Client::builder().build()
    }

    /// Puts a job with the server's defaults; returns its id once it is durable.
    pub async fn put(&self, queue: &str, body: impl AsRef<[u8]>) -> Result<JobId, Error> {
        self.put_with(queue, body, &PutOptions::default()).await
    }

    /// Puts a job with a priority, delay, ttr or attributes.
    pub async fn put_with(
        &self,
        queue: &str,
        body: impl AsRef<[u8]>,
        options: &PutOptions,
    ) -> Result<JobId, Error> {
        let mut req = Map::new();
        put_bytes(&mut req, "body", body.as_ref());
        if let Some(p) = options.priority {
            req.insert("priority".into(), json!(p));
        }
        if let Some(d) = options.delay {
            req.insert("delay".into(), json!(d));
        }
        if let Some(t) = options.ttr {
            req.insert("ttr".into(), json!(t));
        }
        if let Some(a) = &options.attributes {
            req.insert("attributes".into(), a.clone());
        }
        let path = format!("/v1/queues/{}/jobs", encode_segment(queue));
        let reply = self.post(&path, &Value::Object(req)).await?;
        number(&reply, "id")
    }

    /// Describes a job (state, attempts, attributes, a body preview); `None` once it ended.
    pub async fn job(&self, id: JobId) -> Result<Option<Value>, Error> {
        match self.get(&format!("/v1/jobs/{id}")).await {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.code() == Some("not_found") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Deletes a job that is not leased; `false` if it no longer exists.
    pub async fn delete(&self, id: JobId) -> Result<bool, Error> {
        let path = format!("/v1/jobs/{id}");
        match self.transport.call(Method::DELETE, &path, None).await {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Some("not_found") => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Waits up to `timeout` for a job to end, by whatever protocol ends it. Only a
    /// waiter present at the end hears the outcome (the server keeps none), so start
    /// waiting before the job can finish; [`Outcome::Pending`] if it did not end in time.
    pub async fn wait(&self, id: JobId, timeout: Duration) -> Result<Outcome, Error> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let wait_ms = (left.as_millis() as u64).min(MAX_WAIT_MS);
            let reply = self
                .get(&format!("/v1/jobs/{id}/result?wait_ms={wait_ms}"))
                .await?;
            let outcome = Outcome::from_reply(&reply)?;
            if !matches!(outcome, Outcome::Pending(_)) || Instant::now() >= deadline {
                return Ok(outcome);
            }
        }
    }

    /// A queue's counts (`ready`, `reserved`, `delayed`, `buried`, totals, …).
    pub async fn queue(&self, name: &str) -> Result<Value, Error> {
        self.get(&format!("/v1/queues/{}", encode_segment(name)))
            .await
    }

    /// The server's health: `{"status": "ok"|"draining", "version", "workers"}`.
    pub async fn health(&self) -> Result<Value, Error> {
        self.get("/v1/health").await
    }

    /// Starts building a pool of workers leasing from `queues`.
    pub fn worker(&self, queues: &[&str]) -> WorkerBuilder<Job> {
        let mut fields = Map::new();
        fields.insert("queues".into(), json!(queues));
        WorkerBuilder::new(self.clone(), "/v1/lease".into(), fields)
    }

    pub(crate) async fn get(&self, path: &str) -> Result<Value, Error> {
        self.transport.call(Method::GET, path, None).await
    }

    pub(crate) async fn post(&self, path: &str, body: &Value) -> Result<Value, Error> {
        self.transport.call(Method::POST, path, Some(body)).await
    }

    pub(crate) async fn delete_path(&self, path: &str) -> Result<Value, Error> {
        self.transport.call(Method::DELETE, path, None).await
    }
}

/// The bytes escaped in a path segment: all but RFC 3986's unreserved characters, also
/// those a segment may legally hold, so a name survives any server's path parsing.
const ESCAPED_IN_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes a queue name for a path segment (names may hold `/`, `%`, `?`).
pub(crate) fn encode_segment(s: &str) -> String {
    utf8_percent_encode(s, ESCAPED_IN_SEGMENT).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names_are_encoded_for_a_path() {
        assert_eq!(encode_segment("emails"), "emails");
        assert_eq!(encode_segment("a/b c%"), "a%2Fb%20c%25");
        assert_eq!(encode_segment("x-1_.~é?"), "x-1_.~%C3%A9%3F");
    }

    #[test]
    fn only_http_and_https_urls_are_accepted() {
        assert!(Client::new("http://127.0.0.1:8080/").is_ok());
        // Without root certificates on the machine this is a setting error, never the URL's.
        assert!(!matches!(
            Client::new("https://example.com"),
            Err(Error::BadUrl(_))
        ));
        assert!(matches!(
            Client::new("ftp://example.com"),
            Err(Error::BadUrl(_))
        ));
        assert!(matches!(Client::new("not a url"), Err(Error::BadUrl(_))));
    }

    #[test]
    fn a_ca_without_certificates_is_refused_naming_its_file() {
        let built = Client::builder()
            .url("https://127.0.0.1:1")
            .ca_file("/nonexistent/ca.pem")
            .build();
        assert!(
            matches!(&built, Err(Error::Config(m)) if m.contains("/nonexistent/ca.pem")),
            "{built:?}"
        );
        let built = Client::builder()
            .url("https://127.0.0.1:1")
            .ca_pem("not a certificate")
            .build();
        assert!(matches!(built, Err(Error::Config(_))), "{built:?}");
    }

    #[test]
    fn the_token_never_shows_in_debug_output() {
        let client = Client::builder()
            .url("http://127.0.0.1:1")
            .token("secret-token-0123456789")
            .build()
            .unwrap();
        assert!(!format!("{client:?}").contains("secret-token"));
    }
}
