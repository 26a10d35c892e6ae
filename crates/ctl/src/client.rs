//! The HTTP client `jobyard ctl` talks through: the server's base URL, its token (sent as
//! `Authorization: Bearer`), and for HTTPS the CA to trust when the certificate is not
//! signed by a public one (a self-signed or in-house CA).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use serde_json::Value;

/// Why a command failed, and its exit code.
pub struct Failure(pub String, pub i32);

/// Exit code when the server refused the token (401) or its role (403).
pub const EXIT_ACCESS_DENIED: i32 = 3;

/// One server, with what it takes to be let in.
pub struct Client {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
}

impl Client {
    /// A client of `base` (`http://` or `https://`), trusting `ca_cert` (PEM) if given,
    /// else the usual public roots.
    pub fn new(
        base: &str,
        token: Option<String>,
        ca_cert: Option<&Path>,
    ) -> Result<Client, Failure> {
        let mut builder = ureq::AgentBuilder::new();
        if let Some(path) = ca_cert {
            builder = builder.tls_config(Arc::new(trusting(path)?));
        }
        Ok(Client {
            base: base.trim_end_matches('/').to_string(),
            token: token.filter(|t| !t.is_empty()),
            agent: builder.build(),
        })
    }

    /// Calls the admin API at `path`; the JSON reply, or the server's message.
    pub fn call(&self, method: &str, path: &str) -> Result<Value, Failure> {
        self.request(method, &format!("/admin/api{path}"), None)
    }

    /// Calls the HTTP API (`/v1...`) at `path`, with a JSON body if given.
    pub fn call_api(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, Failure> {
        self.request(method, &format!("/v1{path}"), body)
    }

    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, Failure> {
        let url = format!("{}{path}", self.base);
        let mut req = self.agent.request(method, &url);
        if let Some(token) = &self.token {
            req = req.set("Authorization", &format!("Bearer {token}"));
        }
        let sent = match body {
            Some(body) => req
                .set("Content-Type", "application/json")
                .send_string(&body.to_string()),
            None => req.call(),
        };
        let (status, text) = match sent {
            Ok(r) => (r.status(), r.into_string()),
            Err(ureq::Error::Status(code, r)) => (code, r.into_string()),
            Err(e) => return Err(Failure(format!("cannot reach {}: {e}", self.base), 2)),
        };
        let text = text.map_err(|e| Failure(format!("reading the reply: {e}"), 2))?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|_| Failure(format!("{url} did not answer JSON ({status})"), 2))?;
        if status >= 400 {
            let msg = v["error"]["message"]
                .as_str()
                .unwrap_or("refused")
                .to_string();
            if status == 401 || status == 403 {
                let hint = match (status, &self.token) {
                    (401, None) => " (give --token or JOBYARD_TOKEN)",
                    _ => "",
                };
                return Err(Failure(format!("{msg}{hint}"), EXIT_ACCESS_DENIED));
            }
            return Err(Failure(msg, 1));
        }
        Ok(v)
    }
}

/// A TLS client configuration that trusts the certificates in the PEM file `path`.
fn trusting(path: &Path) -> Result<rustls::ClientConfig, Failure> {
    let bad = |e: String| Failure(format!("--ca-cert {}: {e}", path.display()), 2);
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).map_err(|e| bad(e.to_string()))? {
        roots
            .add(cert.map_err(|e| bad(e.to_string()))?)
            .map_err(|e| bad(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(bad("no `BEGIN CERTIFICATE` block in the file".into()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}
