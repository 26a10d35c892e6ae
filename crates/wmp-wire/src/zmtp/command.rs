//! ZMTP command bodies: READY with its metadata properties (the NULL handshake), PING/PONG
//! (ZMTP 3.1 heartbeats) and ERROR. Every length inside a body is checked against the
//! bytes actually there.

use bytes::Bytes;

/// Longest routing id a peer may set (ZeroMQ's own bound).
pub const MAX_IDENTITY: usize = 255;
/// Longest PING context a peer may send (ZMTP 3.1).
const MAX_PING_CONTEXT: usize = 16;

/// A command the session understands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// The peer's READY: its socket type and the routing id it asked for, if any.
    Ready {
        /// `Socket-Type` property.
        socket_type: Bytes,
        /// `Identity` property, `None` when absent or empty.
        identity: Option<Bytes>,
    },
    /// A heartbeat request; the answer is a PONG with the same context.
    Ping {
        /// Echoed back in the PONG.
        context: Bytes,
    },
    /// A heartbeat answer.
    Pong,
    /// The peer gives up (a handshake failure on its side).
    Error(Bytes),
    /// A command this session does not use (e.g. SUBSCRIBE): ignored.
    Other,
}

/// Why a command body was refused (the connection is closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandError {
    /// A length inside the body runs past its end.
    Truncated,
    /// READY's Identity is longer than 255 bytes.
    IdentityTooLong,
}

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommandError::Truncated => f.write_str("truncated command"),
            CommandError::IdentityTooLong => f.write_str("identity longer than 255 bytes"),
        }
    }
}

/// Splits `n` bytes off the front of `buf`, or says it is truncated.
fn take<'a>(buf: &mut &'a [u8], n: usize) -> Result<&'a [u8], CommandError> {
    if buf.len() < n {
        return Err(CommandError::Truncated);
    }
    let (head, rest) = buf.split_at(n);
    *buf = rest;
    Ok(head)
}

/// Decodes a command frame's body (name-size, name, data).
pub fn parse_command(body: &[u8]) -> Result<Command, CommandError> {
    let mut rest = body;
    let name_len = take(&mut rest, 1)?[0] as usize;
    let name = take(&mut rest, name_len)?;
    match name {
        b"READY" => parse_ready(rest),
        b"PING" => {
            take(&mut rest, 2)?; // TTL: we apply our own timeout to every peer
            let context = &rest[..rest.len().min(MAX_PING_CONTEXT)];
            Ok(Command::Ping {
                context: Bytes::copy_from_slice(context),
            })
        }
        b"PONG" => Ok(Command::Pong),
        b"ERROR" => {
            let len = take(&mut rest, 1)?[0] as usize;
            Ok(Command::Error(Bytes::copy_from_slice(take(
                &mut rest, len,
            )?)))
        }
        _ => Ok(Command::Other),
    }
}

/// READY's metadata: properties of (name-size: 1, name, value-size: 4 BE, value).
fn parse_ready(mut rest: &[u8]) -> Result<Command, CommandError> {
    let mut socket_type = Bytes::new();
    let mut identity = None;
    while !rest.is_empty() {
        let name_len = take(&mut rest, 1)?[0] as usize;
        let name = take(&mut rest, name_len)?;
        let mut be = [0u8; 4];
        be.copy_from_slice(take(&mut rest, 4)?);
        let value = take(&mut rest, u32::from_be_bytes(be) as usize)?;
        if name.eq_ignore_ascii_case(b"Socket-Type") {
            socket_type = Bytes::copy_from_slice(value);
        } else if name.eq_ignore_ascii_case(b"Identity") {
            if value.len() > MAX_IDENTITY {
                return Err(CommandError::IdentityTooLong);
            }
            identity = (!value.is_empty()).then(|| Bytes::copy_from_slice(value));
        }
    }
    Ok(Command::Ready {
        socket_type,
        identity,
    })
}

/// Whether a ROUTER talks to a peer of this socket type (as libzmq's ROUTER does).
pub fn router_accepts(socket_type: &[u8]) -> bool {
    matches!(socket_type, b"DEALER" | b"REQ" | b"ROUTER")
}

