//! TLS on the HTTP listener (rustls with ring): the certificate chain and key from PEM
//! files, and a connection type whose handshake runs on first use.
//!
//! The handshake is driven by the connection's own task, not by the accept loop, so a
//! client that connects and never completes its handshake delays nobody else; it only
//! holds its place at the gate, as any idle connection does.

use std::future::Future as _;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::{Accept, TlsAcceptor};

/// The PEM files of the listener's certificate (chain, leaf first) and its private key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Reads the files and builds the acceptor; every failure names the file and what is wrong.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, String> {
    let shown = |p: &Path| p.display().to_string();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| format!("TLS certificate {}: {e}", shown(&files.cert)))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("TLS certificate {}: {e}", shown(&files.cert)))?;
    if certs.is_empty() {
        return Err(format!(
            "TLS certificate {}: no `BEGIN CERTIFICATE` block in the file",
            shown(&files.cert)
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("TLS key {}: {e}", shown(&files.key)))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            format!(
                "TLS certificate {} and key {}: {e}",
                shown(&files.cert),
                shown(&files.key)
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// A connection that completes its TLS handshake the first time it is read or written.
pub struct LazyTls<S> {
    state: State<S>,
}

// Boxed: a TLS session is large, and the plain connections it sits beside are not.
enum State<S> {
    Handshaking(Box<Accept<S>>),
    Ready(Box<tokio_rustls::server::TlsStream<S>>),
    Failed,
}

impl<S: AsyncRead + AsyncWrite + Unpin> LazyTls<S> {
    /// Starts the handshake on `stream` (it advances only when the connection is polled).
    pub fn new(acceptor: &TlsAcceptor, stream: S) -> LazyTls<S> {
        LazyTls {
            state: State::Handshaking(Box::new(acceptor.accept(stream))),
        }
    }

    /// Drives the handshake; `Ready(Ok)` once the stream can carry HTTP.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            match &mut self.state {
                State::Ready(_) => return Poll::Ready(Ok(())),
                State::Failed => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "the TLS handshake failed",
                    )))
                }
                State::Handshaking(accept) => match ready!(Pin::new(&mut **accept).poll(cx)) {
                    Ok(stream) => self.state = State::Ready(Box::new(stream)),
                    Err(e) => {
                        tracing::debug!("http: TLS handshake failed: {e}");
                        self.state = State::Failed;
                        return Poll::Ready(Err(e));
                    }
                },
            }
        }
    }

    fn stream(&mut self) -> Pin<&mut tokio_rustls::server::TlsStream<S>> {
        match &mut self.state {
            State::Ready(stream) => Pin::new(stream),
            _ => unreachable!("poll_ready returned Ok"),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for LazyTls<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_ready(cx))?;
        this.stream().poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for LazyTls<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_ready(cx))?;
        this.stream().poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_ready(cx))?;
        this.stream().poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match this.state {
            // Nothing was sent yet: closing needs no TLS close_notify.
            State::Handshaking(_) | State::Failed => Poll::Ready(Ok(())),
            State::Ready(_) => this.stream().poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path, cert: &str, key: Option<&str>) -> TlsFiles {
        let files = TlsFiles {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        };
        std::fs::write(&files.cert, cert).unwrap();
        if let Some(key) = key {
            std::fs::write(&files.key, key).unwrap();
        }
        files
    }

    /// Usable files are covered end to end (tests/http/test_http_security.py, with a CA
    /// and certificate made by openssl); these are the refusals, each naming its file.
    #[test]
    fn unusable_files_are_refused_with_the_file_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = acceptor(&files(dir.path(), "not a certificate\n", Some(""))).err();
        let err = err.expect("refused");
        assert!(
            err.contains("cert.pem") && err.contains("no `BEGIN CERTIFICATE`"),
            "{err}"
        );

        let junk_cert = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let err = acceptor(&files(dir.path(), junk_cert, None)).err();
        let err = err.expect("refused");
        assert!(
            err.starts_with("TLS key") && err.contains("key.pem"),
            "{err}"
        );

        let err = acceptor(&files(dir.path(), junk_cert, Some("no key here\n"))).err();
        assert!(err.expect("refused").contains("key.pem"));

        let missing = TlsFiles {
            cert: dir.path().join("absent.pem"),
            key: dir.path().join("key.pem"),
        };
        let err = acceptor(&missing).err().expect("refused");
        assert!(err.contains("absent.pem"), "{err}");
    }
}
