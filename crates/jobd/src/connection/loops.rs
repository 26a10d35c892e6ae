//! The two tasks of one connection: the reader decodes messages and acts on each as the
//! connection's rules decide (dispatching requests, delivering replies to ours), the
//! writer sends whole messages in order.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch, Semaphore};

use super::peer::{PeerConnection, RequestHandler};
use super::rules::{Action, ConnectionRules};
use crate::protocol::{encode_data, encode_error, Decoder};

/// Most requests of one connection handled at once; reading pauses beyond that, so a
/// client that pipelines without reading replies cannot make the daemon buffer without end.
pub const MAX_IN_FLIGHT: usize = 256;

/// What the writer is asked to do next.
pub(super) enum Out {
    Bytes(Vec<u8>),
    Close,
}

pub(super) async fn write_loop(
    mut write: tokio::net::tcp::OwnedWriteHalf,
    mut rx: mpsc::Receiver<Out>,
    mut closed: watch::Receiver<bool>,
) {
    loop {
        // Biased: whatever is queued is written before a close is noticed, so an error
        // reply sent just before closing (invalid password, oversized message) gets out.
        let out = tokio::select! {
            biased;
            out = rx.recv() => out,
            _ = closed.wait_for(|c| *c) => None,
        };
        match out {
            Some(Out::Bytes(b)) => {
                if write.write_all(&b).await.is_err() {
                    break;
                }
            }
            Some(Out::Close) | None => break,
        }
    }
    let _ = write.shutdown().await;
}

pub(super) async fn read_loop(
    mut read: tokio::net::tcp::OwnedReadHalf,
    link: Arc<PeerConnection>,
    mut rules: ConnectionRules,
    handler: Arc<dyn RequestHandler>,
    max_frame: usize,
) {
    let mut decoder = Decoder::new(max_frame);
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut buf = BytesMut::with_capacity(8192);
    let mut closed = link.closed.subscribe();
    'conn: loop {
        while let Some(msg) = decoder.decode(&mut buf) {
            match rules.decide(msg) {
                Action::Write(b) => {
                    if link.out.send(Out::Bytes(b)).await.is_err() {
                        break 'conn;
                    }
                }
                Action::WriteAndClose(b) => {
                    let _ = link.out.send(Out::Bytes(b)).await;
                    let _ = link.out.send(Out::Close).await;
                    break 'conn;
                }
                Action::Dispatch(req) => {
                    let Ok(permit) = in_flight.clone().acquire_owned().await else {
                        break 'conn;
                    };
                    let link2 = link.clone();
                    let fut = handler.handle(link.clone(), req.kind, req.data);
                    let no = req.no;
                    tokio::spawn(async move {
                        let bytes = match fut.await {
                            Ok(data) => encode_data(&no, data),
                            Err(e) => encode_error(&no, &e),
                        };
                        let _ = link2.out.send(Out::Bytes(bytes)).await;
                        drop(permit);
                    });
                }
                Action::Deliver(r) => {
                    let waiter =
                        r.no.as_i64()
                            .and_then(|n| link.pending.lock().unwrap().remove(&n));
                    match waiter {
                        Some(tx) => {
                            let _ = tx.send(r);
                        }
                        None => tracing::debug!(no = %r.no, "jobd: response to no request of ours"),
                    }
                }
                Action::Ignore => {}
            }
            // Any message from the peer is a sign of life for the master's liveness check.
            link.ponged.store(true, Ordering::Relaxed);
        }
        tokio::select! {
            n = read.read_buf(&mut buf) => match n {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            },
            _ = closed.wait_for(|c| *c) => break,
        }
    }
    link.mark_closed();
}
