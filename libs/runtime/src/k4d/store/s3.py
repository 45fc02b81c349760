"""Object store on any S3 API (MinIO in production, moto in tests) via the `minio` client.

- sha256 recorded as user metadata (`x-amz-meta-sha256`) on put, verified on read.
- Large objects go up in parts (`part_size`), so a 64 MiB array is a multipart upload.
- Transient failures (connection errors, 5xx, SlowDown) are retried with exponential
  backoff by `call_with_retries`; urllib3's own retries are off so there is one policy.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlparse

from k4d.errors import InvalidArgument, NotFound, Unavailable
from k4d.retry import call_with_retries
from k4d.store.base import ObjectInfo, ObjectStore, validate_key, verify_sha256
from k4d.tensor_io import sha256_bytes, sha256_file

SHA256_META = "sha256"  # sent as the x-amz-meta-sha256 header
_TRANSIENT_S3_CODES = {"SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout",
                       "ServerBusy", "XMinioServerNotInitialized"}
_MISSING_CODES = {"NoSuchKey", "NoSuchObject", "NoSuchBucket", "ResourceNotFound"}
_CHUNK = 8 << 20


def is_transient(exc: BaseException) -> bool:
    """Errors worth retrying: the network, the server's 5xx and throttling."""
    import urllib3
    from minio.error import S3Error, ServerError

    if isinstance(exc, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError)):
        return True
    if isinstance(exc, ServerError):
        return exc.status_code >= 500
    if isinstance(exc, S3Error):
        status = exc.response.status if exc.response is not None else 0
        return exc.code in _TRANSIENT_S3_CODES or status >= 500
    return False


def _http_client(secure: bool):
    import urllib3

    kwargs = {}
    if secure:
        import certifi

        kwargs = {"cert_reqs": "CERT_REQUIRED", "ca_certs": certifi.where()}
    return urllib3.PoolManager(timeout=urllib3.Timeout(connect=5.0, read=120.0),
                               maxsize=16, retries=False, **kwargs)


