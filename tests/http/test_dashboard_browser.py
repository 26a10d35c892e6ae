"""The dashboard in a real headless browser (Debian's chromium, driven through
chromium-driver by selenium): the overview lists queues filled over beanstalkd (greenstalk)
and its counts follow new puts, a queue page pages through its jobs by state, and the
actions (kick, delete, pause, resume) work from the page, including on a job that has moved
on; the Workers pane lists a pyzmq 14/WMP worker with its roles, leases and manager. Each
test saves screenshots under tests/screenshots/ for a person to look at."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import greenstalk
import pytest
import requests

from http_testlib import http, start_http  # noqa: F401  (fixtures)

# http_testlib put tests/ on the path.
from browserlib import cell_text, shot, start_browser, wait_until  # noqa: E402


@pytest.fixture(scope="module")
def browser():
    """One headless chromium for the module's tests (starting it is the slow part)."""
    driver = start_browser()
    yield driver
    driver.quit()


def cell(driver, queue: str, key: str) -> str:
    """The text of one count in the overview's row of `queue` ('' while not shown)."""
    return driver.execute_script(
        "const c = document.querySelector(arguments[0]); return c ? c.textContent : '';",
        f'#queues tr[data-queue="{queue}"] td[data-k="{key}"]')


def job_rows(driver) -> list[int]:
    """The ids listed on a queue page, read in one step (the page may redraw meanwhile)."""
    return driver.execute_script(
        "return [...document.querySelectorAll('#jobs tr[data-job]')]"
        ".map((r) => Number(r.dataset.job));")


def toast(driver) -> str:
    return wait_until(driver, lambda d: d.find_element("id", "toast").is_displayed()
                      and d.find_element("id", "toast").text, "a message appears")


def beanstalk(srv, tube: str) -> greenstalk.Client:
    return greenstalk.Client(srv.beanstalk, use=tube, watch=tube)


def test_overview_lists_queues_and_follows_new_puts(browser, http):
    with beanstalk(http, "emails") as c:
        for i in range(3):
            c.put(f"mail {i}")
        with beanstalk(http, "thumbnails") as t:
            t.put("cat.jpg", delay=3600)
        browser.get(http.url("/"))
        wait_until(browser, lambda d: cell(d, "emails", "ready") == "3", "emails shows 3 ready")
        assert cell(browser, "thumbnails", "delayed") == "1"
        for i in range(3, 7):
            c.put(f"mail {i}")
        job = c.reserve(timeout=5)
        # No reload: the overview refreshes itself.
        wait_until(browser, lambda d: cell(d, "emails", "ready") == "6"
                   and cell(d, "emails", "reserved") == "1", "the live counts follow")
        assert browser.find_element("id", "total-jobs").text == "8"
        shot(browser, "overview")
        c.delete(job)


def test_a_queue_page_lists_jobs_by_state_a_page_at_a_time(browser, http):
    with beanstalk(http, "bulk") as c:
        ids = [c.put(f"item {i}") for i in range(120)]
        for _ in range(2):
            c.bury(c.reserve(timeout=5))
    browser.get(http.url("/#/queue/bulk/ready"))
    wait_until(browser, lambda d: len(job_rows(d)) == 50, "a first page of 50")
    seen = job_rows(browser)
    shot(browser, "queue-page")
    for expected in (50, 18):
        before = seen[-1]
        browser.find_element("id", "next-page").click()
        wait_until(browser, lambda d: job_rows(d) and job_rows(d)[0] != seen[0]
                   and before not in job_rows(d), "the next page")
        page = job_rows(browser)
        assert len(page) == expected
        seen += page
    assert browser.find_elements("id", "next-page") == []
    assert sorted(seen) == ids[2:], "every ready job once, none twice"
    # The buried tab shows the two buried jobs and its count.
    browser.find_element("partial link text", "buried (2)").click()
    wait_until(browser, lambda d: sorted(job_rows(d)) == ids[:2], "the buried jobs")


def test_actions_work_from_the_page(browser, http):
    with beanstalk(http, "work") as c:
        ids = [c.put(f"task {i}") for i in range(3)]
        c.bury(c.reserve(timeout=5))
    browser.get(http.url("/#/queue/work/buried"))
    wait_until(browser, lambda d: job_rows(d) == [ids[0]], "the buried job")
    browser.find_element("css selector", f'tr[data-job="{ids[0]}"] button').click()
    assert toast(browser).startswith("Done")
    assert http.get(f"/admin/api/jobs/{ids[0]}").json()["state"] == "ready"

    browser.get(http.url("/#/queue/work/ready"))
    wait_until(browser, lambda d: len(job_rows(d)) == 3, "three ready jobs")
    row = browser.find_element("css selector", f'tr[data-job="{ids[1]}"]')
    row.find_element("css selector", "button.danger").click()
    assert toast(browser).startswith("Done")
    assert http.get(f"/admin/api/jobs/{ids[1]}").status_code == 404
    wait_until(browser, lambda d: ids[1] not in job_rows(d), "the deleted job leaves the list")

    browser.find_element("id", "pause").click()
    wait_until(browser, lambda d: d.find_elements("id", "resume"), "a Resume button")
    assert "(paused)" in browser.find_element("tag name", "h1").text
    assert [q["paused"] for q in http.get("/admin/api/overview").json()["queues"]
            if q["name"] == "work"] == [True]
    shot(browser, "actions")
    browser.find_element("id", "resume").click()
    wait_until(browser, lambda d: d.find_elements("id", "pause"), "a Pause button again")

    # A job that moved on since the page was drawn: a clear message, not a crash.
    with beanstalk(http, "work") as c:
        c.delete(ids[2])
    browser.find_element("css selector", f'tr[data-job="{ids[2]}"] button.danger').click()
    assert "not found" in toast(browser)


