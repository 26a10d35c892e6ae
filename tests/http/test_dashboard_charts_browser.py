"""The dashboard's charts, job search and attempts in a real headless browser, under load:
beanstalkd producers and consumers (greenstalk) and an HTTP worker that fails some jobs run
while the page is open. The charts (the server's own history, sampled once a second) show
non-zero put/completed/failed rates, depth and latency percentiles over 5 minutes and an
hour, for all queues and for one (chosen on the overview, or on the queue's page); the
header's search finds a job; a job's page lists its attempts (released, lease expired,
failed with its error text). Screenshots go to a temporary
directory (printed); JOBYARD_DOCS_SCREENSHOT=1 also refreshes docs/dashboard.png."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import threading
import time
from pathlib import Path

import greenstalk
import pytest

from http_testlib import http, start_http  # noqa: F401  (fixtures)

# http_testlib put tests/ on the path.
from browserlib import start_browser, wait_until  # noqa: E402

DOCS_SHOT = Path(__file__).resolve().parents[2] / "docs" / "dashboard.png"


@pytest.fixture(scope="module")
def browser():
    driver = start_browser()
    driver.set_window_size(1280, 900)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def shots():
    where = Path(tempfile.mkdtemp(prefix="jobyard-dashboard-"))
    print(f"screenshots in {where}")
    return where


class Load:
    """Producers and consumers until stopped: beanstalkd on two tubes (a job in ten is
    buried), and an HTTP worker on a third queue that fails a job in four with an error."""

    def __init__(self, srv):
        self.srv = srv
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._guard, args=(f, *a), daemon=True)
                        for f, a in [(self._produce, ("emails",)), (self._produce, ("thumbnails",)),
                                     (self._consume, ("emails",)), (self._consume, ("thumbnails",)),
                                     (self._http_put, ("reports",)), (self._http_work, ("reports",))]]

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)
        assert not self.errors, self.errors

    def _guard(self, f, *args):
        try:
            f(*args)
        except BaseException as e:  # surfaced by __exit__
            self.errors.append(e)

    def _produce(self, tube):
        with greenstalk.Client(self.srv.beanstalk, use=tube) as c:
            while not self.stop.is_set():
                c.put(f"{tube} {random.random()}")
                time.sleep(0.006)

    def _consume(self, tube):
        with greenstalk.Client(self.srv.beanstalk, use=tube, watch=tube) as c:
            n = 0
            while not self.stop.is_set():
                try:
                    job = c.reserve(timeout=1)
                except greenstalk.TimedOutError:
                    continue
                time.sleep(random.uniform(0.001, 0.008))
                n += 1
                c.bury(job) if n % 10 == 0 else c.delete(job)

    def _http_put(self, queue):
        while not self.stop.is_set():
            self.srv.put_job(queue, body="quarterly figures")
            time.sleep(0.02)

    def _http_work(self, queue):
        worker = None
        n = 0
        while not self.stop.is_set():
            got = self.srv.lease(queue, wait_ms=500, **({"worker": worker} if worker else {}))
            worker = got["worker"]
            job = got["job"]
            if not job:
                continue
            time.sleep(random.uniform(0.005, 0.03))
            n += 1
            verb, extra = ("fail", {"error": "printer on fire"}) if n % 4 == 0 else ("complete", {})
            r = self.srv.post(f"/v1/jobs/{job['id']}/{verb}",
                              json={"worker": worker, "token": job["token"], **extra})
            assert r.status_code == 200, r.text


def series_max(driver, chart: str, series: str) -> float:
    """The largest value one line of a chart shows (0 while the chart is not drawn)."""
    return driver.execute_script(
        "const p = document.querySelector(`svg[data-chart='${arguments[0]}'] path[data-series='${arguments[1]}']`);"
        "return p ? Number(p.dataset.max) : 0;", chart, series)


def charts_show(driver, wanted: list[tuple[str, str]]) -> bool:
    return all(series_max(driver, c, s) > 0 for c, s in wanted)


def job_with_three_attempts(srv) -> int:
    """A job released, then left to run out its lease, then failed with an error."""
    job_id = srv.put_job("attempts-demo", body="render invoice 42")
    first = srv.lease("attempts-demo")
    r = srv.post(f"/v1/jobs/{job_id}/release",
                 json={"worker": first["worker"], "token": first["job"]["token"]})
    assert r.status_code == 200, r.text
    srv.lease("attempts-demo", lease_ms=300)
    deadline = time.time() + 10
    while srv.get(f"/v1/jobs/{job_id}").json()["state"] != "ready":
        assert time.time() < deadline, "the short lease never ran out"
        time.sleep(0.05)
    third = srv.lease("attempts-demo")
    r = srv.post(f"/v1/jobs/{job_id}/fail",
                 json={"worker": third["worker"], "token": third["job"]["token"],
                       "error": "disk full on /var/tmp"})
    assert r.status_code == 200, r.text
    return job_id


def find(driver, job_id: int) -> None:
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element("id", "find-job")
    box.clear()
    box.send_keys(str(job_id), Keys.ENTER)


def test_charts_search_and_attempts_under_load(browser, http, shots):
    with Load(http):
        browser.get(http.url("/"))
        wanted = [("rates", "put"), ("rates", "completed"), ("rates", "failed"),
                  ("depth", "buried"), ("latency", "p50_ms"), ("latency", "p99_ms")]
        wait_until(browser, lambda d: charts_show(d, wanted), "every chart shows load")
        # A little more history, so the charts have a shape (a minute for the docs' picture).
        docs = os.environ.get("JOBYARD_DOCS_SCREENSHOT") == "1"
        time.sleep(75 if docs else 12)
        browser.get(http.url("/"))
        wait_until(browser, lambda d: charts_show(d, wanted), "the charts after a reload")
        browser.save_screenshot(str(shots / "overview-5min.png"))
        if docs:
            shutil.copy(shots / "overview-5min.png", DOCS_SHOT)

        # The hour: one point per 10 s, so at least one has closed by now.
        browser.find_element("css selector", ".charts-bar a[data-window='3600']").click()
        wait_until(browser, lambda d: "on" in d.find_element(
            "css selector", ".charts-bar a[data-window='3600']").get_attribute("class")
            and charts_show(d, [("rates", "put"), ("rates", "completed")]), "the hour's charts")
        browser.save_screenshot(str(shots / "overview-1h.png"))

        # One queue on the overview: reports buries nothing, all queues together do.
        from selenium.webdriver.support.ui import Select
        Select(browser.find_element("id", "chart-queue")).select_by_value("reports")
        wait_until(browser, lambda d: series_max(d, "depth", "buried") == 0
                   and charts_show(d, [("rates", "failed")]), "the reports queue on the overview")
        time.sleep(2.5)  # a refresh of the overview keeps the choice
        assert series_max(browser, "depth", "buried") == 0
        assert Select(browser.find_element("id", "chart-queue")).first_selected_option.text == "reports"

        # Per queue: the queue page draws that queue's own charts.
        browser.get(http.url("/#/queue/reports/ready"))
        wait_until(browser, lambda d: charts_show(d, [("rates", "put"), ("rates", "failed")]),
                   "the reports queue's charts")
        assert "Queue reports" in browser.find_element("css selector", ".charts-bar").text
        browser.save_screenshot(str(shots / "queue-reports.png"))

        # A live job, found from the header of any page.
        live = http.put_job("waiting-room", body="not yet", delay=3600)
        find(browser, live)
        wait_until(browser, lambda d: d.current_url.endswith(f"#/job/{live}")
                   and "waiting-room" in d.find_element("css selector", "dl").text, "the found job")
        assert "never leased" in browser.find_element("id", "attempts").text

        # A job with a history: released, lease expired, failed with its error text.
        job_id = job_with_three_attempts(http)
        find(browser, job_id)
        wait_until(browser, lambda d: len(d.find_elements("css selector", "#attempts tr[data-attempt]")) == 3,
                   "the ended job's three attempts")
        ends = [r.get_attribute("data-ended")
                for r in browser.find_elements("css selector", "#attempts tr[data-attempt]")]
        assert ends == ["released", "lease expired", "failed"]
        failed = browser.find_element("css selector", "#attempts tr[data-ended='failed']").text
        assert "disk full on /var/tmp" in failed
        assert "It has ended" in browser.find_element("id", "view").text
        browser.save_screenshot(str(shots / "job-attempts.png"))
