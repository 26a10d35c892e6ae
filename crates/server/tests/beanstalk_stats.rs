//! `stats`, `stats-tube`, `stats-job`, the command counters and the life of tubes, against
//! the real binary.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{eventually, parse_dict, serve, wait_stat, Client, REPLY_TIMEOUT};

const STATS_KEYS: [&str; 51] = [
    "current-jobs-urgent",
    "current-jobs-ready",
    "current-jobs-reserved",
    "current-jobs-delayed",
    "current-jobs-buried",
    "cmd-put",
    "cmd-peek",
    "cmd-peek-ready",
    "cmd-peek-delayed",
    "cmd-peek-buried",
    "cmd-reserve",
    "cmd-reserve-with-timeout",
    "cmd-delete",
    "cmd-release",
    "cmd-use",
    "cmd-watch",
    "cmd-ignore",
    "cmd-bury",
    "cmd-kick",
    "cmd-touch",
    "cmd-stats",
    "cmd-stats-job",
    "cmd-stats-tube",
    "cmd-list-tubes",
    "cmd-list-tube-used",
    "cmd-list-tubes-watched",
    "cmd-pause-tube",
    "job-timeouts",
    "total-jobs",
    "max-job-size",
    "current-tubes",
    "current-connections",
    "current-producers",
    "current-workers",
    "current-waiting",
    "total-connections",
    "pid",
    "version",
    "rusage-utime",
    "rusage-stime",
    "uptime",
    "binlog-oldest-index",
    "binlog-current-index",
    "binlog-records-migrated",
    "binlog-records-written",
    "binlog-max-size",
    "draining",
    "id",
    "hostname",
    "os",
    "platform",
];

const TUBE_KEYS: [&str; 14] = [
    "name",
    "current-jobs-urgent",
    "current-jobs-ready",
    "current-jobs-reserved",
    "current-jobs-delayed",
    "current-jobs-buried",
    "total-jobs",
    "current-using",
    "current-watching",
    "current-waiting",
    "cmd-delete",
    "cmd-pause-tube",
    "pause",
    "pause-time-left",
];

const JOB_KEYS: [&str; 14] = [
    "id",
    "tube",
    "state",
    "pri",
    "age",
    "delay",
    "ttr",
    "time-left",
    "file",
    "reserves",
    "timeouts",
    "releases",
    "buries",
    "kicks",
];

fn keys(pairs: &[(String, String)]) -> Vec<&str> {
    pairs.iter().map(|(k, _)| k.as_str()).collect()
}

fn is_number(v: &str) -> bool {
    !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit())
}

#[test]
fn stats_has_the_51_keys_in_beanstalkd_order_with_well_formed_values() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let yaml = c.raw_yaml("stats");
    let mut pairs = parse_dict(&yaml);
    // beanstalkd's 51 keys in its order, then jobyard's own version as a key of its own.
    let own = pairs.pop().expect("keys");
    assert_eq!(own.0, "jobyard-version");
    assert_eq!(own.1, format!("\"{}\"", env!("CARGO_PKG_VERSION")));
    assert_eq!(keys(&pairs), STATS_KEYS);
    let st: BTreeMap<_, _> = pairs.into_iter().collect();
    let text = [
        "version",
        "rusage-utime",
        "rusage-stime",
        "draining",
        "id",
        "hostname",
        "os",
        "platform",
    ];
    for key in STATS_KEYS.iter().filter(|k| !text.contains(k)) {
        assert!(
            is_number(&st[*key]),
            "{key}: {:?} is not a number",
            st[*key]
        );
    }
    // The protocol version that tools compare, as `jobyard beanstalkd -v` prints it.
    assert_eq!(st["version"], "\"1.12\"");
    assert_eq!(st["pid"], s.pid().to_string());
    assert_eq!(st["draining"], "false");
    assert_eq!(st["max-job-size"], "65535");
    assert_eq!(st["binlog-records-migrated"], "0");
    assert_eq!(st["current-tubes"], "1");
    for key in ["rusage-utime", "rusage-stime"] {
        let (secs, micros) = st[key].split_once('.').expect("S.UUUUUU");
        assert!(
            is_number(secs) && is_number(micros) && micros.len() == 6,
            "{key}"
        );
    }
    assert_eq!(st["id"].len(), 16);
    assert!(
        st["id"].bytes().all(|b| b.is_ascii_hexdigit()),
        "id {}",
        st["id"]
    );
    // The id is fixed for the life of the process.
    assert_eq!(c.stat("id"), st["id"]);
}

