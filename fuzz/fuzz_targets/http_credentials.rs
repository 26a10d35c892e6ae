//! Feeds arbitrary bytes to the HTTP listener's `Authorization` decoder (bearer and basic):
//! it must never panic, never return more than it was given, and a token it decodes must
//! be found (or not) among configured tokens without panicking either.
#![no_main]

use jobyard_http::security::{decode_authorization, Role, Tokens};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(token) = decode_authorization(data) {
        assert!(token.len() <= data.len());
        let mut tokens = Tokens::default();
        tokens.add(Role::Read, "fuzz-reader-token-0123").unwrap();
        let _ = tokens.role_of(&token);
    }
});
