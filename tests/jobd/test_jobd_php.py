"""The jobd drop-in driven the way PHP applications drive jobd: the wire behaviour of
ch1p/jobd-client 1.6 (tests/jobd/php/jobd_client.php) against `jobyard jobd` and
`jobyard jobd-master` processes on a real MariaDB table."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def php(port: int, calls: list, password: str = "") -> list:
    out = subprocess.run(
        ["php", str(HERE / "php" / "jobd_client.php"), str(port), password, json.dumps(calls)],
        capture_output=True, text=True, timeout=120, check=True,
    )
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_worker_client_calls(jobd, jobs_db, tmp_path):
    w = jobd(targets="t1 = 1\n1/low = 2", extra="password = secret")
    manual = jobs_db.insert("1/low", "manual")
    bg = jobs_db.insert("t1", "waiting")
    (tmp_path / f"job-{manual}.sh").write_text('echo "hello $1"; exit 4\n')
    r = php(w.port, [
        ["status"],
        ["poll", ["t1", "1/low"]],
        ["poll", []],
        ["runManual", [manual, 999999]],
        ["sendSignal", {"5": 15}],
        ["addTarget", "t9", 3],
        ["setTargetConcurrency", "t9", 1],
        ["removeTarget", "t9"],
        ["pause", []],
        ["continue", ["t1"]],
        ["poll", ["nope"]],
        ["ping"],
    ], password="secret")
    assert set(r[0]["data"]["targets"]) == {"t1", "1/low"}
    assert r[1] == {"data": "ok"} and r[2] == {"data": "ok"}
    assert r[3]["data"]["jobs"][str(manual)] == {
        "result": "fail", "code": 4, "signal": None, "stdout": f"hello {manual}\n", "stderr": ""}
    assert r[3]["data"]["errors"] == {"999999": "job 999999 not found"}
    assert r[4] == {"data": {"5": False}}
    assert [x["data"] for x in r[5:10]] == ["ok"] * 5
    assert r[10] == {"exception": "invalid target 'nope'"}
    assert r[11] == {"data": "pong"}
    assert jobs_db.wait_status(bg, "done")["result"] == "ok"


def test_wrong_password_is_an_exception(jobd):
    w = jobd(extra="password = secret")
    assert php(w.port, [["status"]], password="nope") == [{"exception": "invalid password"}]
    assert php(w.port, [["status"]]) == [{"exception": "invalid password"}]


def test_master_client_calls(jobd, jobd_master, jobs_db):
    m = jobd_master()
    jobd(targets="any = 2", name="w1", master_port=m.port)
    jobd(targets="any = 2", name="w2", master_port=m.port)
    deadline = time.time() + 30
    while len(php(m.port, [["masterStatus", False]])[0]["data"]["workers"]) < 2:
        assert time.time() < deadline
        time.sleep(0.05)
    ids = [jobs_db.insert("any") for _ in range(6)]
    manual = jobs_db.insert("any", "manual")
    r = php(m.port, [
        ["poke", ["any"]],
        ["masterStatus", True],
        ["masterRunManual", [{"id": manual, "target": "any"}, {"id": 5, "target": "zzz"}]],
        ["masterSendSignal", 123456, 15, "any"],
        ["pause", ["any"]],
        ["continue", []],
    ])
    assert r[0] == {"data": "ok"}
    workers = r[1]["data"]["workers"]
    assert sorted(w["name"] for w in workers) == ["w1", "w2"]
    assert all(w["workerStatus"]["targets"]["any"]["concurrency"] == 2 for w in workers)
    assert r[2]["data"]["jobs"][str(manual)]["result"] == "ok"
    assert r[2]["data"]["errors"] == {"5": "worker serving target 'zzz' not found"}
    assert r[3] == {"data": {"123456": False}}
    # jobd-master never answered these; PHP's MasterClient hung forever.
    assert r[4] == {"data": "ok"} and r[5] == {"data": "ok"}
    for i in ids:
        jobs_db.wait_status(i, "done")


def test_no_unsolicited_messages_on_client_connections(jobd_master):
    """The PHP reader breaks on anything but one reply per request: a client connection
    idle across the master's ping interval must receive nothing."""
    m = jobd_master(extra="ping_interval = 1")
    s = socket.create_connection(("127.0.0.1", m.port))
    s.settimeout(2.5)
    try:
        data = s.recv(100)
    except socket.timeout:
        data = b"(nothing)"
    assert data == b"(nothing)"
    s.close()
