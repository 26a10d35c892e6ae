//! Feeds arbitrary bytes, split at fuzzer-chosen points, to the manager's ZMTP session (the
//! greeting, the NULL handshake, frames and commands) and to the frame header and command
//! decoders: nothing may panic, nothing may be buffered past the limits, and a message
//! delivered never holds more frames or bytes than allowed.
//!
//! Input layout: the first byte picks the split step (1..=64 bytes fed at a time); the
//! rest is the byte stream. The stream is prefixed with a valid greeting and READY when the
//! first byte is odd, so the fuzzer reaches the frame decoder without guessing a handshake.
#![no_main]

use bytes::Bytes;
use jobyard_wmp_wire::zmtp::command::parse_command;
use jobyard_wmp_wire::zmtp::frame::{parse_header, put_frame, COMMAND};
use jobyard_wmp_wire::zmtp::greeting::greeting;
use jobyard_wmp_wire::zmtp::session::{Event, Session, SessionLimits};
use libfuzzer_sys::fuzz_target;

const LIMITS: SessionLimits = SessionLimits {
    max_frame: 4096,
    max_frames: 8,
    max_message: 8192,
};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let _ = parse_command(rest);
    if let Ok(Some(h)) = parse_header(rest, LIMITS.max_frame) {
        assert!(h.body_len <= LIMITS.max_frame);
    }
    let mut stream = Vec::new();
    if mode & 1 == 1 {
        stream.extend_from_slice(&greeting());
        let mut ready = b"\x05READY\x0bSocket-Type".to_vec();
        ready.extend_from_slice(&6u32.to_be_bytes());
        ready.extend_from_slice(b"DEALER");
        put_frame(&mut stream, COMMAND, &ready);
    }
    stream.extend_from_slice(rest);
    let step = (mode as usize >> 1) % 64 + 1;

    let mut session = Session::new(LIMITS);
    let (mut buf, mut out, mut events) = (Vec::new(), Vec::new(), Vec::new());
    for chunk in stream.chunks(step) {
        buf.extend_from_slice(chunk);
        loop {
            let Ok(used) = session.feed(&buf, &mut out, &mut events) else {
                return;
            };
            buf.drain(..used);
            let mut named = false;
            for event in events.drain(..) {
                match event {
                    Event::Handshake { .. } => {
                        session.open(Bytes::from_static(b"\0id"));
                        named = true;
                    }
                    Event::Message(frames) => {
                        assert!(frames.len() <= 1 + LIMITS.max_frames + 1);
                        let bytes: usize = frames[1..].iter().map(Bytes::len).sum();
                        assert!(bytes <= LIMITS.max_message);
                    }
                }
            }
            if !named {
                break;
            }
        }
        // Only one unfinished unit (a frame: header + body) plus the last chunk may wait.
        assert!(buf.len() <= 9 + LIMITS.max_frame + step);
        out.clear();
    }
});
