//! The configured tokens and their roles (`--http-token`, `--http-token-file`), and
//! finding the role of a presented token without revealing where it differs.

use std::fmt;

use subtle::ConstantTimeEq;

/// Shortest token accepted: a guessable token is worse than none, because it looks safe.
pub const MIN_TOKEN_BYTES: usize = 16;
/// Longest token accepted, and so the bound on a credential the server decodes.
pub const MAX_TOKEN_BYTES: usize = 512;

/// What a token lets its holder do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Look: GET and HEAD on every route (dashboard, admin views, `/v1` reads).
    Read,
    /// Look and act: every method on every route (actions, puts, leases, drain).
    Admin,
}

impl Role {
    fn parse(s: &str) -> Result<Role, String> {
        match s {
            "read" => Ok(Role::Read),
            "admin" => Ok(Role::Admin),
            other => Err(format!("unknown role {other:?}: use read or admin")),
        }
    }

    /// The role's name as written in settings and token files.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Admin => "admin",
        }
    }
}

/// The configured tokens. Its `Debug` never shows a token, so settings can be logged.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Tokens {
    entries: Vec<(Role, String)>,
}

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let roles: Vec<&str> = self.entries.iter().map(|(r, _)| r.as_str()).collect();
        write!(f, "Tokens({roles:?})")
    }
}

fn check_token(token: &str) -> Result<(), String> {
    if token.len() < MIN_TOKEN_BYTES || token.len() > MAX_TOKEN_BYTES {
        return Err(format!(
            "a token is {MIN_TOKEN_BYTES} to {MAX_TOKEN_BYTES} bytes long (this one is {})",
            token.len()
        ));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic() && b != b',') {
        return Err("a token is printable ASCII without spaces or commas".into());
    }
    Ok(())
}

impl Tokens {
    /// No tokens: the listener is open.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many tokens of `role` there are.
    pub fn count(&self, role: Role) -> usize {
        self.entries.iter().filter(|(r, _)| *r == role).count()
    }

    /// Adds `token` with `role`, refusing a short or malformed token.
    pub fn add(&mut self, role: Role, token: &str) -> Result<(), String> {
        check_token(token)?;
        self.entries.push((role, token.to_string()));
        Ok(())
    }

    /// `--http-token`: a comma-separated list of `[ROLE:]TOKEN`, where a token without a
    /// role is an admin token (the common case of one token for the operator).
    pub fn add_list(&mut self, list: &str) -> Result<(), String> {
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (role, token) = match item.split_once(':') {
                Some((role, token)) if role == "read" || role == "admin" => {
                    (Role::parse(role)?, token)
                }
                _ => (Role::Admin, item),
            };
            self.add(role, token)
                .map_err(|e| format!("--http-token: {e}"))?;
        }
        Ok(())
    }

    /// `--http-token-file`: one `ROLE TOKEN` per line; blank lines and `#` comments are
    /// skipped. `name` is the file's name, for messages.
    pub fn add_file(&mut self, name: &str, text: &str) -> Result<(), String> {
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = |e: String| format!("{name}:{}: {e}", n + 1);
            let mut words = line.split_whitespace();
            let (Some(role), Some(token), None) = (words.next(), words.next(), words.next()) else {
                return Err(at("expected `ROLE TOKEN` (role read or admin)".into()));
            };
            self.add(Role::parse(role).map_err(at)?, token)
                .map_err(at)?;
        }
        Ok(())
    }

    /// The role of a presented token, if it is one of ours. Every configured token is
    /// compared in full, in time that does not depend on where they differ.
    pub fn role_of(&self, presented: &[u8]) -> Option<Role> {
        let mut found = None;
        for (role, token) in &self.entries {
            // Unequal lengths compare unequal at once: a token's length is not secret.
            if bool::from(token.as_bytes().ct_eq(presented)) {
                found = found.max(Some(*role));
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_settings_are_checked_and_never_shown() {
        let mut t = Tokens::default();
        assert!(t.add_list("short").unwrap_err().contains("16 to 512"));
        assert!(t.add_list("read:with space in it!!").is_err());
        let file = "# operators\nadmin  admin-token-0123456789\n\nread reader-token-0123456789\n";
        t.add_file("tokens", file).unwrap();
        assert_eq!((t.count(Role::Admin), t.count(Role::Read)), (1, 1));
        assert!(!format!("{t:?}").contains("0123456789"));
        let err = t
            .add_file("tokens", "writer some-token-0123456789\n")
            .unwrap_err();
        assert!(err.starts_with("tokens:1: unknown role"), "{err}");
        let err = t.add_file("tokens", "\nadmin\n").unwrap_err();
        assert!(err.starts_with("tokens:2: expected"), "{err}");
        // A token may contain a colon; only `read:`/`admin:` prefixes name a role.
        t.add_list("weird:token-0123456789").unwrap();
        assert_eq!(t.role_of(b"weird:token-0123456789"), Some(Role::Admin));
        // Only the whole token: a prefix or a longer credential is nobody's.
        assert_eq!(t.role_of(b"weird:token-012345678"), None);
        assert_eq!(t.role_of(b"weird:token-01234567890"), None);
        assert_eq!(t.role_of(b""), None);
    }
}
