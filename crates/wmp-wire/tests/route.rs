//! The device alias-stack rule, simulated through chains of devices with the two ROUTER
//! behaviours ZeroMQ gives (receive prepends the sender's id, send pops the first frame):
//! every reply must reach the manager on the very path its READY arrived on.

use bytes::Bytes;
use jobyard_wmp_wire::route::{downward, upward, Upward};
use jobyard_wmp_wire::*;

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn body(cmd: &str) -> Vec<Bytes> {
    vec![Bytes::new(), b("WMP01"), b(cmd), Bytes::new()]
}

fn with_path(path: &[Bytes], rest: Vec<Bytes>) -> Vec<Bytes> {
    path.iter().cloned().chain(rest).collect()
}

/// A chain of `depth` devices between worker "w" and one manager. Device i (0 = nearest the
/// worker) has DEALER id `d{i}` upstream and calls its single upstream `alias(i)`.
struct Chain {
    depth: usize,
}

impl Chain {
    fn alias(i: usize) -> Bytes {
        b(&format!("up{i}"))
    }

    /// Worker → manager; `frames` as the worker's DEALER sends them. Returns the frames the
    /// manager's ROUTER delivers, or the first drop.
    fn up(&self, frames: Vec<Bytes>) -> Result<Vec<Bytes>, DecodeError> {
        let limits = Limits::default();
        let mut sender = b("w");
        let mut frames = frames;
        for i in 0..self.depth {
            let mut received = vec![sender.clone()];
            received.extend(frames);
            frames = match upward(received, &limits)? {
                Upward::FanOut(f) => f,
                Upward::To { alias, frames } => {
                    assert_eq!(
                        alias,
                        Chain::alias(i),
                        "device {i} routed to the wrong upstream"
                    );
                    frames
                }
            };
            sender = b(&format!("d{i}"));
        }
        let mut at_manager = vec![sender];
        at_manager.extend(frames);
        Ok(at_manager)
    }

    /// Manager → worker; `frames` as the manager's ROUTER sends them (first = next hop).
    fn down(&self, frames: Vec<Bytes>) -> Result<Vec<Bytes>, DecodeError> {
        let limits = Limits::default();
        let mut frames = frames;
        for i in (0..self.depth).rev() {
            // The ROUTER above consumed the first frame (this device's id).
            assert_eq!(frames[0], b(&format!("d{i}")));
            frames.remove(0);
            frames = downward(frames, &Chain::alias(i), &limits)?;
        }
        assert_eq!(frames[0], b("w"));
        frames.remove(0);
        Ok(frames)
    }
}

fn split(frames: &[Bytes]) -> (Vec<Bytes>, Vec<Bytes>) {
    let d = frames.iter().position(|f| f.is_empty()).unwrap();
    (frames[..d].to_vec(), frames[d..].to_vec())
}

#[test]
fn replies_return_on_the_ready_path_through_0_to_15_devices() {
    for depth in 0..=15 {
        let chain = Chain { depth };
        let ready = chain.up(body("READY")).unwrap();
        let (p, _) = split(&ready);
        assert_eq!(p.len(), depth + 1);
        assert_eq!(p.last().unwrap(), &b("w"));
        let wake = chain.down(with_path(&p, body("WAKE"))).unwrap();
        let (q, rest) = split(&wake);
        assert_eq!(q.len(), depth, "the worker sees one alias per device");
        assert_eq!(rest, body("WAKE"));
        let give = chain.up(with_path(&q, body("GIVE"))).unwrap();
        assert_eq!(
            split(&give).0,
            p,
            "depth {depth}: GIVE path differs from READY path"
        );
    }
}

#[test]
fn sixteen_devices_exceed_the_path_limit() {
    let chain = Chain { depth: 16 };
    // The manager-side ROUTER would see 17 path frames: the last device already refuses.
    let ready = chain.up(body("READY")).unwrap();
    assert_eq!(split(&ready).0.len(), 17);
    assert_eq!(
        decode(&ready, &Limits::default()),
        Err(DecodeError::PathTooLong)
    );
    // Downward, a device never grows a path past the limit either.
    let sixteen: Vec<Bytes> = (0..16).map(|i| b(&format!("p{i}"))).collect();
    let fifteen = &sixteen[..15];
    assert!(downward(
        with_path(fifteen, body("WAKE")),
        &b("u0"),
        &Limits::default()
    )
    .is_ok());
    assert_eq!(
        downward(
            with_path(&sixteen, body("WAKE")),
            &b("u0"),
            &Limits::default()
        ),
        Err(DecodeError::PathTooLong)
    );
}

#[test]
fn ready_fans_out_unchanged() {
    let mut f = vec![b("w")];
    f.extend(body("READY"));
    assert_eq!(upward(f.clone(), &Limits::default()), Ok(Upward::FanOut(f)));
}

#[test]
fn non_ready_without_alias_is_refused() {
    let mut f = vec![b("w")];
    f.extend(body("GIVE"));
    assert_eq!(upward(f, &Limits::default()), Err(DecodeError::NoAlias));
}

#[test]
fn device_checks_the_envelope_but_not_the_command() {
    let mut f = vec![b("w"), b("u0")];
    f.extend(body("STATUS2"));
    assert!(matches!(
        upward(f, &Limits::default()),
        Ok(Upward::To { .. })
    ));
    let mut bad = vec![
        b("w"),
        b("u0"),
        Bytes::new(),
        b("WMP02"),
        b("GIVE"),
        Bytes::new(),
    ];
    assert_eq!(
        upward(bad.clone(), &Limits::default()),
        Err(DecodeError::BadSignature)
    );
    bad.truncate(2);
    assert_eq!(
        upward(bad, &Limits::default()),
        Err(DecodeError::NoDelimiter)
    );
}

#[test]
fn downward_needs_a_next_hop() {
    assert_eq!(
        downward(body("WAKE"), &b("u0"), &Limits::default()),
        Err(DecodeError::NoDelimiter)
    );
}