#[test]
fn stats_tube_has_14_keys_in_order_and_counts_its_jobs() {
    let (s, _dir) = serve();
    let mut c = s.client();
    c.check("use t", "USING t");
    c.check("watch t", "WATCHING 2");
    c.check("ignore default", "WATCHING 1");
    let reserved = c.put(1, 0, 60, b"a");
    assert_eq!(c.reserve().0, reserved);
    let buried = c.put(2, 0, 60, b"b");
    assert_eq!(c.reserve().0, buried);
    c.check(&format!("bury {buried} 2"), "BURIED");
    c.put(1023, 0, 60, b"urgent");
    c.put(1024, 0, 60, b"not urgent");
    c.put(0, 1000, 60, b"delayed");
    let deleted = c.put(0, 1000, 60, b"deleted");
    c.check(&format!("delete {deleted}"), "DELETED");
    c.check("delete 9999", "NOT_FOUND");
    let pairs = c.yaml_pairs("stats-tube t");
    assert_eq!(keys(&pairs), TUBE_KEYS);
    let st: BTreeMap<_, _> = pairs.into_iter().collect();
    let want = [
        ("name", "t"),
        ("current-jobs-urgent", "1"),
        ("current-jobs-ready", "2"),
        ("current-jobs-reserved", "1"),
        ("current-jobs-delayed", "1"),
        ("current-jobs-buried", "1"),
        ("total-jobs", "6"),
        ("current-using", "1"),
        ("current-watching", "1"),
        ("current-waiting", "0"),
        ("cmd-delete", "1"),
        ("cmd-pause-tube", "0"),
        ("pause", "0"),
        ("pause-time-left", "0"),
    ];
    for (k, v) in want {
        assert_eq!(st[k], v, "stats-tube {k}");
    }
    // The server-wide counts agree.
    let all = c.yaml("stats");
    for (k, v) in [
        ("current-jobs-urgent", "1"),
        ("current-jobs-ready", "2"),
        ("current-jobs-reserved", "1"),
        ("current-jobs-delayed", "1"),
        ("current-jobs-buried", "1"),
        ("total-jobs", "6"),
        ("current-tubes", "2"),
    ] {
        assert_eq!(all[k], v, "stats {k}");
    }
    // Using, watching and waiting from other connections.
    let mut d = s.client();
    d.check("use t", "USING t");
    let mut w = s.client();
    w.check("watch t", "WATCHING 2");
    w.check("ignore default", "WATCHING 1");
    // Take both ready jobs of t, then block on it.
    w.reserve_with("reserve-with-timeout 0");
    w.reserve_with("reserve-with-timeout 0");
    w.cmd("reserve");
    let mut last = BTreeMap::new();
    let seen = eventually(REPLY_TIMEOUT, || {
        last = c.yaml("stats-tube t");
        last["current-waiting"] == "1"
    });
    assert!(seen, "{last:?}");
    assert_eq!(last["current-using"], "2");
    assert_eq!(last["current-watching"], "2");
}

#[test]
fn stats_job_has_14_keys_in_order() {
    let (s, _dir) = serve();
    let mut c = s.client();
    c.check("use jt", "USING jt");
    c.check("watch jt", "WATCHING 2");
    let id = c.put(77, 0, 33, b"body");
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(c.reserve().0, id);
    let pairs = c.yaml_pairs(&format!("stats-job {id}"));
    assert_eq!(keys(&pairs), JOB_KEYS);
    let st: BTreeMap<_, _> = pairs.into_iter().collect();
    for key in JOB_KEYS.iter().filter(|k| !["tube", "state"].contains(k)) {
        assert!(is_number(&st[*key]), "{key}: {:?}", st[*key]);
    }
    assert_eq!(st["id"], id.to_string());
    assert_eq!(st["tube"], "jt");
    assert_eq!(st["state"], "reserved");
    assert_eq!(st["pri"], "77");
    assert!(st["age"].parse::<u64>().unwrap() >= 1, "age {}", st["age"]);
    assert_eq!(st["delay"], "0");
    assert_eq!(st["ttr"], "33");
    assert!(st["time-left"].parse::<u64>().unwrap() <= 33);
    assert_eq!(st["file"], "0");
    assert_eq!(st["reserves"], "1");
    for key in ["timeouts", "releases", "buries", "kicks"] {
        assert_eq!(st[key], "0", "{key}");
    }
    // time-left is 0 for ready and buried jobs.
    c.check(&format!("release {id} 77 0"), "RELEASED");
    assert_eq!(c.job_stat(id, "time-left"), "0");
    c.reserve();
    c.check(&format!("bury {id} 77"), "BURIED");
    assert_eq!(c.job_stat(id, "time-left"), "0");
}

