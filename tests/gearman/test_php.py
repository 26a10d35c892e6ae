"""PHP php-gearman (Debian) client and worker against jobyard."""

import subprocess
from pathlib import Path

import pytest

from conftest import need

PHP = Path(__file__).resolve().parent / "php"


def have_php_gearman():
    need("php")
    mods = subprocess.run(["php", "-m"], capture_output=True, text=True).stdout
    if "gearman" not in mods.split():
        pytest.skip("php-gearman not installed (scripts/setup.sh installs it)")


def test_php_client_and_worker(jobyard):
    have_php_gearman()
    worker = subprocess.Popen(["php", str(PHP / "worker.php"), str(jobyard.gport), "4"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out = subprocess.run(["php", str(PHP / "client.php"), str(jobyard.gport)],
                             capture_output=True, text=True, timeout=120)
        lines = dict(l.split("=", 1) for l in out.stdout.splitlines() if "=" in l)
        # libgearman's doNormal returns WORK_DATA chunks followed by the result.
        assert lines["normal"] == "chunknamraeg rc=0", out
        assert lines["high"] == "chunkhgih" and lines["low"] == "chunkwol", out
        assert lines["coalesced"] == "yes", out
        # [known, running, numerator, denominator]
        assert lines["status"] == "[true,false,0,0]", out
        assert lines["fail_rc"] == "WORK_FAIL", out
        assert worker.wait(timeout=60) == 0, worker.stderr.read()
    finally:
        worker.kill()
    assert jobyard.status()["php_bg"] == (1, 0, 0)
