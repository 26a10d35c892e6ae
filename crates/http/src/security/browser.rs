//! What a browser may be made to send: no action on another site's behalf (CSRF), and on
//! an open loopback listener no request under a name that is not local (DNS rebinding).

use axum::http::{header, HeaderMap, Method};

use super::loopback::is_local_host;
use super::Refusal;

/// Refuses what a browser sends on another site's behalf (CSRF): an action (any method
/// but GET and HEAD) whose `Origin` is not this server, or that the browser marks as not
/// same-origin (`Sec-Fetch-Site`). Programs send neither header and are not affected.
/// With `local_hosts_only`, also refuses a `Host` that is not a loopback name.
pub fn check_browser(
    headers: &HeaderMap,
    method: &Method,
    local_hosts_only: bool,
) -> Result<(), Refusal> {
    let host = headers.get(header::HOST).map(|h| h.as_bytes());
    if local_hosts_only && !host.is_none_or(is_local_host) {
        return Err(Refusal::HostNotLocal);
    }
    if method == Method::GET || method == Method::HEAD {
        return Ok(());
    }
    if let Some(site) = headers.get("sec-fetch-site") {
        if !matches!(site.as_bytes(), b"same-origin" | b"none") {
            return Err(Refusal::CrossSite);
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.as_bytes();
        let authority = origin
            .windows(3)
            .position(|w| w == b"://")
            .map(|i| &origin[i + 3..]);
        match (authority, host) {
            (Some(a), Some(h)) if a.eq_ignore_ascii_case(h) => {}
            _ => return Err(Refusal::CrossSite),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        h
    }

    #[test]
    fn actions_from_another_site_are_refused() {
        let post = Method::POST;
        let ours = [
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
        ];
        assert_eq!(check_browser(&headers(&ours), &post, true), Ok(()));
        let program = [("host", "jobs.internal:8080")];
        assert_eq!(check_browser(&headers(&program), &post, false), Ok(()));
        for bad in [
            vec![
                ("host", "127.0.0.1:8080"),
                ("origin", "http://evil.example"),
            ],
            vec![("host", "127.0.0.1:8080"), ("origin", "null")],
            vec![
                ("host", "127.0.0.1:8080"),
                ("origin", "http://127.0.0.1:9999"),
            ],
            vec![("host", "127.0.0.1:8080"), ("sec-fetch-site", "cross-site")],
            vec![("host", "127.0.0.1:8080"), ("sec-fetch-site", "same-site")],
        ] {
            assert_eq!(
                check_browser(&headers(&bad), &post, true),
                Err(Refusal::CrossSite),
                "{bad:?}"
            );
        }
        // Looking is not guarded: another site cannot read the answer anyway.
        let look = [("host", "127.0.0.1:8080"), ("sec-fetch-site", "cross-site")];
        assert_eq!(check_browser(&headers(&look), &Method::GET, true), Ok(()));
    }

    #[test]
    fn an_open_loopback_listener_answers_only_to_loopback_names() {
        for host in [
            "localhost",
            "LOCALHOST:8080",
            "127.0.0.1:8080",
            "127.3.4.5",
            "[::1]:8080",
            "[::1]",
        ] {
            assert_eq!(
                check_browser(&headers(&[("host", host)]), &Method::GET, true),
                Ok(()),
                "{host}"
            );
        }
        for host in [
            "evil.example:8080",
            "10.0.0.1:8080",
            "localhost.evil.example",
            "[::2]:80",
            "",
        ] {
            let refused = check_browser(&headers(&[("host", host)]), &Method::GET, true);
            assert_eq!(refused, Err(Refusal::HostNotLocal), "{host}");
            assert_eq!(
                check_browser(&headers(&[("host", host)]), &Method::GET, false),
                Ok(())
            );
        }
    }
}
