//! Mailboxes: where the engine's notices for one session arrive.
//!
//! Most notices are a few bytes, but a watched job's updates carry data (Gearman WORK_DATA
//! streams a job's output to its clients). A client that stops reading must not make the
//! server buffer that without limit, so each mailbox counts the payload bytes queued in it,
//! and once past its cap it stops taking updates and marks itself overflowed; the
//! connection layer then closes the session (docs/architecture.md, "Bounds").

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use jobyard_engine::NoticeKind;
use tokio::sync::mpsc;

/// Payload bytes a session may have queued in its mailbox before it is cut off.
pub const MAILBOX_CAP: usize = 16 << 20;

#[derive(Debug, Default)]
struct Load {
    queued: AtomicUsize,
    overflowed: AtomicBool,
    /// Wakes a connection blocked writing to a peer that does not read.
    overflow: tokio::sync::Notify,
}

/// The sending side, kept by the broker.
#[derive(Debug)]
pub(crate) struct Sender {
    tx: mpsc::UnboundedSender<NoticeKind>,
    load: Arc<Load>,
}

/// The receiving side, kept by the session's connection.
#[derive(Debug)]
pub struct Mailbox {
    rx: mpsc::UnboundedReceiver<NoticeKind>,
    load: Arc<Load>,
}

pub(crate) fn channel() -> (Sender, Mailbox) {
    let (tx, rx) = mpsc::unbounded_channel();
    let load = Arc::new(Load::default());
    (
        Sender {
            tx,
            load: load.clone(),
        },
        Mailbox { rx, load },
    )
}

/// Payload bytes a notice carries (what a slow reader could pile up).
fn weight(kind: &NoticeKind) -> usize {
    match kind {
        NoticeKind::Update(_, u) => match &**u {
            jobyard_engine::JobUpdate::Progress { num, den } => num.len() + den.len(),
            jobyard_engine::JobUpdate::Data(d) | jobyard_engine::JobUpdate::Warning(d) => d.len(),
        },
        NoticeKind::Ended(_, end) => end.result.len() + end.error.as_ref().map_or(0, |e| e.len()),
        _ => 0,
    }
}

impl Sender {
    /// Queues a notice. Updates beyond the cap are dropped and the mailbox is marked
    /// overflowed; ends and lease notices always go through (they are what a session needs
    /// to stay consistent, and there is at most one end per watched job).
    pub(crate) fn send(&self, kind: NoticeKind) {
        let w = weight(&kind);
        if w > 0 {
            let queued = self.load.queued.fetch_add(w, Ordering::Relaxed) + w;
            if queued > MAILBOX_CAP && matches!(kind, NoticeKind::Update(..)) {
                self.load.queued.fetch_sub(w, Ordering::Relaxed);
                self.load.overflowed.store(true, Ordering::Relaxed);
                self.load.overflow.notify_waiters();
                return;
            }
        }
        let _ = self.tx.send(kind);
    }
}

impl Mailbox {
    /// The next notice; `None` once the broker forgot the session.
    pub async fn recv(&mut self) -> Option<NoticeKind> {
        let kind = self.rx.recv().await?;
        self.took(&kind);
        Some(kind)
    }

    /// The next notice if one is queued.
    pub fn try_recv(&mut self) -> Option<NoticeKind> {
        let kind = self.rx.try_recv().ok()?;
        self.took(&kind);
        Some(kind)
    }

    fn took(&self, kind: &NoticeKind) {
        let w = weight(kind);
        if w > 0 {
            self.load.queued.fetch_sub(w, Ordering::Relaxed);
        }
    }

    /// Whether updates were dropped because the session did not keep up: the session can
    /// no longer be told the whole story and should be closed.
    pub fn overflowed(&self) -> bool {
        self.load.overflowed.load(Ordering::Relaxed)
    }

    /// Resolves once the mailbox has overflowed, so a connection stuck writing to a peer
    /// that stopped reading can give up instead of buffering on.
    pub async fn wait_overflow(&self) {
        loop {
            let notified = self.load.overflow.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.overflowed() {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use jobyard_engine::{JobEnd, JobUpdate};

    #[test]
    fn updates_past_the_cap_are_dropped_and_flagged_but_ends_are_not() {
        let (tx, mut mb) = channel();
        let chunk = Bytes::from(vec![0u8; 1 << 20]);
        for _ in 0..(MAILBOX_CAP >> 20) {
            tx.send(NoticeKind::Update(
                1,
                Arc::new(JobUpdate::Data(chunk.clone())),
            ));
        }
        assert!(!mb.overflowed());
        tx.send(NoticeKind::Update(
            1,
            Arc::new(JobUpdate::Data(chunk.clone())),
        ));
        assert!(mb.overflowed());
        tx.send(NoticeKind::Ended(1, Arc::new(JobEnd::ok(chunk))));
        let mut n = 0;
        let mut ended = false;
        while let Some(k) = mb.try_recv() {
            n += 1;
            ended |= matches!(k, NoticeKind::Ended(..));
        }
        assert_eq!(n, (MAILBOX_CAP >> 20) + 1);
        assert!(ended);
        assert_eq!(mb.load.queued.load(Ordering::Relaxed), 0);
    }
}
