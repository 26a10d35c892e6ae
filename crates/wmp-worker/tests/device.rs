//! The device's command-line upstream specs: an explicit alias, or `u<index>` by default.

use bytes::Bytes;
use jobyard_wmp_worker::device::Upstream;

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

#[test]
fn upstream_specs() {
    assert_eq!(
        Upstream::parse("tcp://h:1", 3),
        Upstream {
            alias: b("u3"),
            endpoint: "tcp://h:1".into()
        }
    );
    assert_eq!(
        Upstream::parse("east=tcp://h:1", 0),
        Upstream {
            alias: b("east"),
            endpoint: "tcp://h:1".into()
        }
    );
}