/// Whether `stats-tube` finds the tube.
fn tube_exists(c: &mut Client, tube: &str) -> bool {
    c.cmd(&format!("stats-tube {tube}"));
    let head = c.read_line();
    if head == "NOT_FOUND" {
        return false;
    }
    let n: usize = head.strip_prefix("OK ").expect("OK <n>").parse().unwrap();
    c.read_body(n);
    true
}

/// The cmd-* counters of `stats`.
fn counters(c: &mut Client) -> BTreeMap<String, u64> {
    c.yaml("stats")
        .into_iter()
        .filter(|(k, _)| k.starts_with("cmd-"))
        .map(|(k, v)| (k, v.parse().unwrap()))
        .collect()
}

#[test]
fn command_counters_count_not_found_but_not_bad_format_nor_reserve_job_or_kick_job() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let before = counters(&mut c);
    let j1 = c.put(0, 0, 60, b"1");
    let j2 = c.put(0, 0, 60, b"2");
    let script: Vec<(String, &str)> = vec![
        (format!("peek {j1}"), "cmd-peek"),
        ("peek 999".into(), "cmd-peek"),
        ("peek-ready".into(), "cmd-peek-ready"),
        ("peek-delayed".into(), "cmd-peek-delayed"),
        ("peek-buried".into(), "cmd-peek-buried"),
        ("reserve".into(), "cmd-reserve"),
        ("reserve-with-timeout 0".into(), "cmd-reserve-with-timeout"),
        ("reserve-with-timeout 0".into(), "cmd-reserve-with-timeout"), // DEADLINE_SOON or TIMED_OUT
        ("delete 999".into(), "cmd-delete"),
        (format!("release {j1} 0 0"), "cmd-release"),
        ("release 999 0 0".into(), "cmd-release"),
        ("use x".into(), "cmd-use"),
        ("use default".into(), "cmd-use"),
        ("watch x".into(), "cmd-watch"),
        ("ignore x".into(), "cmd-ignore"),
        ("ignore default".into(), "cmd-ignore"), // NOT_IGNORED
        ("bury 999 0".into(), "cmd-bury"),
        ("kick 5".into(), "cmd-kick"),
        ("touch 999".into(), "cmd-touch"),
        (format!("stats-job {j2}"), "cmd-stats-job"),
        ("stats-job 999".into(), "cmd-stats-job"),
        ("stats-tube default".into(), "cmd-stats-tube"),
        ("stats-tube nope".into(), "cmd-stats-tube"),
        ("list-tubes".into(), "cmd-list-tubes"),
        ("list-tube-used".into(), "cmd-list-tube-used"),
        ("list-tubes-watched".into(), "cmd-list-tubes-watched"),
        ("pause-tube nope 1".into(), "cmd-pause-tube"),
        ("pause-tube default 0".into(), "cmd-pause-tube"),
    ];
    let mut want: BTreeMap<&str, u64> = BTreeMap::new();
    want.insert("cmd-put", 4); // two INSERTED, one EXPECTED_CRLF, one JOB_TOO_BIG
    want.insert("cmd-stats", 1);
    for (line, counter) in &script {
        c.cmd(line);
        *want.entry(counter).or_default() += 1;
        // Read whatever the reply is: a line, plus a body for data replies.
        let reply = c.read_line();
        let mut parts = reply.split(' ');
        match parts.next().unwrap() {
            "OK" => {
                let n: usize = parts.next().unwrap().parse().unwrap();
                c.read_body(n);
            }
            "FOUND" | "RESERVED" => {
                parts.next();
                let n: usize = parts.next().unwrap().parse().unwrap();
                c.read_body(n);
            }
            _ => {}
        }
    }
    c.send("put 0 0 60 1\r\nxYY");
    c.expect("EXPECTED_CRLF");
    c.send(format!("put 0 0 60 70000\r\n{}\r\n", "z".repeat(70000)));
    c.expect("JOB_TOO_BIG");
    // Rejected with BAD_FORMAT: not counted.
    for line in [
        "put 0 0 1 x",
        "peek x",
        "peek-ready ",
        "peek-delayed ",
        "peek-buried ",
        "reserve ",
        "reserve-with-timeout x",
        "delete x",
        "release 1",
        "use -x",
        "watch -x",
        "ignore -x",
        "bury 1",
        "kick x",
        "touch x",
        "stats ",
        "stats-job x",
        "stats-tube -x",
        "list-tubes ",
        "list-tube-used ",
        "list-tubes-watched ",
        "pause-tube x",
    ] {
        c.check(line, "BAD_FORMAT");
    }
    // Counted nowhere, whatever the outcome.
    // (j1 was released above; j2 is still reserved by this connection.)
    assert_eq!(c.reserve_with(&format!("reserve-job {j1}")).0, j1);
    c.check(&format!("reserve-job {j2}"), "NOT_FOUND");
    c.check(&format!("bury {j1} 0"), "BURIED");
    *want.entry("cmd-bury").or_default() += 1;
    c.check(&format!("kick-job {j1}"), "KICKED");
    c.check("reserve-job 999", "NOT_FOUND");
    c.check("kick-job 999", "NOT_FOUND");
    let after = counters(&mut c);
    assert_eq!(after.len(), 22, "22 cmd-* counters");
    for (key, a) in &after {
        let delta = a - before[key];
        let expected = want.get(key.as_str()).copied().unwrap_or(0);
        assert_eq!(delta, expected, "{key}");
    }
    // Back-to-back stats differ by exactly one: each counts itself.
    let x = c.stat_n("cmd-stats");
    let y = c.stat_n("cmd-stats");
    assert_eq!(y, x + 1);
}

