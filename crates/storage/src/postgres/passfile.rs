//! The password file libpq reads (`host:port:database:user:password` lines, `*` matching
//! anything, `\` escaping `:` and `\`), for a `passfile=` parameter in the URL. The client
//! reads `PGPASSFILE` and `~/.pgpass` itself.

use std::path::Path;

use sqlx::postgres::PgConnectOptions;

use super::error::PgError;

/// The password of the first line of `file` that matches the connection, if any.
pub(crate) fn password_from_file(
    file: &Path,
    options: &PgConnectOptions,
) -> Result<Option<String>, PgError> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        PgError::fatal(format!(
            "cannot read the password file {}: {e}",
            file.display()
        ))
    })?;
    let port = options.get_port().to_string();
    let wanted = [
        options.get_host(),
        port.as_str(),
        options.get_database().unwrap_or(options.get_username()),
        options.get_username(),
    ];
    Ok(text
        .lines()
        .filter(|line| !line.starts_with('#'))
        .map(split_fields)
        .find(|fields| {
            fields.len() == 5
                && fields[..4]
                    .iter()
                    .zip(wanted)
                    .all(|(field, want)| field == "*" || field == want)
        })
        .map(|mut fields| fields.swap_remove(4)))
}

/// A line's fields, split at unescaped `:`.
fn split_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => fields.last_mut().expect("one field").extend(chars.next()),
            ':' => fields.push(String::new()),
            c => fields.last_mut().expect("one field").push(c),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    #[test]
    fn finds_the_matching_line() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pass");
        std::fs::write(
            &file,
            "# comment\nother:5432:jobs:app:no\nh:5433:*:app:pa\\:ss\n",
        )
        .unwrap();
        let options = PgConnectOptions::from_str("postgres://app@h:5433/jobs").unwrap();
        let found = password_from_file(&file, &options).unwrap();
        assert_eq!(found.as_deref(), Some("pa:ss"));
    }
}
