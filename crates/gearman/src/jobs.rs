//! What Gearman does to jobs beyond the engine's operations: the unique keys it coalesces
//! on, and failing a job for good.

use bytes::Bytes;
use jobyard_broker::{ProtocolMetrics, Txn};
use jobyard_engine::{JobEnd, JobId};

use crate::registry::Registry;
use crate::Server;

/// Prefix of the engine unique key for unique `-`: gearmand then coalesces on the payload.
/// A real unique cannot contain `\0`, so these keys never collide with one.
pub(crate) const DASH_KEY: &[u8] = b"-\0";

/// The engine's unique key for a submit (`None`: never coalesces).
pub(crate) fn coalesce_key(unique: &Bytes, data: &Bytes) -> Option<Bytes> {
    if unique.is_empty() {
        None
    } else if &unique[..] == b"-" && !data.is_empty() {
        // FNV-1a over the payload plus its length; a hit is confirmed by comparing bodies.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in data.iter() {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        Some(Bytes::from(
            format!("-\0{h:016x}:{}", data.len()).into_bytes(),
        ))
    } else {
        Some(unique.clone())
    }
}

/// The unique ID a client gave, from the engine's key.
pub(crate) fn shown_unique(key: Option<&Bytes>) -> &[u8] {
    match key {
        Some(k) if k.starts_with(DASH_KEY) => b"-",
        Some(k) => k,
        None => b"",
    }
}

/// Ends a job nobody will get a result for; its watching clients hear WORK_FAIL.
pub(crate) fn fail_job(server: &Server, txn: &mut Txn<'_>, reg: &mut Registry, id: JobId) {
    let owner = txn.job(id).map_or(0, |j| j.owner);
    if txn.finish(owner, id, JobEnd::failed(None)) {
        ProtocolMetrics::inc(&server.metrics.jobs_failed);
    }
    reg.forget(id);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalescing_keys_follow_gearmand() {
        let d = Bytes::from_static(b"payload");
        assert_eq!(
            coalesce_key(&Bytes::new(), &d),
            None,
            "empty unique never coalesces"
        );
        assert_eq!(
            coalesce_key(&Bytes::from_static(b"u"), &d).unwrap(),
            &b"u"[..]
        );
        let dash = coalesce_key(&Bytes::from_static(b"-"), &d).unwrap();
        assert!(dash.starts_with(DASH_KEY));
        assert_eq!(
            dash,
            coalesce_key(&Bytes::from_static(b"-"), &d.clone()).unwrap()
        );
        assert_ne!(
            dash,
            coalesce_key(&Bytes::from_static(b"-"), &Bytes::from_static(b"x")).unwrap()
        );
        assert_eq!(
            coalesce_key(&Bytes::from_static(b"-"), &Bytes::new()).unwrap(),
            &b"-"[..]
        );
        assert_eq!(shown_unique(Some(&dash)), b"-");
    }
}
