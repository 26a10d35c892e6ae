"""The dashboard's queue policy, dead letters and cluster view in headless chromium: a queue
page shows its policy (lease limit, rate limit, retry policy, dead-letter queue); a
dead-letter queue's page lists its dead letters with their failures, and its buttons
discard one and send the rest back to the queue they failed in; the overview shows the
cluster (on the file log: a single node)."""

from __future__ import annotations

import pytest
import requests

from http_testlib import http, start_http  # noqa: F401  (fixtures)

from browserlib import cell_text, shot, start_browser, wait_until  # noqa: E402


@pytest.fixture(scope="module")
def browser():
    driver = start_browser()
    yield driver
    driver.quit()


def fail_jobs(srv, queue: str, n: int) -> list[int]:
    """Puts n jobs in `queue` and has an HTTP worker fail each once, with an error text."""
    s = requests.Session()
    worker = s.post(srv.url("/v1/workers"), timeout=10).json()["worker"]
    ids = []
    for i in range(n):
        srv.put_job(queue, body=f"mail {i}")
        job = s.post(srv.url("/v1/lease"), timeout=10,
                     json={"queues": [queue], "worker": worker, "wait_ms": 5000}).json()["job"]
        failed = s.post(srv.url(f"/v1/jobs/{job['id']}/fail"), timeout=10,
                        json={"worker": worker, "token": job["token"], "error": f"smtp 55{i}"})
        assert failed.status_code == 200, failed.text
        ids.append(job["id"])
    return ids


def dead_letter_rows(driver) -> list[int]:
    return driver.execute_script(
        "return [...document.querySelectorAll('#dead-letter-list tr[data-dead-letter]')]"
        ".map((r) => Number(r.dataset.deadLetter));")


def test_a_queue_shows_its_policy_and_its_dead_letters_can_be_retried_or_discarded(
        browser, http):
    policy = http.request("PATCH", "/v1/queues/mails/policy", json={
        "lease_limit": 2, "rate_limit": "50/s", "max_attempts": 1,
        "dead_letter": "mails-dead"})
    assert policy.status_code == 200, policy.text
    ids = fail_jobs(http, "mails", 3)

    browser.get(http.url("/#/queue/mails/ready"))
    wait_until(browser, lambda d: cell_text(d, '#policy dd[data-policy="dead_letter"]'),
               "the policy")
    field = lambda key: cell_text(browser, f'#policy dd[data-policy="{key}"]')  # noqa: E731
    assert field("lease_limit") == "2"
    assert field("rate_limit").startswith("50/s")
    assert field("max_attempts") == "1"
    assert "mails-dead" in field("dead_letter")
    assert browser.find_elements("id", "retry-all") == [], "mails has no dead letters"
    shot(browser, "queue-policy")

    browser.get(http.url("/#/queue/mails-dead/buried"))
    wait_until(browser, lambda d: sorted(dead_letter_rows(d)) == ids, "three dead letters")
    row = browser.find_element("css selector", f'tr[data-dead-letter="{ids[1]}"]')
    assert "failed: smtp 551" in row.text and "mails" in row.text, row.text
    shot(browser, "dead-letters")

    row.find_element("css selector", "button.discard-one").click()
    wait_until(browser, lambda d: sorted(dead_letter_rows(d)) == [ids[0], ids[2]],
               "the discarded one leaves the list")
    assert http.get(f"/admin/api/jobs/{ids[1]}").status_code == 404

    browser.find_element("id", "retry-all").click()
    wait_until(browser, lambda d: not d.find_elements("id", "dead-letter-list"),
               "no dead letters left")
    for job in (ids[0], ids[2]):
        got = http.get(f"/admin/api/jobs/{job}").json()
        assert (got["queue"], got["state"]) == ("mails", "ready"), got
    browser.get(http.url("/#/queue/mails/ready"))
    wait_until(browser, lambda d: "ready (2)" in d.find_element("class name", "tabs").text,
               "the two retried jobs back in their queue")


def test_the_overview_shows_a_single_node_on_the_file_log(browser, http):
    browser.get(http.url("/"))
    wait_until(browser, lambda d: cell_text(d, '#cluster [data-cluster="single"]'),
               "the cluster panel")
    assert cell_text(browser, '#cluster [data-cluster="single"]') == "single node, file log"