def test_the_dashboard_behind_a_read_token_with_basic_auth(browser, start_http):
    token = "dashboard-token-0123456789"
    admin = "dashboard-admin-0123456789"
    srv = start_http(["--http-token", f"read:{token},admin:{admin}"], token=admin)
    srv.put_job("guarded", body="secret")
    assert requests.get(srv.url("/"), timeout=30).status_code == 401
    # The browser sends the token as the basic-auth password for the page and its fetches.
    browser.get(srv.url("/").replace("http://", f"http://operator:{token}@"))
    wait_until(browser, lambda d: cell(d, "guarded", "ready") == "1", "the guarded queue")
    browser.get(srv.url("/#/queue/guarded/ready").replace("http://", f"http://operator:{token}@"))
    wait_until(browser, lambda d: len(job_rows(d)) == 1, "its job")
    # A read-only token gets a view without the actions it would be refused.
    assert browser.find_element("id", "role").text == "read-only"
    assert not any(b.is_displayed() for b in browser.find_elements("tag name", "button"))
    shot(browser, "read-only")


def test_the_job_page_and_the_connections_page(browser, http):
    with beanstalk(http, "reports") as c:
        job = c.put("quarterly figures " + "x" * 300, priority=7)
        browser.get(http.url(f"/#/job/{job}"))
        wait_until(browser, lambda d: d.find_elements("css selector", "dl dd"), "the job's fields")
        fields = dict(zip(
            [e.text for e in browser.find_elements("css selector", "dl dt")],
            [e.text for e in browser.find_elements("css selector", "dl dd")]))
        assert fields["queue"] == "reports" and fields["state"] == "ready"
        assert fields["priority"] == "7"
        assert fields["body"].startswith("quarterly figures") and fields["body"].endswith("…")
        shot(browser, "job-page")
        # The beanstalkd connection is open while the page is drawn.
        browser.get(http.url("/#/connections"))
        wait_until(browser, lambda d: "beanstalk" in d.find_element("id", "protocols").text,
                   "the protocols table")
        rows = {r.find_elements("tag name", "td")[0].text: r.find_elements("tag name", "td")
                for r in browser.find_elements("css selector", "#protocols tr")[1:]}
        assert int(rows["beanstalk"][1].text) >= 1
        assert int(rows["beanstalk"][4].text) == 1  # jobs created over beanstalkd
        shot(browser, "connections")
    browser.get(http.url("/#/job/999999"))
    wait_until(browser, lambda d: "may have finished" in d.find_element("id", "view").text,
               "a clear message for a job that is gone")


def wmplib():
    """tests/wmp/wmplib.py (pyzmq frames written from docs/wmp.md), loaded by its path:
    putting tests/wmp on sys.path would make its conftest importable by that name."""
    path = Path(__file__).resolve().parents[1] / "wmp" / "wmplib.py"
    spec = importlib.util.spec_from_file_location("wmplib", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def worker_cell(driver, worker: str, key: str) -> str:
    return cell_text(driver, f'#workers tr[data-worker="{worker}"] td[data-k="{key}"]')


def test_the_workers_pane_shows_wmp_workers_with_roles_leases_and_manager(browser, start_http):
    zmq = pytest.importorskip("zmq")
    w = wmplib()
    endpoint = w.free_endpoint()
    srv = start_http(["--wmp-listen", endpoint, "--wmp-name", "dash-m1"])
    with beanstalk(srv, "thumbs") as c:
        jobs = [c.put(f"picture {i}") for i in range(2)]
    ctx = zmq.Context()
    try:
        thumbnailer = w.Dealer(ctx, endpoint, identity=b"thumbnailer-1")
        take = thumbnailer.take_one("thumbs", lock="L-1")
        assert take.command == "TAKE" and int(take.headers["job"]) in jobs, take
        # A second worker, with a generated (binary) identity and no roles: any queue.
        idle = w.Dealer(ctx, endpoint)
        idle.send("READY", w.headers(worker="spare-box"))
        browser.get(srv.url("/#/workers"))
        wait_until(browser, lambda d: worker_cell(d, "thumbnailer-1", "in-flight") == "1",
                   "the worker with its lease")
        row = browser.find_element("css selector", 'tr[data-worker="thumbnailer-1"]').text
        assert "thumbs" in row and "dash-m1" in row and "wmp" in row, row
        assert take.headers["job"] in row, "the leased job is listed"
        wait_until(browser, lambda d: "spare-box" in d.find_element("id", "workers").text,
                   "the worker without roles")
        spare = [r.text for r in browser.find_elements("css selector", "#workers tr")
                 if "spare-box" in r.text]
        assert "any" in spare[0] and "0x" in spare[0], spare
        shot(browser, "workers")
        # Its DONE ends the lease: the live view follows.
        thumbnailer.done(take, payload=b"thumb")
        wait_until(browser, lambda d: worker_cell(d, "thumbnailer-1", "in-flight") == "0",
                   "the lease gone after DONE")
        listed = srv.get("/admin/api/workers?protocol=wmp").json()
        assert listed["total"] == 2
        by_id = {x["id"]: x for x in listed["workers"]}
        assert by_id["thumbnailer-1"]["queues"][0]["name"] == "thumbs"
        assert by_id["thumbnailer-1"]["detail"]["manager"] == "dash-m1"
        thumbnailer.close()
        idle.close()
    finally:
        ctx.destroy(linger=0)
