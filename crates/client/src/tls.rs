//! Which certificates an `https:` server may present: those signed by the CA the user gave
//! (and only those, as `jobyard ctl --ca-cert` does, so a private server is not also trusted
//! on a public CA's word), else those signed by one of the platform's roots.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

use crate::error::Error;

/// Where the CA to trust comes from.
#[derive(Clone, Debug)]
pub(crate) enum CaSource {
    /// PEM text (one or more `BEGIN CERTIFICATE` blocks).
    Pem(Vec<u8>),
    /// A PEM file, read when the client is built.
    File(PathBuf),
}

/// The rustls configuration for `https:` URLs, with the ring provider the server uses.
pub(crate) fn client_config(ca: Option<&CaSource>) -> Result<ClientConfig, Error> {
    let roots = match ca {
        Some(source) => ca_roots(source)?,
        None => platform_roots()?,
    };
    Ok(with_roots(roots))
}

/// A configuration that trusts nothing: an `http:` client never uses it, and building it
/// reads no files.
pub(crate) fn unused_config() -> ClientConfig {
    with_roots(RootCertStore::empty())
}

fn with_roots(roots: RootCertStore) -> ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// The certificates of a user's CA; an error names the file when it came from one.
fn ca_roots(source: &CaSource) -> Result<RootCertStore, Error> {
    let (pem, origin) = match source {
        CaSource::Pem(pem) => (pem.clone(), "the CA PEM".to_string()),
        CaSource::File(path) => {
            let pem = std::fs::read(path)
                .map_err(|e| Error::Config(format!("CA file {}: {e}", path.display())))?;
            (pem, format!("CA file {}", path.display()))
        }
    };
    let bad = |e: String| Error::Config(format!("{origin}: {e}"));
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| bad(e.to_string()))?;
        roots.add(cert).map_err(|e| bad(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(bad("no `BEGIN CERTIFICATE` block".into()));
    }
    Ok(roots)
}

/// The platform's root certificates. Files that cannot be read are skipped (as every
/// TLS client on the host does); finding none at all is an error, since no server could
/// then be trusted.
fn platform_roots() -> Result<RootCertStore, Error> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        return Err(Error::Config(
            "an https: URL with no CA given, and no root certificates found on this system \
             (give ca_file/ca_pem or JOBYARD_CA_CERT)"
                .into(),
        ));
    }
    Ok(roots)
}
