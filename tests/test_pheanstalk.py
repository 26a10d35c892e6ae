"""jobyard judged by PHP's Pheanstalk, as Debian ships it (php-pda-pheanstalk, Pheanstalk 4).

tests/php/pheanstalk_client.php does the talking and prints one JSON object of what the
library returned; these tests assert on it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import greenstalk
import pytest

SCRIPT = Path(__file__).resolve().parent / "php" / "pheanstalk_client.php"


def php(port: int, *args: str) -> dict:
    if shutil.which("php") is None:
        pytest.fail("php is not installed: run scripts/setup.sh", pytrace=False)
    proc = subprocess.run(
        ["php", str(SCRIPT), str(port), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"php exited {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines, f"no output; stderr: {proc.stderr}"
    out = json.loads(lines[-1])
    assert "fatal" not in out, out["fatal"]
    return out


def test_pheanstalk_basic_commands(server):
    out = php(server.address[1], "basic")
    a, b, c, d = out["ids"]
    assert len({a, b, c, d}) == 4 and a < b < c < d

    assert out["used"] == "php-tube"
    assert out["watched"] == ["php-tube"]
    assert out["put_c_state"] == "delayed"

    # pri 5 before pri 10; pri 1 is delayed
    assert out["first_reserved"] == [b, "job b"]
    assert out["first_state"] == "reserved"
    assert out["deleted_then_peek"] == "Pheanstalk\\Exception\\JobNotFoundException"

    assert out["second_reserved"] == [a, "job a"]
    assert out["released"] == {"state": "delayed", "pri": 20, "releases": 1}
    assert out["binary_ok"] is True
    assert out["empty_reserve"] is True
    assert out["after_delay"] == a

    assert out["buried"] == {"state": "buried", "pri": 7}
    assert out["peek_buried"] == a
    assert out["peek_delayed"] == c
    assert out["peek_ready_none"] is True
    assert out["kicked"] == 1
    assert out["kicked_state"] == "ready"
    assert out["kick_job_state"] == "ready"
    assert out["peek_ready"] == c  # pri 1 beats pri 7

    assert out["stats"] == {
        "current-jobs-ready": 2,
        "cmd-put": 4,
        "max-job-size": 65535,
        "has-version": True,
    }
    assert out["stats_tube"] == {"name": "php-tube", "current-jobs-ready": 2, "total-jobs": 4}
    assert "php-tube" in out["tubes"] and "default" in out["tubes"]

    assert out["delete_missing"] == "Pheanstalk\\Exception\\JobNotFoundException"
    assert out["too_big"] == "Pheanstalk\\Exception\\JobTooBigException"
    assert out["after_too_big"] > d
    # Pheanstalk 4 maps NOT_FOUND on stats commands to its generic ServerException
    assert out["stats_job_missing"] == "Pheanstalk\\Exception\\ServerException"
    assert out["drained"] == 3  # a, c and 'still in sync'
    assert out["final_ready"] == 0


def test_pheanstalk_jobs_survive_a_crash_and_reach_python(server):
    produced = php(server.address[1], "produce", "30")
    put = {jid: body for jid, body in produced["put"]}
    assert len(put) == 30
    deleted = set(produced["deleted"])
    buried = set(produced["buried"])
    assert len(deleted) == 6 and len(buried) == 8

    server.restart(crash=True)  # kill -9: everything acknowledged must be back

    with greenstalk.Client(server.address, watch="php-persist") as g:
        g._sock.settimeout(60)
        states = {}
        for jid in put:
            try:
                states[jid] = g.stats_job(jid)["state"]
            except greenstalk.NotFoundError:
                states[jid] = None
        for jid in put:
            if jid in deleted:
                assert states[jid] is None, jid
            elif jid in buried:
                assert states[jid] == "buried", jid
            else:
                assert states[jid] == "ready", jid
        last = max(jid for jid in put if jid not in deleted)
        assert g.peek(last).body == put[last]

    consumed = php(server.address[1], "consume")
    assert consumed["kicked"] == len(buried)
    got = {jid: body for jid, body in consumed["got"]}
    assert got == {jid: body for jid, body in put.items() if jid not in deleted}
