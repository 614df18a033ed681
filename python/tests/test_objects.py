"""Objects from Python against real clusters: put, get, wait, the cluster's
resources, and zero-copy numpy arrays mapped from the object store."""

import gc
import os
import time

import numpy as np
import pytest

import shoal


def _mapping_of(address):
    """The /proc/self/maps line whose range holds `address`."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            start, end = (int(x, 16) for x in line.split()[0].split("-"))
            if start <= address < end:
                return line.strip()
    return ""


def test_values_round_trip(local_cluster):
    values = [
        42, "text", None, [1, 2.5, {"k": (3, 4)}], b"x" * 10,
        b"y" * (1 << 20), {"nested": [b"z" * 300_000, np.arange(5)]},
    ]
    refs = [shoal.put(v) for v in values]
    got = shoal.get(refs)
    assert got[:6] == values[:6]
    assert got[6]["nested"][0] == values[6]["nested"][0]
    assert np.array_equal(got[6]["nested"][1], np.arange(5))
    assert shoal.get(refs[0]) == 42
    assert len({r.hex() for r in refs}) == len(refs)


def test_cluster_resources_and_nodes(local_cluster):
    total = shoal.cluster_resources()
    assert total["CPU"] == 2
    assert total["slot"] == 3
    assert shoal.available_resources()["CPU"] == 2
    nodes = shoal.nodes()
    assert len(nodes) == 1
    assert nodes[0]["Alive"] and nodes[0]["IsHeadNode"]
    assert nodes[0]["Resources"]["slot"] == 3


def test_large_array_maps_the_store_read_only_and_is_freed(local_cluster):
    array = np.arange(4 << 20, dtype=np.float64)  # 32 MiB
    ref = shoal.put(array)
    back = shoal.get(ref)
    assert np.array_equal(back, array)
    assert not back.flags.writeable
    with pytest.raises(ValueError):
        back[0] = 1.0
    # Its memory is the store's shared-memory arena, not this heap.
    mapping = _mapping_of(back.ctypes.data)
    assert "/dev/shm" in mapping, mapping
    # The array keeps the object: dropping the ref alone frees nothing.
    del ref
    gc.collect()
    assert back[123] == 123.0
    del back
    gc.collect()


def test_wait_and_bad_arguments(local_cluster):
    refs = [shoal.put(i) for i in range(5)]
    ready, not_ready = shoal.wait(refs, num_returns=3, timeout=10)
    assert ready == refs[:3]
    assert not_ready == refs[3:]
    ready, not_ready = shoal.wait(refs, num_returns=5)
    assert len(ready) == 5 and not not_ready
    with pytest.raises(ValueError):
        shoal.wait(refs, num_returns=6)
    with pytest.raises(ValueError, match="unique object refs"):
        shoal.wait([refs[0], refs[0]])
    assert shoal.wait([]) == ([], [])
    ready, _ = shoal.wait(refs, num_returns=5, fetch_local=False)
    assert len(ready) == 5
    with pytest.raises(TypeError, match="ObjectRef or a list"):
        shoal.get([1, 2])
    with pytest.raises(TypeError, match="ObjectRef or a list"):
        shoal.get(1)



def test_calls_before_init_say_what_to_do(monkeypatch):
    monkeypatch.setenv("SHOAL_AUTO_INIT", "0")
    assert not shoal.is_initialized()
    with pytest.raises(shoal.ShoalError, match=r"call shoal.init\(\) first"):
        shoal.put(1)


def test_the_first_call_joins_a_cluster_as_init_would(monkeypatch, tmp_path):
    monkeypatch.setenv("SHOAL_TEMP_DIR", str(tmp_path))
    monkeypatch.delenv("SHOAL_ADDRESS", raising=False)
    monkeypatch.delenv("SHOAL_AUTO_INIT", raising=False)
    assert not shoal.is_initialized()
    try:
        ref = shoal.put({"a": 1})  # starts a local cluster, as Ray's does
        assert shoal.is_initialized()
        assert shoal.get(ref) == {"a": 1}
        with pytest.raises(RuntimeError, match="init twice"):
            shoal.init()
        assert shoal.init(ignore_reinit_error=True)["address"]
    finally:
        shoal.shutdown()
    # get_runtime_context() joins too, as Ray's does.
    try:
        assert shoal.get_runtime_context().get_job_id()
        assert shoal.is_initialized()
    finally:
        shoal.shutdown()


def test_init_joins_the_cluster_shoal_start_started(started_cluster):
    assert not shoal.is_initialized()
    shoal.init()
    assert shoal.is_initialized()
    assert shoal.cluster_resources()["CPU"] == 1
    assert shoal.get(shoal.put({"a": 1})) == {"a": 1}
    # Joining an existing cluster starts no local one.
    sessions = [d for d in os.listdir(started_cluster)
                if d.startswith("session_") and d != "session_latest"]
    assert len(sessions) == 1, sessions


def _store_becomes(empty):
    """True once the cluster's object stores hold nothing (empty) or
    something (not empty), as the agents' heartbeats report it (within a
    second or so), within 10 s."""
    deadline = time.time() + 10
    while time.time() < deadline:
        free = shoal.available_resources().get("object_store_memory")
        total = shoal.cluster_resources()["object_store_memory"]
        if (free == total) == empty:
            return True
        time.sleep(0.1)
    return False


def test_large_bytes_go_out_of_band_and_come_back_as_bytes(local_cluster):
    from shoal._serialization import dumps
    blob = os.urandom(1 << 20)
    for value in (blob, [1, blob], {"k": (blob, 2)}):
        pieces, _ = dumps(value)
        assert len(pieces) == 3, "one buffer after the stream"
    back = shoal.get(shoal.put({"k": (blob, 2)}))
    assert type(back["k"][0]) is bytes and back["k"] == (blob, 2)


def test_an_array_is_freed_when_its_last_ref_and_view_go(local_cluster):
    ref = shoal.put(np.ones(16 << 20, dtype=np.uint8))
    view = shoal.get(ref)
    del ref
    gc.collect()
    assert _store_becomes(empty=False)  # the view still pins it
    time.sleep(1.5)  # heartbeats later, it still does
    assert _store_becomes(empty=False)
    assert view[-1] == 1
    del view
    gc.collect()
    assert _store_becomes(empty=True)


def test_torch_tensors_travel_through_the_store(local_cluster):
    torch = pytest.importorskip("torch")
    tensor = torch.arange(4 << 20, dtype=torch.float32).reshape(1024, -1)
    ref = shoal.put({"weights": tensor, "step": 3})
    back = shoal.get(ref)
    assert back["step"] == 3
    got = back["weights"]
    assert isinstance(got, torch.Tensor)
    assert got.dtype == torch.float32 and got.shape == tensor.shape
    assert torch.equal(got, tensor)
    got[0, 0] = -1.0  # a tensor of its own memory, not the store's
    assert torch.equal(shoal.get(ref)["weights"], tensor)
    # Types numpy lacks travel too.
    half = torch.ones(300_000, dtype=torch.bfloat16) * 1.5
    assert torch.equal(shoal.get(shoal.put(half)), half)

    @shoal.remote
    def double(t):
        return t * 2

    assert torch.equal(shoal.get(double.remote(tensor)), tensor * 2)
    assert _store_becomes(empty=False)  # the tensor put first, in the store
    del ref, back, got
    gc.collect()
    assert _store_becomes(empty=True)
