"""The log stays proportional to the live jobs: compaction, and restarts that do not grow it.

The server runs with tiny segments and a tiny compaction threshold so that a few megabytes
of put/delete churn must be compacted many times. Sizes are the sum of the seg-*.log and
snap-*.snap files in the data directory. Nothing here depends on speed: each churn phase
writes a fixed amount, then the test waits (generously) for the compactor to catch up.
"""

from __future__ import annotations

import time
from typing import Dict

import greenstalk
import pytest

from jobyard_testlib import Raw, data_bytes, data_files, total_jobs

SMALL = ["--segment-bytes", "65536", "--compact-min-bytes", "65536"]
STEADY_BOUND = 300_000  # bytes the data dir must come back under after each phase
PEAK_BOUND = 1_500_000  # bytes it must never exceed (one phase is ~300 KB of records)


def wait_for(pred, timeout=30.0, interval=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()


def make_live_set(address, n: int, tube: str = "keep", body_len: int = 100) -> Dict[int, dict]:
    """n jobs in a mix of ready (pri varies), delayed and buried; returns what was acked."""
    expected = {}
    with greenstalk.Client(address, encoding=None, use=tube, watch=tube) as c:
        c._sock.settimeout(120)
        for i in range(n):
            body = (b"live-%06d-" % i).ljust(body_len, b"k")
            kind = i % 10
            if kind < 5:
                jid = c.put(body, priority=i, ttr=600)
                expected[jid] = {"body": body, "state": "ready", "pri": i, "tube": tube}
            elif kind < 8:
                jid = c.put(body, priority=i, delay=3600, ttr=600)
                expected[jid] = {"body": body, "state": "delayed", "pri": i, "tube": tube}
            else:
                jid = c.put(body, priority=i, ttr=600)
                c.bury(c.reserve_job(jid), priority=i + 1)
                expected[jid] = {"body": body, "state": "buried", "pri": i + 1, "tube": tube}
    return expected


def check_exactly(address, expected: Dict[int, dict], max_id: int) -> None:
    """The server holds exactly the expected jobs, with their bodies, states and priorities."""
    with Raw(address, timeout=120) as raw:
        found = raw.jobs(range(1, max_id + 1))
        stats = raw.stats()
    assert total_jobs(stats) == len(expected), (total_jobs(stats), len(expected))
    missing = sorted(set(expected) - set(found))
    extra = sorted(set(found) - set(expected))
    assert not missing and not extra, f"missing {missing[:10]} extra {extra[:10]}"
    wrong = [
        (jid, found[jid], exp)
        for jid, exp in expected.items()
        if {k: found[jid][k] for k in exp} != exp
    ]
    assert not wrong, f"{len(wrong)} jobs changed, e.g. {wrong[:3]}"


def churn(raw: Raw, pairs: int, body_len: int, tag: bytes, batch: int = 200) -> int:
    """Puts and deletes `pairs` jobs (pipelined); returns the highest id it was given."""
    max_id = 0
    for start in range(0, pairs, batch):
        n = min(batch, pairs - start)
        bodies = [(b"%s-%d-" % (tag, start + i)).ljust(body_len, b"c") for i in range(n)]
        raw.sock.sendall(b"".join(b"put 10 0 60 %d\r\n%b\r\n" % (len(b), b) for b in bodies))
        ids = []
        for _ in range(n):
            reply = raw.line()
            assert reply.startswith(b"INSERTED "), reply
            ids.append(int(reply.split()[1]))
        raw.sock.sendall(b"".join(b"delete %d\r\n" % i for i in ids))
        for _ in range(n):
            reply = raw.line()
            assert reply == b"DELETED", reply
        max_id = max(max_id, *ids)
    return max_id


def test_churn_is_compacted_and_restart_recovers_exactly_the_live_jobs(start_server):
    server = start_server(fsync="always", extra_args=SMALL)
    live = make_live_set(server.address, 100, body_len=200)
    max_id = max(live)

    phases, pairs, body_len = 10, 1000, 250
    written = 0
    peak = 0
    with Raw(server.address, timeout=120) as raw:
        for phase in range(phases):
            max_id = max(max_id, churn(raw, pairs, body_len, b"churn%d" % phase))
            written += pairs * body_len
            size = data_bytes(server.data_dir)
            peak = max(peak, size)
            assert size < PEAK_BOUND, f"phase {phase}: data dir at {size} bytes"
            settled = wait_for(lambda: data_bytes(server.data_dir) < STEADY_BOUND)
            assert settled, (
                f"phase {phase}: data dir still {data_bytes(server.data_dir)} bytes after 30 s "
                f"(files: {[(p.name, p.stat().st_size) for p in data_files(server.data_dir)]})"
            )
    # the churn wrote far more than the bound: without compaction the test would fail
    assert written > 5 * STEADY_BOUND
    assert any(p.name.startswith("snap-") for p in data_files(server.data_dir)), \
        "no snapshot was ever written"

    check_exactly(server.address, live, max_id)
    # the highest ids belong to deleted jobs whose records compaction dropped: ids must
    # still not be reused after a restart
    for crash in (False, True):
        server.restart(crash=crash)
        check_exactly(server.address, live, max_id)
        with Raw(server.address) as raw:
            new_id = raw.put(b"after restart")
            assert new_id > max_id, f"id {new_id} reused after restart (max before {max_id})"
            assert raw.cmd(f"delete {new_id}") == b"DELETED"
            max_id = new_id
    assert data_bytes(server.data_dir) < STEADY_BOUND


@pytest.mark.parametrize("extra_args", [SMALL, []], ids=["small-segments", "defaults"])
def test_restarts_do_not_grow_the_log(start_server, extra_args):
    server = start_server(fsync="always", extra_args=extra_args)
    live = make_live_set(server.address, 2000)
    max_id = max(live)
    # let any compaction the server wants to do happen before measuring
    time.sleep(1.5)
    first = data_bytes(server.data_dir)
    assert first > 2000 * 100, "the jobs' bodies must be on disk"
    sizes = [first]
    for i, crash in enumerate((False, True, False)):
        server.restart(crash=crash)
        check_exactly(server.address, live, max_id)
        time.sleep(1.2)  # give a compaction check the chance to run (or misbehave)
        size = data_bytes(server.data_dir)
        sizes.append(size)
        assert size <= 2 * first, f"restart {i + 1}: log grew from {first} to {size} bytes"
    print("data dir sizes across restarts:", sizes)
