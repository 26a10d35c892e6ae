//! ZeroMQ plumbing shared by the device and the worker: frame lists ⇄ `zeromq` messages,
//! and a guard around socket calls.
//!
//! The `zeromq` crate (0.4) has gaps this module exists to contain (see `docs/wmp.md`,
//! "Transport notes"): a DEALER whose peer resets the connection panics inside `recv`
//! (`todo!()`), and a DEALER never reconnects by itself. Socket work therefore runs inside
//! [`guarded`], which turns such a panic into an error, and callers rebuild the socket.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use bytes::Bytes;
use futures_util::FutureExt;
use zeromq::ZmqMessage;

/// A message as a list of frames (what the codec works on).
pub type Frames = Vec<Bytes>;

/// Converts a received message into frames.
pub fn frames_of(msg: ZmqMessage) -> Frames {
    msg.into_vec()
}

/// Converts frames into a message to send; `None` for an empty list (ZeroMQ has no empty
/// messages, and nothing in WMP sends one).
pub fn message_of(frames: Frames) -> Option<ZmqMessage> {
    ZmqMessage::try_from(frames).ok()
}

/// Runs socket work, turning a panic inside the `zeromq` crate into `Err` with its message.
pub async fn guarded<T>(work: impl Future<Output = T>) -> Result<T, String> {
    match AssertUnwindSafe(work).catch_unwind().await {
        Ok(v) => Ok(v),
        Err(panic) => Err(panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic in zeromq".to_owned())),
    }
}
