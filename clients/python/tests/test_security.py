"""Tokens and HTTPS through the client against the real server: a read token looks but
cannot put, an admin token does both, wrong or missing tokens are clear errors; a CA made
here (openssl CLI) is trusted by path or SSLContext, and an untrusted one is a TLS error."""

from __future__ import annotations

import ssl

import pytest

from pyclient_testlib import ADMIN, READER, http, make_certificate, start_http  # noqa: F401

import jobyard


@pytest.fixture
def guarded(start_http):
    """A server requiring tokens: ADMIN may act, READER only look."""
    return start_http(["--http-token", f"{ADMIN},read:{READER}"], token=ADMIN)


def test_a_read_token_looks_but_cannot_put(guarded):
    with jobyard.Client(guarded.url(""), token=ADMIN) as admin:
        job_id = admin.put("guarded", "secret")
    with jobyard.Client(guarded.url(""), token=READER) as reader:
        assert reader.job(job_id)["state"] == "ready"
        assert reader.queue("guarded")["ready"] == 1
        with pytest.raises(jobyard.AuthError) as refused:
            reader.put("guarded", "more")
        assert (refused.value.status, refused.value.code) == (403, "forbidden")
        with pytest.raises(jobyard.AuthError):
            reader.lease("guarded")
        assert reader.queue("guarded")["ready"] == 1


def test_an_admin_token_puts_leases_and_reads(guarded):
    with jobyard.Client(guarded.url(""), token=ADMIN) as admin:
        job_id = admin.put("guarded", "work")
        assert admin.job(job_id)["state"] == "ready"
        job = admin.lease("guarded")
        assert job.id == job_id
        admin.complete(job, "done")
        assert admin.job(job_id) is None


def test_wrong_and_missing_tokens_are_clear_errors(guarded):
    with jobyard.Client(guarded.url(""), token="not-a-token-of-this-server") as wrong:
        with pytest.raises(jobyard.AuthError) as refused:
            wrong.health()
    assert (refused.value.status, refused.value.code) == (401, "bad_token")
    assert "401 bad_token" in str(refused.value) and not refused.value.is_transient
    with jobyard.Client(guarded.url(""), token="") as anonymous:
        with pytest.raises(jobyard.AuthError) as refused:
            anonymous.put("guarded", "x")
    assert refused.value.code == "auth_required"


def test_https_with_a_ca_given_by_path_or_context(start_http, tmp_path):
    ca, cert, key = make_certificate(tmp_path)
    srv = start_http(["--http-tls-cert", str(cert), "--http-tls-key", str(key),
                      "--http-token", ADMIN], token=ADMIN, ca=ca)
    url = srv.url("")
    assert url.startswith("https://")
    with jobyard.Client(url, token=ADMIN, ca=ca) as by_path:
        job_id = by_path.put("tls", "over tls")
        assert by_path.job(job_id)["body_preview"] == "over tls"
    context = ssl.create_default_context(cafile=str(ca))
    with jobyard.Client(url, token=ADMIN, ca=context) as by_context:
        assert by_context.job(job_id)["state"] == "ready"

    async def through_asyncio():
        async with jobyard.AsyncClient(url, token=ADMIN, ca=ca) as client:
            return (await client.job(job_id))["state"]

    import asyncio

    assert asyncio.run(through_asyncio()) == "ready"


def test_an_untrusted_certificate_is_a_tls_error(start_http, tmp_path, monkeypatch):
    ca, cert, key = make_certificate(tmp_path)
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other_ca, _, _ = make_certificate(other_dir)
    srv = start_http(["--http-tls-cert", str(cert), "--http-tls-key", str(key),
                      "--http-token", ADMIN], token=ADMIN, ca=ca)
    url = srv.url("")
    # The wrong CA (also when it comes from the environment), and the public roots alone.
    monkeypatch.setenv("JOBYARD_CA_CERT", str(other_ca))
    for client in (jobyard.Client(url, token=ADMIN, ca=other_ca),
                   jobyard.Client(url, token=ADMIN)):
        with client, pytest.raises(jobyard.TLSError) as failed:
            client.put("tls", "x")
        assert "certificate" in str(failed.value).lower() and not failed.value.is_transient
    monkeypatch.delenv("JOBYARD_CA_CERT")
    with jobyard.Client(url, token=ADMIN) as public_roots, pytest.raises(jobyard.TLSError):
        public_roots.health()
    # Plain HTTP to the TLS listener fails too, as a transport error that is not TLS's.
    plain = url.replace("https://", "http://")
    with jobyard.Client(plain, token=ADMIN) as client, \
            pytest.raises(jobyard.TransportError) as failed:
        client.health()
    assert not isinstance(failed.value, jobyard.TLSError)
    # A CA file that cannot be read is refused when the client is made.
    with pytest.raises(jobyard.ConfigError):
        jobyard.Client(url, ca=tmp_path / "missing.pem")
    # After all that, the server still serves a client that trusts it.
    with jobyard.Client(url, token=ADMIN, ca=ca) as trusting:
        assert trusting.health()["status"] == "ok"
