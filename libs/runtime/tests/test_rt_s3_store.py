"""S3Store against a real S3 server (moto) started by the test run."""

import io
import os
import urllib.request

import numpy as np
import pytest
from k4d.config import load_config
from k4d.errors import IntegrityError, InvalidArgument, NotFound, Unavailable
from k4d.local_servers import free_port
from k4d.store import get_array, job_key, open_store, put_array
from k4d.tensor_io import sha256_bytes

pytestmark = pytest.mark.integration


def test_round_trip_list_stat_delete_presign(s3_store, tmp_path):
    info = s3_store.put_bytes("jobs/j1/kin/a.bin", b"alpha")
    s3_store.put_bytes("jobs/j1/proj/b.bin", b"beta")
    assert info.uri == f"s3://{s3_store.bucket}/jobs/j1/kin/a.bin"
    assert s3_store.get_bytes("jobs/j1/kin/a.bin") == b"alpha"
    assert s3_store.list("jobs/j1/") == ["jobs/j1/kin/a.bin", "jobs/j1/proj/b.bin"]
    assert s3_store.stat("jobs/j1/kin/a.bin").sha256 == sha256_bytes(b"alpha")
    assert s3_store.exists("jobs/j1/kin/a.bin") and not s3_store.exists("jobs/j1/kin/zzz")
    url = s3_store.presign_get("jobs/j1/proj/b.bin", expires_s=60)
    assert urllib.request.urlopen(url, timeout=5).read() == b"beta"  # plain HTTP, no credentials
    s3_store.delete("jobs/j1/kin/a.bin")
    with pytest.raises(NotFound):
        s3_store.get_bytes("jobs/j1/kin/a.bin")
    with pytest.raises(NotFound):
        s3_store.get_file("jobs/j1/kin/a.bin", tmp_path / "x")
    assert not list(tmp_path.iterdir())  # no partial download left behind


def test_64_mib_object_goes_up_in_parts_and_comes_back_intact(s3_store, tmp_path):
    data = os.urandom(64 << 20)
    info = s3_store.put_bytes("big/blob", data)
    etag = s3_store.client.stat_object(bucket_name=s3_store.bucket, object_name="big/blob").etag
    assert etag.endswith("-13")  # 64 MiB in 5 MiB parts = 13-part multipart upload
    assert s3_store.get_bytes("big/blob", expected_sha256=info.sha256) == data
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    s3_store.put_file("big/file", src)
    out = s3_store.get_file("big/file", tmp_path / "out" / "dst.bin", expected_sha256=info.sha256)
    assert out.stat().st_size == 64 << 20 and sha256_bytes(out.read_bytes()) == info.sha256


def test_corrupted_object_is_detected_by_sha256(s3_store, tmp_path):
    array = np.random.default_rng(0).random((64, 64)).astype(np.float32)
    ref = put_array(s3_store, job_key("j2", "projection", "depth"), array)
    assert np.array_equal(get_array(s3_store, ref), array)
    name = s3_store.key_for_uri(ref.uri)
    corrupt = bytearray(s3_store.get_bytes(name))
    corrupt[100] ^= 0xFF
    # Overwritten behind the store's back, without the sha256 metadata.
    s3_store.client.put_object(bucket_name=s3_store.bucket, object_name=name,
                               data=io.BytesIO(bytes(corrupt)), length=len(corrupt))
    with pytest.raises(IntegrityError):
        get_array(s3_store, ref)
    with pytest.raises(IntegrityError, match="no recorded sha256"):
        s3_store.get_bytes(name)
    with pytest.raises(IntegrityError):
        s3_store.get_file(name, tmp_path / "depth.bin", expected_sha256=ref.sha256)
    assert not (tmp_path / "depth.bin").exists()
    # Overwritten keeping the old metadata: the recorded hash no longer matches.
    s3_store.client.put_object(bucket_name=s3_store.bucket, object_name=name,
                               data=io.BytesIO(bytes(corrupt)), length=len(corrupt),
                               metadata={"sha256": ref.sha256})
    with pytest.raises(IntegrityError, match="recorded"):
        s3_store.get_bytes(name)


def test_open_store_with_prefix_and_uri_mapping(s3_server):
    config = load_config(env={}, s3_endpoint=s3_server.endpoint, s3_access_key=s3_server.access_key,
                         s3_secret_key=s3_server.secret_key, s3_region=s3_server.region)
    store = open_store("s3://k4d-prefixed/team-a/", config)
    info = store.put_bytes("jobs/j/s/x", b"1")
    assert info.uri == "s3://k4d-prefixed/team-a/jobs/j/s/x"
    assert store.key_for_uri(info.uri) == "jobs/j/s/x" and store.list() == ["jobs/j/s/x"]
    with pytest.raises(InvalidArgument):
        store.key_for_uri("s3://other-bucket/team-a/jobs/j/s/x")
    with pytest.raises(InvalidArgument):
        store.key_for_uri("s3://k4d-prefixed/team-b/jobs/j/s/x")
    store.close()


def test_unreachable_server_is_retried_then_unavailable():
    from k4d.store.s3 import S3Store

    with pytest.raises(Unavailable, match="after 3 attempts"):
        S3Store(f"127.0.0.1:{free_port()}", "k4d-nowhere", access_key="a", secret_key="b",
                retries=3, retry_base_s=0.01)


class _ThrottlingProxy:
    """HTTP proxy in front of the S3 server that answers the first `failures` requests
    with 503 SlowDown (what S3/MinIO send under load), then forwards everything."""

    def __init__(self, upstream: str, failures: int):
        import http.client
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        proxy = self
        self.failures, self.seen = failures, 0

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _handle(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                proxy.seen += 1
                if proxy.seen <= proxy.failures:
                    error = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
                             b"<Message>Please reduce your request rate.</Message></Error>")
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(error)))
                    self.end_headers()
                    self.wfile.write(error)
                    return
                conn = http.client.HTTPConnection(upstream, timeout=10)
                conn.request(self.command, self.path, body=body, headers=dict(self.headers))
                response = conn.getresponse()
                payload = response.read()
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                conn.close()

            do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_slowdown_responses_are_retried_with_backoff(s3_server):
    from k4d.store.s3 import S3Store

    proxy = _ThrottlingProxy(s3_server.endpoint, failures=2)
    try:
        store = S3Store(proxy.address, "k4d-throttled", access_key=s3_server.access_key,
                        secret_key=s3_server.secret_key, region=s3_server.region,
                        retries=4, retry_base_s=0.01)
        store.put_bytes("a/b", b"payload")
        assert store.get_bytes("a/b") == b"payload"
        assert proxy.seen >= 4  # 2 throttled + the calls that went through
        proxy.failures = proxy.seen + 10  # throttle everything from now on
        with pytest.raises(Unavailable, match="after 4 attempts"):
            store.get_bytes("a/b")
    finally:
        proxy.close()


def test_transient_error_classification():
    from k4d.store.s3 import is_transient
    from minio.error import S3Error, ServerError

    class Response:
        status = 503

    assert is_transient(S3Error(Response(), "SlowDown", "m", "r", "id", "h"))
    assert is_transient(ServerError("bad gateway", 502))
    assert is_transient(ConnectionResetError())
    Response.status = 404
    assert not is_transient(S3Error(Response(), "NoSuchKey", "m", "r", "id", "h"))
    assert not is_transient(ValueError("bug"))
