//! What the manager counts, as `jobyard_commands_total{protocol="wmp",command=…}`: commands
//! received and sent, stale DONEs, and every dropped message by its reason (docs/wmp.md,
//! "Validation": dropped, counted, logged at debug, never answered).

use jobyard_broker::ProtocolMetrics;
use jobyard_wmp_wire::error::DecodeError;

/// The counter names, in index order (see [`Counter`] and [`malformed`]).
pub(crate) const NAMES: &[&str] = &[
    "READY",
    "GIVE",
    "DONE",
    "STATUS",
    "WAKE",
    "TAKE",
    "NO",
    "done_stale",
    "status_stale",
    "lease_expired",
    "registry_full",
    "send_unreachable",
    "send_dropped",
    "unexpected_command",
    "malformed_too_many_frames",
    "malformed_no_delimiter",
    "malformed_path_too_long",
    "malformed_path_frame_too_long",
    "malformed_bad_signature",
    "malformed_no_command",
    "malformed_unknown_command",
    "malformed_no_headers",
    "malformed_headers_too_large",
    "malformed_too_many_headers",
    "malformed_bad_header_line",
    "malformed_duplicate_header",
    "malformed_extra_frames",
    "malformed_payload_too_large",
    "malformed_missing_header",
    "malformed_bad_header_value",
    "malformed_unexpected_payload",
    "malformed_no_alias",
];

/// Counters other than the malformed ones, by index into [`NAMES`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Counter {
    Ready = 0,
    Give,
    Done,
    Status,
    Wake,
    Take,
    No,
    DoneStale,
    StatusStale,
    LeaseExpired,
    RegistryFull,
    SendUnreachable,
    SendDropped,
    UnexpectedCommand,
}

const FIRST_MALFORMED: usize = Counter::UnexpectedCommand as usize + 1;

/// Counts one occurrence.
pub(crate) fn count(metrics: &ProtocolMetrics, counter: Counter) {
    metrics.count(counter as usize);
}

/// Counts a dropped message under its reason.
pub(crate) fn malformed(metrics: &ProtocolMetrics, error: &DecodeError) {
    let name = error.reason();
    let index = NAMES[FIRST_MALFORMED..]
        .iter()
        .position(|n| n.strip_prefix("malformed_") == Some(name))
        .map_or(Counter::UnexpectedCommand as usize, |i| FIRST_MALFORMED + i);
    metrics.count(index);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_own_counter() {
        let errors = [
            DecodeError::TooManyFrames,
            DecodeError::NoDelimiter,
            DecodeError::PathTooLong,
            DecodeError::PathFrameTooLong,
            DecodeError::BadSignature,
            DecodeError::NoCommand,
            DecodeError::UnknownCommand,
            DecodeError::NoHeaders,
            DecodeError::HeadersTooLarge,
            DecodeError::TooManyHeaders,
            DecodeError::BadHeaderLine,
            DecodeError::DuplicateHeader,
            DecodeError::ExtraFrames,
            DecodeError::PayloadTooLarge,
            DecodeError::MissingHeader("job"),
            DecodeError::BadHeaderValue("job"),
            DecodeError::UnexpectedPayload,
            DecodeError::NoAlias,
        ];
        let metrics = jobyard_broker::Metrics::default();
        let p = metrics.protocol("wmp-test", NAMES);
        for e in &errors {
            malformed(&p, e);
        }
        for (name, n) in p.commands().skip(FIRST_MALFORMED) {
            assert_eq!(n, 1, "{name}");
        }
        assert_eq!(p.command(Counter::UnexpectedCommand as usize), 0);
    }
}
