//! `--log-format json`: one JSON object per event, with its fields (protocol, connection,
//! ...) as keys, for log shippers.

mod common;

use common::Server;

#[test]
fn json_logs_are_one_object_per_line_with_their_fields() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::serve(&dir.path().join("data"), &["--log-format", "json"]);
    let mut c = s.client();
    c.check("use emails", "USING emails");
    let log = s.log();
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 2, "{log}");
    for line in &lines {
        assert!(
            line.starts_with('{') && line.ends_with('}'),
            "not a JSON object: {line}"
        );
        assert!(line.contains("\"level\":"), "{line}");
    }
    let listening = lines
        .iter()
        .find(|l| l.contains("\"message\":\"listening\""))
        .expect("a listening event");
    assert!(
        listening.contains("\"protocol\":\"beanstalk\""),
        "{listening}"
    );
    assert!(
        listening.contains(&format!("127.0.0.1:{}", s.port)),
        "{listening}"
    );
}
