//! Where the log lives in PostgreSQL: the connection options parsed from the URL, the
//! schema, and the URL as it may be shown (no password).

use std::path::Path;
use std::str::FromStr;

use sqlx::postgres::PgConnectOptions;
use sqlx::ConnectOptions;

use super::error::PgError;
use super::location::PgLocation;
use super::passfile::password_from_file;
use super::redact::redact_url;

/// Longest schema name PostgreSQL keeps whole (NAMEDATALEN - 1).
const MAX_SCHEMA_NAME: usize = 63;

/// A PostgreSQL database and schema to keep the log in, from `--storage` and
/// `--storage-schema`. Its `Debug` and [`PgTarget::shown`] never include the password.
#[derive(Clone)]
pub struct PgTarget {
    options: PgConnectOptions,
    schema: String,
    shown: String,
}

impl std::fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgTarget({}, schema {})", self.shown, self.schema)
    }
}

impl PgTarget {
    /// Parses a `postgres://` or `postgresql://` URL and a schema name. The password comes
    /// from the URL, else `PGPASSWORD`, else the file a `passfile=` parameter names, else
    /// `PGPASSFILE` or `~/.pgpass`, as with libpq; `sslmode=` and the other parameters
    /// libpq knows are read from the URL.
    pub fn parse(url: &str, schema: &str) -> Result<PgTarget, PgError> {
        let shown = redact_url(url);
        if !PgLocation::is_postgres_url(url) {
            return Err(PgError::fatal(format!(
                "--storage {shown}: expected postgres://USER@HOST:PORT/DATABASE"
            )));
        }
        check_schema_name(schema)?;
        let (url_for_client, passfile) = take_passfile(url);
        // The client's own message may quote the URL: say which part is wrong instead.
        let mut options = PgConnectOptions::from_str(&url_for_client).map_err(|_| {
            PgError::fatal(format!(
                "--storage {shown}: not a valid PostgreSQL URL (postgres://USER@HOST:PORT/DATABASE)"
            ))
        })?;
        // The tables are made with IF NOT EXISTS at every start: PostgreSQL's notices
        // that they exist are not worth a log line each.
        options = options
            .application_name("jobyard")
            .options([("client_min_messages", "warning")])
            .disable_statement_logging();
        let has_password = redact_url(&url_for_client) != url_for_client
            || std::env::var_os("PGPASSWORD").is_some();
        if let (false, Some(file)) = (has_password, passfile) {
            if let Some(password) = password_from_file(Path::new(&file), &options)? {
                options = options.password(&password);
            }
        }
        Ok(PgTarget {
            options,
            schema: schema.to_string(),
            shown,
        })
    }

    /// The URL without its password, for messages.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The schema the tables live in.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// What the client connects with.
    pub(crate) fn options(&self) -> &PgConnectOptions {
        &self.options
    }
}

/// Schema names are put into SQL as they are, so only plain lower-case identifiers pass.
fn check_schema_name(schema: &str) -> Result<(), PgError> {
    let mut chars = schema.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if first_ok && rest_ok && schema.len() <= MAX_SCHEMA_NAME {
        return Ok(());
    }
    Err(PgError::fatal(format!(
        "--storage-schema {schema:?}: use lower-case letters, digits and _ (at most \
         {MAX_SCHEMA_NAME}, not starting with a digit)"
    )))
}

/// The URL without its `passfile=` parameter (the client does not know it), and that
/// parameter's value.
fn take_passfile(url: &str) -> (String, Option<String>) {
    let Some((head, query)) = url.split_once('?') else {
        return (url.to_string(), None);
    };
    let mut passfile = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|param| match param.strip_prefix("passfile=") {
            Some(value) => {
                passfile = Some(value.to_string());
                false
            }
            None => true,
        })
        .collect();
    if kept.is_empty() {
        (head.to_string(), passfile)
    } else {
        (format!("{head}?{}", kept.join("&")), passfile)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_both_schemes_and_refuses_others() {
        assert!(PgTarget::parse("postgres://u@localhost:5432/db", "jobyard").is_ok());
        assert!(PgTarget::parse("postgresql://u@localhost/db", "jobyard").is_ok());
        let err = PgTarget::parse("mysql://u:pw@localhost/db", "jobyard").unwrap_err();
        assert!(!err.to_string().contains("pw@"), "{err}");
    }

    #[test]
    fn refuses_schema_names_that_are_not_plain_identifiers() {
        for bad in ["", "Jobs", "1jobs", "a-b", "a;drop", "x\"y"] {
            assert!(PgTarget::parse("postgres://u@h/db", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn never_shows_the_password() {
        let target = PgTarget::parse("postgres://u:topsecret@h:5/db", "jobyard").unwrap();
        assert!(!format!("{target:?} {}", target.shown()).contains("topsecret"));
        let err = PgTarget::parse("postgres://u:topsecret@h:notaport/db", "jobyard").unwrap_err();
        assert!(!err.to_string().contains("topsecret"), "{err}");
    }

    #[test]
    fn passfile_is_taken_out_of_the_url() {
        let (url, file) = take_passfile("postgres://u@h/db?sslmode=disable&passfile=/p");
        assert_eq!(url, "postgres://u@h/db?sslmode=disable");
        assert_eq!(file.as_deref(), Some("/p"));
    }
}
