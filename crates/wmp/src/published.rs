//! What the manager tells the broker's protocol-neutral worker registry
//! (`Broker::workers`), for the operator's dashboard: a worker (its routing path) with its
//! roles, display name and manager when it speaks, each job it is handed (TAKE) until the
//! lease ends (DONE, expiry, an unreachable TAKE). The registry only lists; nothing here
//! decides anything.

use std::time::Duration;

use jobyard_broker::Broker;
use jobyard_engine::JobId;
use jobyard_wmp_wire::message::{Path, Ready};

use crate::manager::Manager;

/// The registry's name for this front end.
const PROTOCOL: &str = "wmp";

/// A worker holding nothing is forgotten this long after it last spoke: as long as the
/// manager remembers a READY (the registry's default `ready_ttl`).
const FORGET_AFTER: Duration = Duration::from_secs(90);

/// Digits of the hex form, by table rather than `write!`: the formatter was about 1 % of
/// the manager's CPU (docs/benchmarks.md, "14/WMP").
const HEX: &[u8; 16] = b"0123456789abcdef";

/// A routing path as an operator reads it: each hop as text when it is printable, else as
/// hex (ZeroMQ's generated identities are binary), joined with ` / `. Built in one string:
/// it is made for every TAKE.
pub(crate) fn path_label(path: &Path) -> String {
    let mut label = String::with_capacity(path.iter().map(|hop| hop.len() * 2 + 5).sum());
    for (i, hop) in path.iter().enumerate() {
        if i > 0 {
            label.push_str(" / ");
        }
        match std::str::from_utf8(hop) {
            Ok(s) if !s.is_empty() && s.chars().all(|c| c.is_ascii_graphic()) => {
                label.push_str(s);
            }
            _ => {
                label.push_str("0x");
                for b in hop.iter() {
                    label.push(char::from(HEX[usize::from(b >> 4)]));
                    label.push(char::from(HEX[usize::from(b & 0xf)]));
                }
            }
        }
    }
    label
}

impl Manager {
    /// A READY: the worker's roles (none: any queue) and display name.
    pub(crate) fn publish_ready(&self, path: &Path, ready: &Ready) {
        let manager = self.name.clone();
        self.broker
            .workers()
            .seen(PROTOCOL, &path_label(path), Broker::now(), |w| {
                w.ttl = Some(FORGET_AFTER.as_millis() as u64);
                w.any_queue = ready.roles.is_none();
                w.queues = ready.roles.clone().unwrap_or_default();
                w.detail = vec![("manager", manager)];
                if let Some(name) = &ready.worker {
                    w.detail.push(("name", name.clone()));
                }
            });
    }

    /// A TAKE of `job` was queued for `path`.
    pub(crate) fn publish_take(&self, path: &Path, job: JobId) {
        self.broker
            .workers()
            .took(PROTOCOL, &path_label(path), job, Broker::now());
    }

    /// The lease on `job` ended (whatever the worker said, or it ran out).
    pub(crate) fn publish_end(&self, job: JobId) {
        self.broker.workers().job_ended(PROTOCOL, job);
    }

    /// The manager stops: its workers are no longer anyone's.
    pub(crate) fn publish_stop(&self) {
        self.broker.workers().remove_protocol(PROTOCOL);
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    #[test]
    fn paths_read_as_text_or_hex() {
        let path = vec![
            Bytes::from_static(b"device-1"),
            Bytes::from_static(&[0, 0x80, 0, 0x41, 0xa7]),
        ];
        assert_eq!(path_label(&path), "device-1 / 0x00800041a7");
        assert_eq!(path_label(&vec![Bytes::new()]), "0x");
        assert_eq!(path_label(&Vec::new()), "");
    }
}
