//! The device's alias-stack rule (spec §3.5) as pure functions on frame lists: the one
//! piece of routing that lets a worker's GIVE and DONE find the manager that woke it through
//! any chain of stateless devices.

use bytes::Bytes;

use crate::codec::envelope;
use crate::error::DecodeError;
use crate::limits::Limits;

/// What a device does with a message that came in on its downstream ROUTER.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upward {
    /// READY: send these frames, unchanged, on every upstream.
    FanOut(Vec<Bytes>),
    /// Anything else: send these frames on the upstream named `alias`.
    To {
        /// The alias that was the last path frame.
        alias: Bytes,
        /// The message with that alias removed.
        frames: Vec<Bytes>,
    },
}

/// Routes a message received on the downstream ROUTER (its first frame is the routing id
/// the ROUTER prepended). READY fans out; anything else pops the last path frame as the
/// upstream alias. A non-READY message without an alias cannot be routed.
pub fn upward(mut frames: Vec<Bytes>, limits: &Limits) -> Result<Upward, DecodeError> {
    let env = envelope(&frames, limits)?;
    if env.is_ready {
        return Ok(Upward::FanOut(frames));
    }
    // frames[0] is the sender's routing id; the alias is a frame the sender put there.
    if env.delimiter < 2 {
        return Err(DecodeError::NoAlias);
    }
    let alias = frames.remove(env.delimiter - 1);
    Ok(Upward::To { alias, frames })
}

/// Routes a message received from upstream `alias`: inserts the alias just before the
/// delimiter, so the worker's reply names this upstream. The first frame (the next hop
/// down) is consumed by the downstream ROUTER when sending. Fails if the grown path would
/// pass the limit (a routing loop or an over-long chain).
pub fn downward(
    mut frames: Vec<Bytes>,
    alias: &Bytes,
    limits: &Limits,
) -> Result<Vec<Bytes>, DecodeError> {
    let env = envelope(&frames, limits)?;
    if env.delimiter == 0 {
        // Nothing to address the ROUTER send to.
        return Err(DecodeError::NoDelimiter);
    }
    if env.delimiter + 1 > limits.max_path {
        return Err(DecodeError::PathTooLong);
    }
    frames.insert(env.delimiter, alias.clone());
    Ok(frames)
}
