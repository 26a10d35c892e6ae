//! What one connection may do, decided per decoded message: the password check on the
//! first request, pings answered at once (even before authentication), invalid messages
//! answered with `no: 0` errors, oversized ones answered and closed.
//!
//! Pure logic with no I/O, so the fuzz target can drive it with the decoder.

use std::net::{IpAddr, SocketAddr};

use crate::protocol::{encode_error, encode_pong, Incoming, Request, Response};

/// One connection's rules: whether it has authenticated yet, and against which password.
#[derive(Debug)]
pub struct ConnectionRules {
    authorized: bool,
    password: Option<String>,
}

/// What the connection must do with one message.
#[derive(Debug)]
pub enum Action {
    /// Write these bytes.
    Write(Vec<u8>),
    /// Write these bytes, then close the connection.
    WriteAndClose(Vec<u8>),
    /// Run this request and answer it (exactly once) when done.
    Dispatch(Request),
    /// Hand this reply to the one of our own requests it answers.
    Deliver(Response),
    /// Nothing to do.
    Ignore,
}

/// Whether a peer counts as "localhost" for `always_allow_localhost`: unlike jobd, IPv6
/// `::1` and IPv4-mapped `::ffff:127.x.y.z` count too.
pub fn is_localhost(peer: &SocketAddr) -> bool {
    match peer.ip() {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

impl ConnectionRules {
    /// The rules for a connection. `password` is the daemon's (none = open);
    /// `trusted` skips the check (a localhost peer with `always_allow_localhost`, or a
    /// connection this side opened itself).
    pub fn new(password: Option<String>, trusted: bool) -> ConnectionRules {
        let authorized = trusted || password.is_none();
        ConnectionRules {
            authorized,
            password,
        }
    }

    /// Decides what to do with one decoded message.
    pub fn decide(&mut self, incoming: Incoming) -> Action {
        match incoming {
            Incoming::Ping => Action::Write(encode_pong()),
            Incoming::Pong => Action::Ignore,
            Incoming::Invalid(msg) => Action::Write(encode_error(&0.into(), &msg)),
            Incoming::TooLarge(msg) => Action::WriteAndClose(encode_error(&0.into(), &msg)),
            Incoming::Response(r) => {
                if self.authorized {
                    Action::Deliver(r)
                } else {
                    Action::Ignore
                }
            }
            Incoming::Request(req) => {
                if !self.authorized {
                    if req.password.is_some() && req.password == self.password {
                        self.authorized = true;
                    } else {
                        return Action::WriteAndClose(encode_error(&req.no, "invalid password"));
                    }
                }
                Action::Dispatch(req)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::parse;

    #[test]
    fn password_only_on_first_request() {
        let mut s = ConnectionRules::new(Some("pw".into()), false);
        assert!(matches!(s.decide(parse(b"[2]")), Action::Write(_)));
        let first = parse(br#"[0,{"no":1,"type":"status","password":"pw"}]"#);
        assert!(matches!(s.decide(first), Action::Dispatch(_)));
        let second = parse(br#"[0,{"no":2,"type":"status"}]"#);
        assert!(matches!(s.decide(second), Action::Dispatch(_)));
    }

    #[test]
    fn wrong_password_closes_with_that_requests_no() {
        let mut s = ConnectionRules::new(Some("pw".into()), false);
        match s.decide(parse(br#"[0,{"no":9,"type":"status","password":"x"}]"#)) {
            Action::WriteAndClose(b) => {
                assert_eq!(b, b"[1,{\"no\":9,\"error\":\"invalid password\"}]\x04")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn localhost_includes_ipv6_forms() {
        for a in ["127.0.0.1:1", "[::1]:1", "[::ffff:127.0.0.1]:1"] {
            assert!(is_localhost(&a.parse().unwrap()), "{a}");
        }
        assert!(!is_localhost(&"10.0.0.1:1".parse().unwrap()));
    }
}
