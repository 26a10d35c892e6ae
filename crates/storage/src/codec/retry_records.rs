//! The records of retry policies: a queue's policy with a retry part, and a job's failure
//! history. A policy without a retry part is still written as a `POLICY` record of the old
//! bytes, so logs written before retry policies existed replay as they did.

use bytes::{BufMut, Bytes};
use jobyard_engine::{
    Backoff, Change, Failure, FailureHistory, JobId, LeaseClose, QueuePolicy, RetryPolicy,
};

use super::{
    decode_policy, encode_policy, put_opt_bytes, DecodeError, Reader, FAILURES, POLICY_RETRY,
};

/// The `POLICY` record's fields under type `POLICY_RETRY`, then the retry part: most
/// attempts, backoff (0 fixed, 1 exponential), first delay and cap in milliseconds, and
/// the dead-letter queue (optional bytes).
pub(super) fn encode_retry_policy(queue: &[u8], policy: &QueuePolicy, out: &mut Vec<u8>) {
    let start = out.len();
    encode_policy(queue, policy, out);
    out[start] = POLICY_RETRY;
    let retry = policy.retry.as_ref().expect("caller checked");
    out.put_u32_le(retry.max_attempts);
    out.put_u8(match retry.backoff {
        Backoff::Fixed => 0,
        Backoff::Exponential => 1,
    });
    out.put_u64_le(retry.backoff_ms);
    out.put_u64_le(retry.backoff_max_ms);
    put_opt_bytes(out, retry.dead_letter.as_deref());
}

pub(super) fn decode_retry_policy(r: &mut Reader<'_>) -> Result<Change, DecodeError> {
    let Change::Policy { queue, mut policy } = decode_policy(r)? else {
        unreachable!("decode_policy gives a policy");
    };
    let max_attempts = r.u32()?;
    let backoff = match r.u8()? {
        0 => Backoff::Fixed,
        1 => Backoff::Exponential,
        other => return Err(DecodeError::BadState(other)),
    };
    policy.retry = Some(RetryPolicy {
        max_attempts,
        backoff,
        backoff_ms: r.u64()?,
        backoff_max_ms: r.u64()?,
        dead_letter: r.opt_bytes()?.map(Bytes::copy_from_slice),
    });
    Ok(Change::Policy { queue, policy })
}

/// The job id, then 0 (forgotten) or 1 and the history: the queue it failed in, the count
/// of failures, and each failure kept (time, holder, how as a byte, error text).
pub(super) fn encode_failures(id: JobId, history: Option<&FailureHistory>, out: &mut Vec<u8>) {
    out.put_u8(FAILURES);
    out.put_u64_le(id);
    let Some(h) = history else {
        out.put_u8(0);
        return;
    };
    out.put_u8(1);
    put_opt_bytes(out, Some(&h.origin));
    out.put_u32_le(h.count);
    out.put_u32_le(h.failures.len() as u32);
    for f in &h.failures {
        out.put_u64_le(f.at);
        out.put_u64_le(f.holder);
        out.put_u8(close_code(f.how));
        put_opt_bytes(out, f.error.as_deref());
    }
}

pub(super) fn decode_failures(r: &mut Reader<'_>) -> Result<Change, DecodeError> {
    let id = r.u64()?;
    if r.u8()? == 0 {
        return Ok(Change::Failures { id, history: None });
    }
    let origin = r.opt_bytes()?.ok_or(DecodeError::Truncated)?;
    let count = r.u32()?;
    let kept = r.u32()?;
    // Each failure takes at least 21 bytes: a count the payload cannot hold is damage,
    // refused before anything is allocated for it.
    if kept as usize > r.buf.len() / 21 {
        return Err(DecodeError::Truncated);
    }
    let mut failures = Vec::with_capacity(kept as usize);
    for _ in 0..kept {
        failures.push(Failure {
            at: r.u64()?,
            holder: r.u64()?,
            how: close_of(r.u8()?)?,
            error: r.opt_bytes()?.map(Bytes::copy_from_slice),
        });
    }
    let history = FailureHistory {
        origin: Bytes::copy_from_slice(origin),
        count,
        failures,
    };
    Ok(Change::Failures {
        id,
        history: Some(Box::new(history)),
    })
}