#[test]
fn producers_workers_waiting_and_connections() {
    let (s, _dir) = serve();
    let mut admin = s.client();
    wait_stat(&mut admin, "current-connections", "1");
    let total0 = admin.stat_n("total-connections");
    assert_eq!(admin.stat("current-producers"), "0");
    assert_eq!(admin.stat("current-workers"), "0");

    let mut producer = s.client();
    producer.put(0, 0, 60, b"x");
    producer.put(0, 0, 60, b"y");
    let mut worker = s.client();
    worker.check("reserve-job 999", "NOT_FOUND"); // any reserve command makes a worker
    let mut poller = s.client();
    poller.reserve_with("reserve-with-timeout 0");
    let mut waiter = s.client();
    waiter.check("use elsewhere", "USING elsewhere");
    waiter.check("watch elsewhere", "WATCHING 2");
    waiter.check("ignore default", "WATCHING 1");
    waiter.cmd("reserve");
    wait_stat(&mut admin, "current-waiting", "1");
    let st = admin.yaml("stats");
    assert_eq!(st["current-connections"], "5");
    assert_eq!(st["current-producers"], "1");
    assert_eq!(st["current-workers"], "3");
    assert_eq!(st["total-connections"], (total0 + 4).to_string());
    assert_eq!(admin.tube_stat("elsewhere", "current-waiting"), "1");
    assert_eq!(admin.tube_stat("default", "current-waiting"), "0");

    drop(producer);
    drop(poller);
    drop(waiter);
    wait_stat(&mut admin, "current-connections", "2");
    let st = admin.yaml("stats");
    assert_eq!(st["current-producers"], "0");
    assert_eq!(st["current-workers"], "1");
    assert_eq!(st["current-waiting"], "0");
    assert_eq!(st["total-connections"], (total0 + 4).to_string());
    drop(worker);
    wait_stat(&mut admin, "current-workers", "0");
}