class S3Store(ObjectStore):
    def __init__(self, endpoint: str, bucket: str, *, access_key: str, secret_key: str,
                 secure: bool = False, region: str = "us-east-1", prefix: str = "",
                 part_size_bytes: int = 16 << 20, retries: int = 4, retry_base_s: float = 0.2,
                 create_bucket: bool = True):
        from minio import Minio

        if not endpoint:
            raise InvalidArgument.for_field("K4D_S3_ENDPOINT", "an s3:// store needs an endpoint (host:port)")
        if part_size_bytes < 5 << 20:
            raise InvalidArgument.for_field("K4D_S3_PART_SIZE_BYTES", "S3 parts must be >= 5 MiB")
        self.endpoint, self.bucket = endpoint, bucket
        self.prefix = prefix.strip("/")
        self.part_size_bytes = part_size_bytes
        self._retries, self._retry_base_s = max(1, retries), retry_base_s
        self._http = _http_client(secure)
        self.client = Minio(endpoint, access_key=access_key or None, secret_key=secret_key or None,
                            secure=secure, region=region or None, http_client=self._http)
        if create_bucket:
            self.ensure_bucket()

    @classmethod
    def from_uri(cls, uri: str, config) -> S3Store:
        parsed = urlparse(uri)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise InvalidArgument.for_field("store_uri", f"expected s3://bucket[/prefix], got {uri!r}")
        return cls(config.s3_endpoint, parsed.netloc, access_key=config.s3_access_key,
                   secret_key=config.s3_secret_key, secure=config.s3_secure,
                   region=config.s3_region, prefix=parsed.path,
                   part_size_bytes=config.s3_part_size_bytes, retries=config.s3_retries)

    # -- plumbing -----------------------------------------------------------------

    def _call(self, op: str, fn):
        """Run one S3 operation with retries; map a missing object to NotFound and a
        persistent outage to Unavailable."""
        from minio.error import S3Error

        try:
            return call_with_retries(fn, is_transient=is_transient, attempts=self._retries,
                                     base_delay_s=self._retry_base_s)
        except S3Error as exc:
            if exc.code in _MISSING_CODES:
                raise NotFound(f"{op}: {exc.code} for s3://{self.bucket}/{exc.object_name or ''}") from None
            if is_transient(exc):
                raise Unavailable(f"object store {op} failed after {self._retries} attempts: {exc.code}") from exc
            raise
        except Exception as exc:
            if is_transient(exc):
                raise Unavailable(f"object store {op} failed after {self._retries} attempts: "
                                  f"{type(exc).__name__}") from exc
            raise

    def _name(self, key: str) -> str:
        key = validate_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def ensure_bucket(self) -> None:
        from minio.error import S3Error

        def create():
            if not self.client.bucket_exists(bucket_name=self.bucket):
                try:
                    self.client.make_bucket(bucket_name=self.bucket)
                except S3Error as exc:  # another process won the race
                    if exc.code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                        raise

        self._call("create bucket", create)

    # -- ObjectStore --------------------------------------------------------------

    def put_bytes(self, key, data, content_type="application/octet-stream"):
        name, digest = self._name(key), sha256_bytes(data)

        def put():
            self.client.put_object(bucket_name=self.bucket, object_name=name,
                                   data=io.BytesIO(data), length=len(data),
                                   content_type=content_type, metadata={SHA256_META: digest},
                                   part_size=self.part_size_bytes)

        self._call("put", put)
        return ObjectInfo(key, self.uri_for(key), digest, len(data))

    def put_bytes_if_absent(self, key, data, content_type="application/octet-stream"):
        from minio.error import S3Error

        name, digest = self._name(key), sha256_bytes(data)
        # minio's put_object turns unknown headers into user metadata, so the conditional
        # PUT goes through its single-request PutObject (one request: no multipart).
        headers = {"Content-Type": content_type, f"x-amz-meta-{SHA256_META}": digest,
                   "If-None-Match": "*"}

        def put():
            try:
                self.client._put_object(self.bucket, name, bytes(data), headers)
            except S3Error as exc:
                # 412: the key exists. 409: a concurrent conditional write is in flight
                # (AWS, MinIO); whoever wins, the key is taken, settled by the stat below.
                if exc.code in ("PreconditionFailed", "ConditionalRequestConflict"):
                    return False
                raise
            return True

        if self._call("put if absent", put):
            return True
        # Taken, possibly by this very call: a retried request whose first attempt landed
        # is answered 412. The same sha256 means the bytes are ours.
        try:
            return self.stat(key).sha256 == digest
        except NotFound:  # the 409 loser of a write that then failed: try once more
            return bool(self._call("put if absent", put))

    def _open(self, name: str):
        return self.client.get_object(bucket_name=self.bucket, object_name=name)

    def get_bytes(self, key, expected_sha256=None):
        name = self._name(key)

        def get():
            response = self._open(name)
            try:
                return response.read(), response.headers.get(f"x-amz-meta-{SHA256_META}")
            finally:
                response.close()
                response.release_conn()

        data, recorded = self._call("get", get)
        verify_sha256(key, sha256_bytes(data), recorded, expected_sha256)
        return data

    def put_file(self, key, path):
        name, path = self._name(key), Path(path)
        digest = sha256_file(path)

        def put():
            self.client.fput_object(bucket_name=self.bucket, object_name=name, file_path=str(path),
                                    metadata={SHA256_META: digest}, part_size=self.part_size_bytes)

        self._call("put", put)
        return ObjectInfo(key, self.uri_for(key), digest, path.stat().st_size)

    def get_file(self, key, path, expected_sha256=None):
        """Stream to a temp file next to `path` while hashing; rename only when verified."""
        name, dst = self._name(key), Path(path)
        dst.parent.mkdir(parents=True, exist_ok=True)

        def download():
            fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.name}.", suffix=".part")
            digest = hashlib.sha256()
            try:
                response = self._open(name)
                try:
                    with os.fdopen(fd, "wb") as f:
                        for chunk in response.stream(_CHUNK):
                            digest.update(chunk)
                            f.write(chunk)
                    recorded = response.headers.get(f"x-amz-meta-{SHA256_META}")
                finally:
                    response.close()
                    response.release_conn()
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            return tmp, digest.hexdigest(), recorded

        tmp, actual, recorded = self._call("get", download)
        try:
            verify_sha256(key, actual, recorded, expected_sha256)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        os.replace(tmp, dst)
        return dst

    def exists(self, key):
        try:
            self.stat(key)
        except NotFound:
            return False
        return True

    def stat(self, key):
        name = self._name(key)
        st = self._call("stat", lambda: self.client.stat_object(bucket_name=self.bucket, object_name=name))
        recorded = (st.metadata or {}).get(f"x-amz-meta-{SHA256_META}") or ""
        return ObjectInfo(key, self.uri_for(key), recorded, int(st.size or 0))

    def delete(self, key):
        name = self._name(key)
        self._call("delete", lambda: self.client.remove_object(bucket_name=self.bucket, object_name=name))

    def list(self, prefix=""):
        full = f"{self.prefix}/{prefix}" if self.prefix else prefix
        strip = len(self.prefix) + 1 if self.prefix else 0

        def names():
            return [o.object_name for o in self.client.list_objects(
                bucket_name=self.bucket, prefix=full or None, recursive=True)]

        return sorted(n[strip:] for n in self._call("list", names))

    def presign_get(self, key, expires_s=3600):
        name = self._name(key)
        return self._call("presign", lambda: self.client.presigned_get_object(
            bucket_name=self.bucket, object_name=name, expires=timedelta(seconds=expires_s)))

    def uri_for(self, key):
        return f"s3://{self.bucket}/{self._name(key)}"

    def key_for_uri(self, uri):
        parsed = urlparse(uri)
        name = parsed.path.lstrip("/")
        if parsed.scheme != "s3" or parsed.netloc != self.bucket:
            raise InvalidArgument.for_field("uri", f"{uri!r} is not in bucket {self.bucket!r}")
        if self.prefix:
            if not name.startswith(self.prefix + "/"):
                raise InvalidArgument.for_field("uri", f"{uri!r} is outside prefix {self.prefix!r}")
            name = name[len(self.prefix) + 1:]
        return validate_key(name, "uri")

    def close(self):
        self._http.clear()
