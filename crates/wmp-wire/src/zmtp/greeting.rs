//! The ZMTP 3.x greeting (RFC 23/37): 64 bytes that open every connection. We send ours in
//! one piece at accept time (a libzmq peer reads exactly 64 bytes of greeting and leaves
//! the rest for its frame decoder) and check the peer's byte by byte as it arrives, so a
//! ZMTP 1.0/2.0 peer, which sends a short greeting and then waits, is refused at once
//! instead of hanging until a timeout.

/// Length of a ZMTP 3.x greeting.
pub const GREETING_LEN: usize = 64;

/// The only security mechanism the manager speaks (no authentication; as before with
/// libzmq's default).
const MECHANISM: &[u8] = b"NULL";

/// Offsets inside the greeting.
const SIGNATURE_END: usize = 10;
const MAJOR: usize = 10;
const MINOR: usize = 11;
const MECHANISM_AT: usize = 12;
const MECHANISM_LEN: usize = 20;

/// Why a peer's greeting was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GreetingError {
    /// Not a ZMTP 2.0+ signature (a ZMTP 1.0 peer, or not ZeroMQ at all).
    BadSignature,
    /// A ZMTP major version other than 3 (e.g. ZMTP 2.0).
    UnsupportedVersion(u8, u8),
    /// A mechanism other than NULL (PLAIN, CURVE, …).
    UnsupportedMechanism,
}

impl std::fmt::Display for GreetingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GreetingError::BadSignature => f.write_str("not a ZMTP 3 greeting signature"),
            GreetingError::UnsupportedVersion(major, minor) => {
                write!(f, "ZMTP version {major}.{minor} is not 3.0 or 3.1")
            }
            GreetingError::UnsupportedMechanism => f.write_str("mechanism is not NULL"),
        }
    }
}

/// Our greeting: ZMTP 3.1, mechanism NULL, as-server 0 (NULL has no roles).
pub fn greeting() -> [u8; GREETING_LEN] {
    let mut g = [0u8; GREETING_LEN];
    g[0] = 0xFF;
    g[9] = 0x7F;
    g[MAJOR] = 3;
    g[MINOR] = 1;
    g[MECHANISM_AT..MECHANISM_AT + MECHANISM.len()].copy_from_slice(MECHANISM);
    g
}

/// Checks as much of a peer's greeting as has arrived. `Ok(true)`: all 64 bytes are there
/// and acceptable; `Ok(false)`: acceptable so far, more needed; `Err`: refuse the peer.
pub fn check_greeting(got: &[u8]) -> Result<bool, GreetingError> {
    if got.first().is_some_and(|&b| b != 0xFF) {
        return Err(GreetingError::BadSignature);
    }
    // Byte 9's low bit set marks a ZMTP 2.0+ peer; a 1.0 peer sends a length there.
    if got.len() >= SIGNATURE_END && got[9] & 1 == 0 {
        return Err(GreetingError::BadSignature);
    }
    if got.len() > MAJOR && got[MAJOR] != 3 {
        return Err(GreetingError::UnsupportedVersion(got[MAJOR], 0));
    }
    if got.len() > MINOR && got[MINOR] > 1 {
        return Err(GreetingError::UnsupportedVersion(3, got[MINOR]));
    }
    let mechanism_end = MECHANISM_AT + MECHANISM_LEN;
    if got.len() >= mechanism_end {
        let field = &got[MECHANISM_AT..mechanism_end];
        let (name, padding) = field.split_at(MECHANISM.len());
        if name != MECHANISM || padding.iter().any(|&b| b != 0) {
            return Err(GreetingError::UnsupportedMechanism);
        }
    }
    Ok(got.len() >= GREETING_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_greeting_is_accepted_by_our_own_check() {
        let g = greeting();
        assert_eq!(&g[..1], &[0xFF]);
        assert_eq!(g[9], 0x7F);
        assert_eq!((g[10], g[11]), (3, 1));
        assert_eq!(&g[12..16], b"NULL");
        assert_eq!(check_greeting(&g), Ok(true));
    }

    #[test]
    fn every_prefix_of_a_good_greeting_asks_for_more() {
        let g = greeting();
        for n in 0..GREETING_LEN {
            assert_eq!(check_greeting(&g[..n]), Ok(false), "prefix of {n}");
        }
    }

    #[test]
    fn zmtp_3_0_is_accepted() {
        let mut g = greeting();
        g[MINOR] = 0;
        assert_eq!(check_greeting(&g), Ok(true));
    }

    #[test]
    fn garbage_and_zmtp_1_are_refused_from_the_first_telling_byte() {
        assert_eq!(check_greeting(b"G"), Err(GreetingError::BadSignature));
        assert_eq!(
            check_greeting(b"GET / HTTP/1.1\r\n"),
            Err(GreetingError::BadSignature)
        );
        // ZMTP 1.0: 0xFF, an 8-byte length, then a flags byte with the low bit clear.
        let v1 = [0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0];
        assert_eq!(check_greeting(&v1), Err(GreetingError::BadSignature));
    }

    #[test]
    fn other_versions_are_refused() {
        let mut g = greeting();
        g[MAJOR] = 1; // ZMTP 2.0 announces revision 1
        assert_eq!(
            check_greeting(&g[..11]),
            Err(GreetingError::UnsupportedVersion(1, 0))
        );
        let mut g = greeting();
        g[MAJOR] = 4;
        assert!(check_greeting(&g).is_err());
        let mut g = greeting();
        g[MINOR] = 2;
        assert_eq!(
            check_greeting(&g[..12]),
            Err(GreetingError::UnsupportedVersion(3, 2))
        );
    }

    #[test]
    fn other_mechanisms_are_refused() {
        let mut g = greeting();
        g[MECHANISM_AT..MECHANISM_AT + 5].copy_from_slice(b"PLAIN");
        assert_eq!(check_greeting(&g), Err(GreetingError::UnsupportedMechanism));
        let mut g = greeting();
        g[MECHANISM_AT..MECHANISM_AT + 5].copy_from_slice(b"CURVE");
        assert_eq!(
            check_greeting(&g[..32]),
            Err(GreetingError::UnsupportedMechanism)
        );
        let mut g = greeting();
        g[MECHANISM_AT + 4] = b'X'; // "NULLX"
        assert_eq!(check_greeting(&g), Err(GreetingError::UnsupportedMechanism));
    }
}
