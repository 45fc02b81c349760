"""ObjectStore.put_bytes_if_absent: create-once objects shared by several processes (the
simulator's idempotency keys and final job records). Real moto S3 server and a local dir."""

from __future__ import annotations

import threading

import pytest


def _race(store, key: str, writers: int = 8) -> list[bool]:
    barrier = threading.Barrier(writers)
    results: list[bool] = [False] * writers

    def write(i: int) -> None:
        barrier.wait()
        results[i] = store.put_bytes_if_absent(key, f"writer {i}".encode(), "text/plain")

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


@pytest.mark.parametrize("store_fixture", ["s3_store", "local_store"])
def test_exactly_one_concurrent_writer_creates_the_object(store_fixture, request):
    store = request.getfixturevalue(store_fixture)
    results = _race(store, "records/once")
    assert sum(results) == 1
    winner = results.index(True)
    assert store.get_bytes("records/once") == f"writer {winner}".encode()
    # later writers never replace it, and a plain put_bytes still overwrites as before
    assert store.put_bytes_if_absent("records/once", b"late") is False
    assert store.get_bytes("records/once") == f"writer {winner}".encode()
    store.put_bytes("records/once", b"overwritten")
    assert store.get_bytes("records/once") == b"overwritten"


@pytest.mark.parametrize("store_fixture", ["s3_store", "local_store"])
def test_created_object_is_verified_like_any_other(store_fixture, request):
    store = request.getfixturevalue(store_fixture)
    assert store.put_bytes_if_absent("a/b.bin", b"\x00\x01payload") is True
    assert store.stat("a/b.bin").size_bytes == 9
    assert store.get_bytes("a/b.bin") == b"\x00\x01payload"
    assert store.list("a/") == ["a/b.bin"]
