"""Access control and TLS on the real server's HTTP listener: tokens with roles on every
route (bearer and basic auth, from flags and from a file), `jobyard ctl --token`, the
refusal of an open listener beyond loopback, and HTTPS with a certificate made here."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import requests

from http_testlib import binary_path, error_code, free_port, http, start_http  # noqa: F401

ADMIN = "admin-token-for-tests-0123456789"
READER = "reader-token-for-tests-0123456789"
REPO = Path(__file__).resolve().parents[2]

# Every route of the listener (the /v1 API from its OpenAPI description, plus the
# operator's routes), with placeholders filled in.
ADMIN_ROUTES = [
    ("GET", "/"), ("GET", "/ui/app.js"), ("GET", "/ui/style.css"),
    ("GET", "/admin/api/overview"), ("GET", "/admin/api/queues/q"),
    ("POST", "/admin/api/queues/q/kick"), ("POST", "/admin/api/queues/q/pause"),
    ("GET", "/admin/api/jobs/1"), ("POST", "/admin/api/jobs/1/kick"),
    ("POST", "/admin/api/drain"), ("GET", "/admin/api/whoami"), ("GET", "/no/such/route"),
]


def every_route():
    doc = json.loads((REPO / "docs" / "openapi.json").read_text())
    routes = []
    for path, item in doc["paths"].items():
        for method in item:
            if method in ("get", "post", "put", "delete", "patch"):
                filled = (path.replace("{queue}", "q").replace("{id}", "1")
                          .replace("{worker}", "w"))
                routes.append((method.upper(), filled))
    assert len(routes) >= 10
    return routes + ADMIN_ROUTES


def call(srv, method, path, token=None, **kw):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    # A lease or result wait must not wait: these requests only probe the access check.
    kw.setdefault("json", {"queues": ["q"], "wait_ms": 0} if path == "/v1/lease" else None)
    if path.endswith("/result"):
        path += "?wait_ms=0"
    return requests.request(method, srv.url(path), headers=headers, timeout=30, **kw)


def test_every_route_needs_a_token_and_read_tokens_only_look(start_http):
    srv = start_http(["--http-token", f"{ADMIN},read:{READER}"], token=ADMIN)
    for method, path in every_route():
        anonymous = call(srv, method, path)
        assert anonymous.status_code == 401, (method, path, anonymous.text)
        assert error_code(anonymous) == "auth_required"
        assert anonymous.headers["www-authenticate"].startswith("Basic realm=")
        wrong = call(srv, method, path, token="not-a-token-of-this-server")
        assert wrong.status_code == 401 and error_code(wrong) == "bad_token", (method, path)
        as_reader = call(srv, method, path, token=READER)
        # The flow job lookup is a read whose ids go in a POST body.
        if method == "GET" or (method, path) == ("POST", "/v1/flow-jobs/lookup"):
            assert as_reader.status_code not in (401, 403), (method, path, as_reader.text)
        else:
            assert as_reader.status_code == 403, (method, path, as_reader.text)
            assert error_code(as_reader) == "forbidden"
        if path != "/admin/api/drain":
            as_admin = call(srv, method, path, token=ADMIN)
            assert as_admin.status_code not in (401, 403), (method, path, as_admin.text)
    # The dashboard learns the caller's role (to hide actions from read-only tokens).
    assert call(srv, "GET", "/admin/api/whoami", token=READER).json() == {
        "role": "read", "tokens_required": True}
    assert call(srv, "GET", "/admin/api/whoami", token=ADMIN).json()["role"] == "admin"
    # Prometheus scrapes without a token; nothing else is open.
    assert requests.get(srv.url("/metrics"), timeout=30).status_code == 200
    assert call(srv, "POST", "/admin/api/drain", token=ADMIN).status_code == 200


def test_basic_auth_with_the_token_as_password_lets_a_browser_in(start_http):
    srv = start_http(["--http-token", f"{ADMIN},read:{READER}"], token=ADMIN)
    page = requests.get(srv.url("/"), auth=("operator", READER), timeout=30)
    assert page.status_code == 200 and "<title>jobyard</title>" in page.text
    refused = requests.post(srv.url("/admin/api/drain"), auth=("operator", READER), timeout=30)
    assert refused.status_code == 403
    wrong = requests.get(srv.url("/"), auth=("operator", "guess-guess-guess-guess"), timeout=30)
    assert wrong.status_code == 401 and error_code(wrong) == "bad_token"


def test_tokens_from_a_file_and_ctl_with_each_role(start_http, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# who may do what\nadmin {ADMIN}\nread  {READER}\n")
    srv = start_http(["--http-token-file", str(tokens)], token=ADMIN)
    srv.put_job("mail", body="hello")

    def ctl(*args, token=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBYARD_")}
        if token:
            env["JOBYARD_TOKEN"] = token
        return subprocess.run([str(binary_path()), "ctl", "--url", srv.url(""), *args],
                              capture_output=True, text=True, timeout=30, env=env)

    anonymous = ctl("queues")
    assert anonymous.returncode == 3 and "--token" in anonymous.stderr
    looked = ctl("queues", token=READER)
    assert looked.returncode == 0 and "mail" in looked.stdout
    forbidden = ctl("pause", "mail", token=READER)
    assert forbidden.returncode == 3 and "admin token" in forbidden.stderr
    assert ctl("--token", ADMIN, "pause", "mail").returncode == 0
    assert ctl("--token", "wrong-token-wrong-token", "queues").returncode == 3
    assert "(paused)" in ctl("queues", token=ADMIN).stdout


def serve_and_fail(tmp_path, *args) -> subprocess.CompletedProcess:
    """Starts `jobyard serve` expecting it to refuse to start; its exit and output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBYARD_")}
    return subprocess.run(
        [str(binary_path()), "serve", "--data-dir", str(tmp_path / "data"),
         "--beanstalk-listen", "off", "--gearman-listen", "off", *args],
        capture_output=True, text=True, timeout=60, env=env)


