//! Showing a PostgreSQL URL without its password, for logs, errors and `/metrics`.

/// `url` with any password replaced by `***`: the one in the user part
/// (`postgres://user:secret@host/db`) and a `password=` parameter. Everything else is
/// kept, so an operator still sees which server, database and user were meant.
pub fn redact_url(url: &str) -> String {
    let (before_query, query) = match url.split_once('?') {
        Some((head, query)) => (head, Some(query)),
        None => (url, None),
    };
    let mut shown = redact_user_password(before_query);
    if let Some(query) = query {
        shown.push('?');
        let params: Vec<String> = query.split('&').map(redact_param).collect();
        shown.push_str(&params.join("&"));
    }
    shown
}

/// The part before `?` with the password of `user:password@` hidden.
fn redact_user_password(head: &str) -> String {
    let Some(scheme_end) = head.find("://") else {
        return head.to_string();
    };
    let rest = &head[scheme_end + 3..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    // The host never holds an '@', the password may: the last one ends the user part.
    let Some(at) = authority.rfind('@') else {
        return head.to_string();
    };
    let Some(colon) = authority[..at].find(':') else {
        return head.to_string();
    };
    format!(
        "{}{}:***{}",
        &head[..scheme_end + 3],
        &authority[..colon],
        &rest[at..]
    )
}

/// One `key=value` parameter, its value hidden when it is a password.
fn redact_param(param: &str) -> String {
    match param.split_once('=') {
        Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
        _ => param.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn hides_the_password_in_the_user_part() {
        assert_eq!(
            redact_url("postgres://app:s3cr@t@db.example:5432/jobs?sslmode=require"),
            "postgres://app:***@db.example:5432/jobs?sslmode=require"
        );
    }

    #[test]
    fn hides_a_password_parameter() {
        assert_eq!(
            redact_url("postgresql://app@db/jobs?password=hunter2&sslmode=disable"),
            "postgresql://app@db/jobs?password=***&sslmode=disable"
        );
    }

    #[test]
    fn keeps_a_url_without_password() {
        let url = "postgres://app@127.0.0.1:5432/jobs";
        assert_eq!(redact_url(url), url);
    }
}
