"""`--storage postgres://` when things are wrong: the password never shows in logs, errors
or /metrics (and may come from a password file); a PostgreSQL that is down at start is
waited for, and SIGTERM stops that wait; a wrong password, a missing database, a newer
schema and a log with a row missing are refused in one line. (A second node on the same
storage is a standby: test_pg_failover.py.)"""

from __future__ import annotations

import signal
import threading
import time
import urllib.request

import greenstalk
import pytest

from jobyard_testlib import ServerError, free_port
from pg_testlib import Standby


def start_failing(start_pg_server, **kwargs) -> str:
    """Starts a server that must not come up; returns its log."""
    with pytest.raises(ServerError) as failed:
        start_pg_server(**kwargs)
    return str(failed.value)


def test_password_never_shown_in_logs_errors_or_metrics(start_pg_server, postgres, pg_url):
    url = pg_url.replace("postgres@", f"postgres:{postgres.password}@")
    http = free_port()
    srv = start_pg_server(url=url, extra_args=("--http-listen", f"127.0.0.1:{http}"))
    with greenstalk.Client(srv.address) as client:
        client.put("x")
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=10).read()
    assert postgres.password.encode() not in metrics
    srv.stop()
    log = srv.log_path.read_text()
    assert "postgres:***@" in log, log
    assert postgres.password not in log
    wrong = url.replace(postgres.password, "not-the-" + postgres.password)
    err = start_failing(start_pg_server, url=wrong)
    assert "password" in err and postgres.password not in err, err


def test_wrong_password_and_missing_database_are_one_line(
    start_pg_server, postgres, pg_url, monkeypatch
):
    monkeypatch.setenv("PGPASSWORD", "wrong")
    err = start_failing(start_pg_server)
    assert "refused the password" in err, err
    monkeypatch.setenv("PGPASSWORD", postgres.password)
    err = start_failing(start_pg_server, url=postgres.url("no_such_db"))
    assert "no_such_db" in err and "does not exist" in err, err
    err = start_failing(start_pg_server, url="postgres://u@127.0.0.1:notaport/db")
    assert "not a valid PostgreSQL URL" in err, err


def test_newer_schema_is_refused(start_pg_server, postgres, pg_url):
    srv = start_pg_server()
    srv.stop()
    db = pg_url.rsplit("/", 1)[1]
    postgres.sql("UPDATE jobyard.meta SET value = '99' WHERE key = 'schema_version'", db=db)
    err = start_failing(start_pg_server)
    assert "newer jobyard" in err, err


def test_postgres_down_at_start_is_waited_for(start_pg_server, postgres, pg_url):
    postgres.stop()
    timer = threading.Timer(3.0, postgres.start)
    timer.start()
    try:
        started = time.monotonic()
        srv = start_pg_server()
        assert time.monotonic() - started >= 2.5
    finally:
        timer.join()
    with greenstalk.Client(srv.address) as client:
        client.put("after the wait")
    log = srv.log_path.read_text()
    assert "cannot reach PostgreSQL" in log and "trying again" in log, log


def test_sigterm_stops_the_wait_for_postgres(pg_node, postgres):
    postgres.stop()
    waiting = Standby(pg_node())
    deadline = time.monotonic() + 30
    while "trying again" not in waiting.server.log_tail():
        assert time.monotonic() < deadline, waiting.server.log_tail()
        time.sleep(0.1)
    waiting.server.proc.send_signal(signal.SIGTERM)
    assert waiting.server.proc.wait(10) == 0


def test_a_password_file_named_in_the_url_is_used(
    start_pg_server, postgres, pg_url, monkeypatch, tmp_path
):
    monkeypatch.delenv("PGPASSWORD")
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"# jobyard's\n127.0.0.1:{postgres.port}:*:postgres:{postgres.password}\n")
    passfile.chmod(0o600)
    srv = start_pg_server(url=f"{pg_url}?sslmode=disable&passfile={passfile}")
    with greenstalk.Client(srv.address) as client:
        client.put("with a password file")
    assert postgres.password not in srv.log_path.read_text()


def test_a_missing_log_row_is_refused_not_skipped(start_pg_server, postgres, pg_url):
    srv = start_pg_server()
    with greenstalk.Client(srv.address) as client:
        for i in range(5):
            client.put(f"job {i}")  # one batch each: every put waits for its reply
    srv.kill9()
    db = pg_url.rsplit("/", 1)[1]
    postgres.sql(
        "DELETE FROM jobyard.log WHERE pos = (SELECT pos FROM jobyard.log ORDER BY pos "
        "OFFSET 2 LIMIT 1)",
        db=db,
    )
    err = start_failing(start_pg_server)
    assert "rows are missing" in err, err
