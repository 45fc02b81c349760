import numpy as np
import pytest
from k4d.config import load_config
from k4d.errors import IntegrityError, InvalidArgument, NotFound
from k4d.retry import backoff_delay, call_with_retries
from k4d.store import LocalStore, get_array, job_key, open_store, put_array
from k4d.tensor_io import sha256_bytes


def test_put_get_exists_list_delete(local_store):
    info = local_store.put_bytes("jobs/a/kin/x.bin", b"hello")
    assert info.sha256 == sha256_bytes(b"hello") and info.size_bytes == 5
    assert info.uri == (local_store.root / "jobs/a/kin/x.bin").as_uri()
    local_store.put_bytes("jobs/a/proj/y.bin", b"world")
    assert local_store.get_bytes("jobs/a/kin/x.bin") == b"hello"
    assert local_store.exists("jobs/a/kin/x.bin") and not local_store.exists("jobs/a/kin/nope")
    assert local_store.list("jobs/a/") == ["jobs/a/kin/x.bin", "jobs/a/proj/y.bin"]
    assert local_store.list("jobs/a/proj") == ["jobs/a/proj/y.bin"]
    assert local_store.stat("jobs/a/kin/x.bin").sha256 == info.sha256
    local_store.delete("jobs/a/kin/x.bin")
    local_store.delete("jobs/a/kin/x.bin")  # absent: not an error
    with pytest.raises(NotFound):
        local_store.get_bytes("jobs/a/kin/x.bin")
    assert local_store.presign_get("jobs/a/proj/y.bin").startswith("file://")


def test_rewrite_same_key_is_idempotent(local_store):
    key = job_key("job-1", "kinematics", "poses.bin")
    first = local_store.put_bytes(key, b"same")
    second = local_store.put_bytes(key, b"same")
    assert first == second and local_store.list() == [key]


def test_corruption_is_detected(local_store):
    local_store.put_bytes("k/obj", b"original bytes")
    (local_store.root / "k/obj").write_bytes(b"tampered bytes")
    with pytest.raises(IntegrityError, match="corrupt"):
        local_store.get_bytes("k/obj")
    with pytest.raises(IntegrityError):
        local_store.get_file("k/obj", local_store.root.parent / "out.bin")
    assert not (local_store.root.parent / "out.bin").exists()


def test_reader_between_the_two_renames_of_a_rewrite_gets_the_new_bytes(local_store):
    """A mutable record's rewrite lands its hash before its bytes; a reader in between
    must not call the object corrupt (flaked as DATA_LOSS on trainer job records)."""
    import threading

    local_store.put_bytes("jobs/r.json", b"old record")
    new = b"new record, longer"
    # The writer's first rename (the hash) has happened, its second (the bytes) not yet.
    local_store._meta_path("jobs/r.json").write_text(sha256_bytes(new))
    writer = threading.Timer(0.01, lambda: local_store._path("jobs/r.json").write_bytes(new))
    writer.start()
    try:
        assert local_store.get_bytes("jobs/r.json") == new
    finally:
        writer.join()


def test_expected_sha_and_foreign_objects(local_store):
    local_store.put_bytes("k/obj", b"abc")
    with pytest.raises(IntegrityError, match="expected"):
        local_store.get_bytes("k/obj", expected_sha256="0" * 64)
    (local_store.root / "k/foreign").write_bytes(b"written by someone else")
    with pytest.raises(IntegrityError, match="no recorded sha256"):
        local_store.get_bytes("k/foreign")


def test_files_round_trip(local_store, tmp_path):
    src = tmp_path / "in.bin"
    src.write_bytes(b"x" * 1000)
    info = local_store.put_file("files/in.bin", src)
    out = local_store.get_file("files/in.bin", tmp_path / "deep" / "out.bin", expected_sha256=info.sha256)
    assert out.read_bytes() == src.read_bytes()


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/../b", "../x", ".hidden/x", "a/b c", "a/./b"])
def test_bad_keys_are_rejected(local_store, key):
    with pytest.raises(InvalidArgument):
        local_store.put_bytes(key, b"x")


def test_job_key_is_deterministic_and_validated():
    assert job_key("j-42", "projection", "depth.bin") == "jobs/j-42/projection/depth.bin"
    with pytest.raises(InvalidArgument) as info:
        job_key("a/b", "projection", "x")
    assert info.value.violations[0].field == "job_id"


def test_arrays_through_refs(local_store):
    array = np.random.default_rng(0).random((3, 5, 4)).astype(np.float32)
    ref = put_array(local_store, job_key("j", "proj", "pointmap"), array)
    assert (ref.dtype, ref.shape, ref.size_bytes) == ("float32", (3, 5, 4), array.nbytes)
    assert np.array_equal(get_array(local_store, ref), array)
    assert LocalStore(local_store.root).key_for_uri(ref.uri) == "jobs/j/proj/pointmap"
    with pytest.raises(InvalidArgument):
        local_store.key_for_uri("file:///somewhere/else")
    with pytest.raises(InvalidArgument):
        local_store.key_for_uri("s3://bucket/jobs/j/proj/pointmap")


def test_open_store_from_uri(tmp_path):
    store = open_store(tmp_path.as_uri() + "/s", load_config(env={}))
    assert isinstance(store, LocalStore) and store.root == (tmp_path / "s").resolve()
    with pytest.raises(InvalidArgument, match="expected file:///path or s3://bucket"):
        open_store("ftp://x", load_config(env={}))
    with pytest.raises(InvalidArgument) as info:
        open_store("s3://bucket-x", load_config(env={}))
    assert info.value.violations[0].field == "K4D_S3_ENDPOINT"


def test_retry_policy():
    assert [backoff_delay(a, 0.5, 3.0) for a in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 3.0]
    calls, sleeps = [], []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("reset")
        return "ok"

    assert call_with_retries(flaky, is_transient=lambda e: isinstance(e, ConnectionError),
                             attempts=4, base_delay_s=0.1, sleep=sleeps.append) == "ok"
    assert sleeps == [0.1, 0.2]
    with pytest.raises(ConnectionError):
        call_with_retries(lambda: (_ for _ in ()).throw(ConnectionError("down")),
                          is_transient=lambda e: True, attempts=2, sleep=sleeps.append)
    with pytest.raises(KeyError):  # not transient: no retry
        call_with_retries(lambda: {}["x"], is_transient=lambda e: False, attempts=5,
                          sleep=lambda s: pytest.fail("slept"))