fn close_code(how: LeaseClose) -> u8 {
    match how {
        LeaseClose::Ok => 0,
        LeaseClose::Failed => 1,
        LeaseClose::Deleted => 2,
        LeaseClose::Released => 3,
        LeaseClose::Buried => 4,
        LeaseClose::Expired => 5,
        LeaseClose::Disconnected => 6,
    }
}

fn close_of(code: u8) -> Result<LeaseClose, DecodeError> {
    Ok(match code {
        0 => LeaseClose::Ok,
        1 => LeaseClose::Failed,
        2 => LeaseClose::Deleted,
        3 => LeaseClose::Released,
        4 => LeaseClose::Buried,
        5 => LeaseClose::Expired,
        6 => LeaseClose::Disconnected,
        other => return Err(DecodeError::BadState(other)),
    })
}

#[cfg(test)]
mod tests {
    use super::super::{decode_change, encode_payload};
    use super::*;

    fn round_trip(change: &Change) -> Vec<u8> {
        let mut out = Vec::new();
        encode_payload(change, &mut out);
        assert_eq!(&decode_change(&out).unwrap(), change);
        out
    }

    fn emails_retry() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 3,
            backoff: Backoff::Exponential,
            backoff_ms: 1000,
            backoff_max_ms: 60_000,
            dead_letter: Some(Bytes::from_static(b"emails-dead")),
        }
    }

    #[test]
    fn a_policy_without_retries_keeps_the_old_record_and_one_with_them_gets_its_own() {
        let plain = Change::Policy {
            queue: Bytes::from_static(b"emails"),
            policy: QueuePolicy {
                lease_limit: 4,
                ..QueuePolicy::default()
            },
        };
        assert_eq!(round_trip(&plain)[0], 12);
        for dead_letter in [Some(Bytes::from_static(b"emails-dead")), None] {
            let retrying = Change::Policy {
                queue: Bytes::from_static(b"emails"),
                policy: QueuePolicy {
                    lease_limit: 4,
                    retry: Some(RetryPolicy {
                        dead_letter,
                        ..emails_retry()
                    }),
                    ..QueuePolicy::default()
                },
            };
            assert_eq!(round_trip(&retrying)[0], 14);
        }
    }

    /// A type-12 record as written before retry policies existed, byte for byte.
    #[test]
    fn an_old_policy_record_still_replays_without_a_retry_policy() {
        let mut old = vec![12u8];
        old.extend_from_slice(&1u32.to_le_bytes());
        old.push(b'q');
        old.extend_from_slice(&2u32.to_le_bytes()); // lease limit
        old.push(2); // paused for ever
        old.extend_from_slice(&0u64.to_le_bytes());
        old.extend_from_slice(&0u32.to_le_bytes());
        old.extend_from_slice(&0u32.to_le_bytes()); // no rate limit
        old.extend_from_slice(&0u64.to_le_bytes());
        let Change::Policy { policy, .. } = decode_change(&old).unwrap() else {
            panic!("a policy");
        };
        assert_eq!(policy.retry, None);
        assert_eq!(policy.lease_limit, 2);
    }

    #[test]
    fn a_failure_history_round_trips_and_its_forgetting_too() {
        let history = FailureHistory {
            origin: Bytes::from_static(b"emails"),
            count: 2,
            failures: vec![
                Failure::new(
                    1_700_000_000_000,
                    7,
                    LeaseClose::Failed,
                    Some("smtp 550".into()),
                ),
                Failure::new(1_700_000_001_000, 8, LeaseClose::Expired, None),
            ],
        };
        round_trip(&Change::Failures {
            id: 42,
            history: Some(Box::new(history)),
        });
        round_trip(&Change::Failures {
            id: 42,
            history: None,
        });
    }

    #[test]
    fn a_history_claiming_more_failures_than_it_holds_is_refused() {
        let mut out = vec![FAILURES];
        out.extend_from_slice(&1u64.to_le_bytes());
        out.push(1);
        put_opt_bytes(&mut out, Some(b"q"));
        out.extend_from_slice(&1u32.to_le_bytes());
        out.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode_change(&out), Err(DecodeError::Truncated));
    }
}
