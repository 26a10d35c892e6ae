//! The ini dialect jobd's configs are written in (the `ini` npm package, version 2).
//!
//! Hand-written because existing configs must mean the same thing as under jobd, quirks
//! included: `;` and `#` start comments, also after an unquoted value (so a password
//! containing `;` needs quotes, as it did), quotes around a value are removed, keys before
//! any `[section]` belong to the root, and a key seen twice keeps its last value.

/// One parsed file: the root section first, then each `[section]` in file order.
#[derive(Debug, Default, Clone)]
pub struct Ini {
    /// `(section, key, value)`; the root section is `""`.
    pub entries: Vec<(String, String, String)>,
}

impl Ini {
    /// Parses ini text. Never fails: lines that are neither a section, a key nor a comment
    /// are ignored, as the `ini` package does.
    pub fn parse(text: &str) -> Ini {
        let mut ini = Ini::default();
        let mut section = String::new();
        for raw in text.lines() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with(';') || line.starts_with('#') {
                continue;
            }
            if let Some(rest) = line.strip_prefix('[') {
                if let Some(name) = rest.strip_suffix(']') {
                    section = name.trim().to_string();
                }
                continue;
            }
            let (key, value) = match line.split_once('=') {
                Some((k, v)) => (k.trim(), unquote(v.trim())),
                None => (line, "true".to_string()),
            };
            let key = unquote(key);
            if key.is_empty() {
                continue;
            }
            ini.entries
                .retain(|(s, k, _)| !(s == &section && k == &key));
            ini.entries.push((section.clone(), key, value));
        }
        ini
    }

    /// The value of `key` in the root section.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.get_in("", key)
    }

    /// The value of `key` in `section`.
    pub fn get_in(&self, section: &str, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(s, k, _)| s == section && k == key)
            .map(|(_, _, v)| v.as_str())
    }

    /// Every `(key, value)` of `section`, in file order.
    pub fn section<'a>(
        &'a self,
        section: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        self.entries
            .iter()
            .filter(move |(s, _, _)| s == section)
            .map(|(_, k, v)| (k.as_str(), v.as_str()))
    }

    /// Whether a `[section]` header with at least one key exists.
    pub fn has_section(&self, section: &str) -> bool {
        self.entries.iter().any(|(s, _, _)| s == section)
    }
}

/// Quoted values lose their quotes and keep `;`/`#`; unquoted ones are cut at them.
fn unquote(v: &str) -> String {
    let b = v.as_bytes();
    if b.len() >= 2 && (b[0] == b'"' || b[0] == b'\'') && b[b.len() - 1] == b[0] {
        return v[1..v.len() - 1].to_string();
    }
    let mut out = String::new();
    let mut escaped = false;
    for c in v.chars() {
        if escaped {
            out.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == ';' || c == '#' {
            break;
        } else {
            out.push(c);
        }
    }
    out.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_comments_and_quotes() {
        let ini = Ini::parse(
            "; comment\nhost = 0.0.0.0\npassword = ab;cd\nlauncher = \"php x.php {id} ;x\"\n\
             launcher.env.FOO = bar # c\n[targets]\nlow = 5\n# c\nhigh=2\n",
        );
        assert_eq!(ini.get("host"), Some("0.0.0.0"));
        assert_eq!(ini.get("password"), Some("ab"));
        assert_eq!(ini.get("launcher"), Some("php x.php {id} ;x"));
        assert_eq!(ini.get("launcher.env.FOO"), Some("bar"));
        let t: Vec<_> = ini.section("targets").collect();
        assert_eq!(t, vec![("low", "5"), ("high", "2")]);
    }
}