def serves_on_every_interface(tmp_path, *args) -> bool:
    """Starts `jobyard serve` on 0.0.0.0 and probes it on loopback only; stops it."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBYARD_")}
    proc = subprocess.Popen(
        [str(binary_path()), "serve", "--data-dir", str(tmp_path / "open"),
         "--beanstalk-listen", "off", "--gearman-listen", "off",
         "--http-listen", f"0.0.0.0:{port}", *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                return requests.get(f"http://127.0.0.1:{port}/metrics", timeout=2).ok
            except requests.ConnectionError:
                time.sleep(0.05)
        return False
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_an_open_listener_beyond_loopback_is_refused_unless_insecure(tmp_path):
    refused = serve_and_fail(tmp_path, "--http-listen", f"0.0.0.0:{free_port()}")
    assert refused.returncode != 0
    assert "--http-insecure" in refused.stderr and "without access control" in refused.stderr
    # With tokens, or when told, it serves on every interface.
    assert serves_on_every_interface(tmp_path, "--http-insecure")
    assert serves_on_every_interface(tmp_path, "--http-token", ADMIN)


def test_bad_token_settings_stop_the_server_with_a_reason(tmp_path):
    short = serve_and_fail(tmp_path, "--http-token", "short")
    assert short.returncode != 0 and "16 to 512 bytes" in short.stderr
    bad_file = tmp_path / "tokens"
    bad_file.write_text("owner some-token-0123456789\n")
    wrong_role = serve_and_fail(tmp_path, "--http-token-file", str(bad_file))
    assert wrong_role.returncode != 0 and "tokens:1: unknown role" in wrong_role.stderr


def make_certificate(directory: Path) -> tuple[Path, Path, Path]:
    """A test CA and a server certificate it signs for 127.0.0.1 and localhost, made with
    the openssl CLI as docs/security.md shows; returns (CA, certificate, key)."""
    ca, ca_key = directory / "ca.pem", directory / "ca-key.pem"
    cert, key, csr = directory / "cert.pem", directory / "key.pem", directory / "req.pem"
    ext = directory / "ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    for cmd in (
        ["req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "2",
         "-subj", "/CN=jobyard test CA"],
        ["req", "-new", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=jobyard test"],
        ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
         "-out", cert, "-days", "2", "-extfile", ext],
    ):
        subprocess.run(["openssl", *map(str, cmd)], check=True, capture_output=True, timeout=60)
    return ca, cert, key


def test_tls_serves_https_to_requests_and_ctl_trusting_the_certificate(start_http, tmp_path):
    ca, cert, key = make_certificate(tmp_path)
    srv = start_http(["--http-tls-cert", str(cert), "--http-tls-key", str(key),
                      "--http-token", ADMIN], token=ADMIN, ca=ca)
    assert srv.url("").startswith("https://")
    job = srv.put_job("secure", body="over tls")
    assert srv.get(f"/v1/jobs/{job}").json()["state"] == "ready"
    assert "jobyard_queue_jobs" in srv.get("/metrics").text
    # Without trusting the certificate, or in plain HTTP, nothing gets through.
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(srv.url("/metrics"), timeout=30)
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(srv.url("/metrics").replace("https://", "http://"), timeout=30)
    # The server still answers after those failed handshakes.
    assert srv.get("/v1/health").status_code == 200

    base = [str(binary_path()), "ctl", "--url", srv.url(""), "--token", ADMIN]
    out = subprocess.run([*base, "--ca-cert", str(ca), "queues"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "secure" in out.stdout, out.stderr
    untrusted = subprocess.run([*base, "queues"], capture_output=True, text=True, timeout=30)
    assert untrusted.returncode == 2 and "cannot reach" in untrusted.stderr


def test_unusable_tls_files_stop_the_server_with_a_reason(tmp_path):
    _, cert, key = make_certificate(tmp_path)
    missing = serve_and_fail(tmp_path, "--http-listen", f"127.0.0.1:{free_port()}",
                             "--http-tls-cert", str(cert), "--http-tls-key",
                             str(tmp_path / "nope.pem"))
    assert missing.returncode != 0 and "nope.pem" in missing.stderr
    swapped = serve_and_fail(tmp_path, "--http-listen", f"127.0.0.1:{free_port()}",
                             "--http-tls-cert", str(key), "--http-tls-key", str(cert))
    assert swapped.returncode != 0 and "TLS" in swapped.stderr
    half = serve_and_fail(tmp_path, "--http-tls-cert", str(cert))
    assert half.returncode != 0 and "go together" in half.stderr


def test_access_settings_come_from_the_config_file_too(start_http, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"read {READER}\n")
    config = tmp_path / "jobyard.toml"
    config.write_text(f'http_token = "{ADMIN}"\nhttp_token_file = "{tokens}"\n')
    srv = start_http(["--config", str(config)], token=ADMIN)
    assert requests.get(srv.url("/admin/api/overview"), timeout=30).status_code == 401
    assert call(srv, "GET", "/admin/api/overview", token=READER).status_code == 200
    assert call(srv, "POST", "/admin/api/queues/q/pause", token=READER).status_code == 403
    assert "tokens required (1 admin, 1 read-only)" in srv.log()


def test_browsers_cannot_act_for_another_site_nor_rebind_a_local_listener(http):
    # An open listener on loopback (no tokens): the case a web page could reach.
    drain = http.url("/admin/api/queues/q/pause")
    for forged in ({"Origin": "http://evil.example"}, {"Origin": "null"},
                   {"Sec-Fetch-Site": "cross-site"}):
        r = requests.post(drain, headers=forged, timeout=30)
        assert r.status_code == 403 and error_code(r) == "cross_site", forged
    own = requests.post(http.url("/v1/queues/q/jobs"), json={},
                        headers={"Origin": http.url("").rstrip("/"), "Sec-Fetch-Site": "same-origin"},
                        timeout=30)
    assert own.status_code == 201, own.text
    # DNS rebinding: the request reaches 127.0.0.1 but names another host.
    rebound = requests.get(http.url("/admin/api/overview"), headers={"Host": "evil.example"},
                           timeout=30)
    assert rebound.status_code == 403 and error_code(rebound) == "host_not_local"
    local = requests.get(http.url("/admin/api/overview"),
                         headers={"Host": f"localhost:{http.hport}"}, timeout=30)
    assert local.status_code == 200