/// The body of our READY: `Socket-Type` = ROUTER.
pub fn ready_body() -> Vec<u8> {
    let mut body = Vec::with_capacity(32);
    body.push(5);
    body.extend_from_slice(b"READY");
    body.push(11);
    body.extend_from_slice(b"Socket-Type");
    body.extend_from_slice(&6u32.to_be_bytes());
    body.extend_from_slice(b"ROUTER");
    body
}

/// The body of a PING with no TTL and no context (our heartbeat).
pub fn ping_body() -> Vec<u8> {
    let mut body = vec![4];
    body.extend_from_slice(b"PING");
    body.extend_from_slice(&0u16.to_be_bytes());
    body
}

/// The body of a PONG answering a PING with `context`.
pub fn pong_body(context: &[u8]) -> Vec<u8> {
    let mut body = vec![4];
    body.extend_from_slice(b"PONG");
    body.extend_from_slice(context);
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(props: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut body = vec![5];
        body.extend_from_slice(b"READY");
        for (name, value) in props {
            body.push(name.len() as u8);
            body.extend_from_slice(name);
            body.extend_from_slice(&(value.len() as u32).to_be_bytes());
            body.extend_from_slice(value);
        }
        body
    }

    #[test]
    fn ready_gives_socket_type_and_identity() {
        let cmd = parse_command(&ready(&[(b"Socket-Type", b"DEALER"), (b"Identity", b"w1")]));
        assert_eq!(
            cmd,
            Ok(Command::Ready {
                socket_type: Bytes::from_static(b"DEALER"),
                identity: Some(Bytes::from_static(b"w1")),
            })
        );
        let cmd = parse_command(&ready(&[(b"socket-type", b"REQ"), (b"Identity", b"")]));
        assert_eq!(
            cmd,
            Ok(Command::Ready {
                socket_type: Bytes::from_static(b"REQ"),
                identity: None,
            })
        );
    }

    #[test]
    fn our_ready_parses_as_a_router() {
        let Ok(Command::Ready { socket_type, .. }) = parse_command(&ready_body()) else {
            panic!("our READY does not parse");
        };
        assert_eq!(&socket_type[..], b"ROUTER");
    }

    #[test]
    fn lengths_past_the_end_are_refused() {
        let mut body = ready(&[(b"Socket-Type", b"DEALER")]);
        body.truncate(body.len() - 1);
        assert_eq!(parse_command(&body), Err(CommandError::Truncated));
        // A value length of 4 GiB in a 30-byte body.
        let mut body = ready(&[]);
        body.extend_from_slice(&[8]);
        body.extend_from_slice(b"Identity");
        body.extend_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(parse_command(&body), Err(CommandError::Truncated));
        assert_eq!(parse_command(&[]), Err(CommandError::Truncated));
        assert_eq!(parse_command(&[9, b'R']), Err(CommandError::Truncated));
        assert_eq!(parse_command(b"\x04PING\x00"), Err(CommandError::Truncated));
    }

    #[test]
    fn long_identities_are_refused() {
        let long = vec![b'x'; 256];
        assert_eq!(
            parse_command(&ready(&[(b"Identity", &long)])),
            Err(CommandError::IdentityTooLong)
        );
    }

    #[test]
    fn ping_pong_and_error() {
        let mut ping = ping_body();
        ping.extend_from_slice(b"ctx");
        assert_eq!(
            parse_command(&ping),
            Ok(Command::Ping {
                context: Bytes::from_static(b"ctx")
            })
        );
        assert_eq!(parse_command(&pong_body(b"ctx")), Ok(Command::Pong));
        assert_eq!(
            parse_command(b"\x05ERROR\x03bad"),
            Ok(Command::Error(Bytes::from_static(b"bad")))
        );
        assert_eq!(parse_command(b"\x09SUBSCRIBE"), Ok(Command::Other));
    }

    #[test]
    fn router_talks_to_dealers_reqs_and_routers_only() {
        assert!(router_accepts(b"DEALER") && router_accepts(b"REQ") && router_accepts(b"ROUTER"));
        assert!(!router_accepts(b"PUB") && !router_accepts(b"") && !router_accepts(b"dealer"));
    }
}