#[test]
fn tubes_are_deleted_as_soon_as_nothing_refers_to_them() {
    let (s, _dir) = serve();
    let mut c = s.client();
    assert_eq!(c.list("list-tubes"), ["default"]);
    // Watched, then ignored: gone at once.
    c.check("watch w", "WATCHING 2");
    assert_eq!(c.list("list-tubes"), ["default", "w"]);
    assert_eq!(c.stat("current-tubes"), "2");
    c.check("ignore w", "WATCHING 1");
    c.check("stats-tube w", "NOT_FOUND");
    assert_eq!(c.list("list-tubes"), ["default"]);
    assert_eq!(c.stat("current-tubes"), "1");
    // Used, then not: gone.
    c.check("use u", "USING u");
    c.check("use default", "USING default");
    c.check("stats-tube u", "NOT_FOUND");
    // A tube with a job stays until the job is deleted.
    c.check("use j", "USING j");
    let id = c.put(0, 0, 60, b"x");
    c.check("use default", "USING default");
    assert_eq!(c.list("list-tubes"), ["default", "j"]);
    c.check(&format!("delete {id}"), "DELETED");
    c.check("stats-tube j", "NOT_FOUND");
    // Delayed, buried and reserved jobs keep their tube too.
    c.check("use k", "USING k");
    let delayed = c.put(0, 1000, 60, b"d");
    let buried = c.put(0, 0, 60, b"b");
    let reserved = c.put(1, 0, 60, b"r");
    c.check("use default", "USING default");
    assert_eq!(c.reserve_with(&format!("reserve-job {buried}")).0, buried);
    c.check(&format!("bury {buried} 0"), "BURIED");
    assert_eq!(
        c.reserve_with(&format!("reserve-job {reserved}")).0,
        reserved
    );
    for id in [delayed, buried, reserved] {
        assert_eq!(c.tube_stat("k", "name"), "k");
        c.check(&format!("delete {id}"), "DELETED");
    }
    c.check("stats-tube k", "NOT_FOUND");
    // A tube another connection uses stays until that connection goes away.
    let mut d = s.client();
    d.check("use m", "USING m");
    c.check("watch m", "WATCHING 2");
    c.check("ignore m", "WATCHING 1");
    assert_eq!(c.tube_stat("m", "current-using"), "1");
    drop(d);
    let gone = eventually(REPLY_TIMEOUT, || !tube_exists(&mut c, "m"));
    assert!(gone, "tube m outlived its last user");
    // A paused tube goes too.
    c.check("watch p", "WATCHING 2");
    c.check("pause-tube p 1000", "PAUSED");
    c.check("ignore p", "WATCHING 1");
    c.check("stats-tube p", "NOT_FOUND");
    // `default` always exists, even when nobody uses or watches it.
    c.check("use x", "USING x");
    c.check("watch x", "WATCHING 2");
    c.check("ignore default", "WATCHING 1");
    wait_stat(&mut c, "current-connections", "1");
    assert_eq!(c.tube_stat("default", "current-using"), "0");
    assert_eq!(c.tube_stat("default", "current-watching"), "0");
    assert_eq!(c.list("list-tubes"), ["default", "x"]);
    assert_eq!(c.stat("current-tubes"), "2");
    // Tube counters only live as long as the tube.
    c.check("use j", "USING j");
    assert_eq!(c.tube_stat("j", "cmd-delete"), "0");
    assert_eq!(c.tube_stat("j", "total-jobs"), "0");
}

#[test]
fn list_tubes_moves_the_last_tube_into_a_removed_ones_slot() {
    let (s, _dir) = serve();
    let mut c = s.client();
    for (i, t) in ["a", "b", "c", "d"].iter().enumerate() {
        c.check(&format!("watch {t}"), &format!("WATCHING {}", i + 2));
    }
    assert_eq!(c.list("list-tubes"), ["default", "a", "b", "c", "d"]);
    c.check("ignore a", "WATCHING 4");
    assert_eq!(c.list("list-tubes"), ["default", "d", "b", "c"]);
    c.check("watch e", "WATCHING 5");
    assert_eq!(c.list("list-tubes"), ["default", "d", "b", "c", "e"]);
}

/// beanstalkd counts whole seconds with a nanosecond clock, so a 10 s lease asked about at
/// once has 9 left (pheanstalk's testTouch relies on it); so do a touch, a delayed job and
/// a paused tube.
#[test]
fn time_left_asked_at_once_counts_as_beanstalkd_does() {
    let (s, _dir) = serve();
    let mut c = s.client();
    c.send("put 1 0 10 1\r\nx\r\nreserve\r\nstats-job 1\r\n");
    c.expect("INSERTED 1");
    c.read_job("RESERVED");
    let st: BTreeMap<_, _> = parse_dict(&c.read_ok()).into_iter().collect();
    assert_eq!(st["time-left"], "9");
    c.send("touch 1\r\nstats-job 1\r\n");
    c.expect("TOUCHED");
    let st: BTreeMap<_, _> = parse_dict(&c.read_ok()).into_iter().collect();
    assert_eq!(st["time-left"], "9");
    c.send("put 1 5 10 1\r\ny\r\nstats-job 2\r\n");
    c.expect("INSERTED 2");
    let st: BTreeMap<_, _> = parse_dict(&c.read_ok()).into_iter().collect();
    assert_eq!(st["time-left"], "4");
    c.send("pause-tube default 10\r\nstats-tube default\r\n");
    c.expect("PAUSED");
    let st: BTreeMap<_, _> = parse_dict(&c.read_ok()).into_iter().collect();
    assert_eq!(st["pause-time-left"], "9");
}
