"""The jobd pane of the dashboard: `jobyard serve --jobd-config F` with a real MariaDB (the
fixtures of conftest.py), its targets and running launcher processes as the admin API lists
them (`/admin/api/workers`, `/admin/api/processes`) and as the dashboard shows them in a
headless chromium (a screenshot under tests/screenshots/)."""

from __future__ import annotations

import requests

from browserlib import cell_text, shot, start_browser, wait_until
from jobdlib import poll, serve_with_jobd, wait
from jobyard_testlib import free_port


def test_jobd_targets_and_launcher_processes_are_listed_and_shown(
        start_server, jobs_db, tmp_path, jobyard_bin):
    http_port = free_port()
    _, jobd_port, _ = serve_with_jobd(start_server, jobs_db, tmp_path, "t1 = 2\nt2 = 1",
                                      name="dash",
                                      extra_args=("--http-listen", f"127.0.0.1:{http_port}"))
    run = tmp_path / "run.sh"
    base = f"http://127.0.0.1:{http_port}"

    def api(path):
        return requests.get(base + "/admin/api" + path, timeout=30).json()

    rows = [jobs_db.insert("t1") for _ in range(3)]
    poll(jobyard_bin, jobd_port, "t1")
    wait(lambda: len(list(tmp_path.glob("pid-*"))) == 2, "two launchers running")
    wait(lambda: api("/processes?protocol=jobd")["total"] == 2, "two processes listed")

    procs = api("/processes?protocol=jobd")["processes"]
    pids = {int((tmp_path / f"pid-{r}").read_text()) for r in rows
            if (tmp_path / f"pid-{r}").exists()}
    assert {p["pid"] for p in procs} == pids
    for p in procs:
        assert p["queue"] == "t1" and p["label"].startswith("row ")
        row = int(p["label"].split()[1])
        assert p["command"] == ["/bin/sh", str(run), str(row)]
        assert p["running_s"] >= 0
    # Paged: one a page, the cursor leads to the other.
    first = api("/processes?protocol=jobd&limit=1")
    second = api(f"/processes?protocol=jobd&limit=1&after={first['next']}")
    assert {first["processes"][0]["pid"], second["processes"][0]["pid"]} == pids

    workers = api("/workers?protocol=jobd")["workers"]
    assert len(workers) == 1 and workers[0]["id"].startswith("dash ("), workers
    daemon = workers[0]
    targets = {q["name"]: q for q in daemon["queues"]}
    assert targets["t1"]["lease_limit"] == 2 and targets["t1"]["reserved"] == 2
    assert targets["t2"]["lease_limit"] == 1 and targets["t2"]["reserved"] == 0
    assert daemon["in_flight"] == 2

    browser = start_browser()
    try:
        browser.get(base + "/#/jobd")
        wait_until(browser, lambda d: len(d.find_elements("css selector", "#processes tr[data-pid]")) == 2,
                   "two launcher processes")
        assert cell_text(browser, '#targets tr[data-target="t1"] td[data-k="concurrency"]') == "2"
        assert cell_text(browser, '#targets tr[data-target="t1"] td[data-k="running"]') == "2"
        text = browser.find_element("id", "processes").text
        for pid in pids:
            assert str(pid) in text
        assert str(run) in text
        shot(browser, "jobd")
        (tmp_path / "go").touch()
        for r in rows:
            jobs_db.wait_status(r, "done")
        # The live view follows: no launcher left.
        wait_until(browser, lambda d: "no launcher running" in d.find_element("id", "processes").text,
                   "the processes gone")
    finally:
        browser.quit()
    assert api("/processes?protocol=jobd")["total"] == 0
    assert api("/workers?protocol=jobd")["workers"][0]["in_flight"] == 0
