"""The cluster's key-value store for programs (Ray's
ray.experimental.internal_kv), on a real cluster: what a driver stores, its
tasks and another driver read, namespaces apart, any bytes as keys."""

import subprocess
import sys

import pytest

import shoal
from shoal.cluster_utils import Cluster
from shoal.experimental import internal_kv as kv


def test_values_are_seen_across_the_cluster(started_cluster):
    shoal.init()
    assert kv._internal_kv_initialized()
    assert kv._internal_kv_get("missing") is None
    assert not kv._internal_kv_exists("count")
    # Ray's return value: whether the key already had a value.
    assert kv._internal_kv_put("count", "1") is False
    assert kv._internal_kv_put("count", b"2", overwrite=False) is True
    assert kv._internal_kv_get("count") == b"1"
    assert kv._internal_kv_put(b"count", b"3") is True
    assert kv._internal_kv_get(b"count") == b"3"

    @shoal.remote
    def bump():
        value = int(kv._internal_kv_get("count"))
        kv._internal_kv_put("count", str(value + 1))
        return kv._internal_kv_exists("count")

    assert shoal.get(bump.remote())
    assert kv._internal_kv_get("count") == b"4"

    # Another driver of the same cluster sees it too.
    out = subprocess.run(
        [sys.executable, "-c",
         "import shoal; from shoal.experimental import internal_kv as kv; "
         "shoal.init(address='auto'); print(kv._internal_kv_get('count'))"],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "b'4'"


def test_namespaces_and_shoals_own_keys_are_apart(local_cluster):
    kv._internal_kv_put("k", "default")
    kv._internal_kv_put("k", "a", namespace="team-a")
    kv._internal_kv_put("k", "b", namespace=b"team-b")
    assert kv._internal_kv_get("k") == b"default"
    assert kv._internal_kv_get("k", namespace="team-a") == b"a"
    assert kv._internal_kv_get("k", namespace="team-b") == b"b"
    assert kv._internal_kv_del("k", namespace="team-a") == 1
    assert kv._internal_kv_get("k", namespace="team-a") is None
    assert kv._internal_kv_get("k") == b"default"

    # Shoal keeps its functions' blobs in its own space: a user listing
    # everything sees only the user's keys.
    @shoal.remote
    def f():
        return 1

    assert shoal.get(f.remote()) == 1
    assert kv._internal_kv_list("") == [b"k"]


def test_any_bytes_list_and_delete_by_prefix(local_cluster):
    odd = b"\xff\x00\xfe"
    kv._internal_kv_put(odd, b"\x00value\xff")
    assert kv._internal_kv_get(odd) == b"\x00value\xff"
    for key in ("job/1", "job/2", "job/3", "jobs", "other"):
        kv._internal_kv_put(key, "v")
    assert kv._internal_kv_list("job/") == [b"job/1", b"job/2", b"job/3"]
    assert kv._internal_kv_del("job/") == 0  # no key "job/" itself
    assert kv._internal_kv_del("job/", del_by_prefix=True) == 3
    assert kv._internal_kv_list("job") == [b"jobs"]
    assert sorted(kv._internal_kv_list("")) == sorted([odd, b"jobs",
                                                       b"other"])


def test_bad_input_says_what_to_do(local_cluster):
    with pytest.raises(TypeError, match="bytes or str"):
        kv._internal_kv_put("count", 3)
    with pytest.raises(TypeError, match="bytes or str"):
        kv._internal_kv_get(7)
    with pytest.raises(ValueError, match="NUL"):
        kv._internal_kv_put("k", "v", namespace="a\x00b")
    # Nothing was stored by the refused calls.
    assert kv._internal_kv_list("") == []


def test_a_driver_must_join_a_cluster_first(monkeypatch):
    monkeypatch.setenv("SHOAL_AUTO_INIT", "0")
    assert not kv._internal_kv_initialized()
    with pytest.raises(RuntimeError, match="shoal.init"):
        kv._internal_kv_get("k")


def test_values_outlive_a_head_restart(monkeypatch, tmp_path):
    # Ray's Cluster kills and restarts the head (kill_gcs_server,
    # start_gcs_server); the head's storage keeps the users' keys.
    monkeypatch.setenv("SHOAL_TEMP_DIR", str(tmp_path))
    monkeypatch.delenv("SHOAL_ADDRESS", raising=False)
    monkeypatch.delenv("SHOAL_TOKEN", raising=False)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        shoal.init(address=cluster.address)
        kv._internal_kv_put("k", b"kept", namespace="ns")
        other = cluster.add_node(num_cpus=0)
        with pytest.raises(ValueError, match="only the head node"):
            other.kill_gcs_server()
        cluster.head_node.kill_gcs_server()
        cluster.head_node.start_gcs_server()
        # The driver reconnects by itself.
        assert kv._internal_kv_get("k", namespace="ns") == b"kept"
        assert kv._internal_kv_list("", namespace="ns") == [b"k"]
    finally:
        shoal.shutdown()
        cluster.shutdown()
