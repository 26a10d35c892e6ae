//! Feeds arbitrary frame lists to the WMP/1 decoder and to the device's routing rule: nothing
//! may panic, a decoded message must encode and decode to itself, and routing never grows a
//! path past the limit.
//!
//! Input layout: a sequence of frames, each a length byte then that many bytes (the last
//! frame takes what is left), so the fuzzer controls frame boundaries, empty frames included.
#![no_main]

use bytes::Bytes;
use jobyard_wmp_wire::route::{downward, upward, Upward};
use jobyard_wmp_wire::{decode, encode, Headers, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_payload: 4096,
        ..Limits::default()
    };
    let mut frames = Vec::new();
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let n = (len as usize).min(tail.len());
        frames.push(Bytes::copy_from_slice(&tail[..n]));
        rest = &tail[n..];
        if frames.len() > 64 {
            break;
        }
    }
    let _ = Headers::parse(data, &limits);
    if let Ok(msg) = decode(&frames, &limits) {
        assert!(msg.path.len() <= limits.max_path);
        let again = decode(&encode(&msg), &limits).expect("an encoded message decodes");
        assert_eq!(again, msg);
    }
    match upward(frames.clone(), &limits) {
        Ok(Upward::FanOut(f)) => assert_eq!(f, frames),
        Ok(Upward::To { frames: f, .. }) => assert_eq!(f.len() + 1, frames.len()),
        Err(_) => {}
    }
    if let Ok(f) = downward(frames.clone(), &Bytes::from_static(b"u0"), &limits) {
        let delimiter = f.iter().position(|x| x.is_empty()).expect("delimiter kept");
        assert!(delimiter <= limits.max_path);
    }
});
