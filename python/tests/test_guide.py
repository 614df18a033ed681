"""The guide on a simulated TPU v5p-16 slice (two `shoal dev fake-tpu`
hosts of 4 chips): its Ray snippets run as written with `import shoal as
ray` (JAX replaced by the stand-in in fake_jax/), one-chip tasks see the
variables the launch contract names, and the Python seed walkthrough runs.
"""

import os
import tempfile
import time

import pytest
from conftest import Cluster, driver_of, fake_tpu_host

import shoal
from shoal.util import tpu

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FAKE_JAX = os.path.join(HERE, "fake_jax")
WALKTHROUGH = os.path.join(REPO, "examples", "python", "seed_walkthrough.py")
# The folder that holds the shoal package under test (build/python).
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(
    shoal.__file__)))

HOSTS = 2
CHIPS_PER_HOST = 4

# The guide's snippet, as written for Ray but for the import.
GUIDE_SNIPPET = """\
import shoal as ray
import jax
ray.init()
@ray.remote(resources={"TPU": 4})
def my_function() -> int:
    return jax.device_count()
num_tpus = ray.cluster_resources()["TPU"]
num_hosts = int(num_tpus) // 4
h = [my_function.remote() for _ in range(num_hosts)]
print(ray.get(h))
"""


@pytest.fixture(scope="module")
def tpu_slice():
    """Workers 0 and 1 of a simulated v5p-16 slice, as scripts/demo makes
    them. A TPU VM has many cores; 4 CPUs per host let four one-chip tasks
    (1 CPU each, by default) run at once on a small test machine."""
    with tempfile.TemporaryDirectory(prefix="shoal-tpu-") as root:
        common = ["--num-cpus", str(CHIPS_PER_HOST)]
        cluster = Cluster(root, [*common, "--node-id", "tpu-host-0"],
                          [*common, "--node-id", "tpu-host-1"],
                          fake_tpu_host(root, 0), fake_tpu_host(root, 1))
        try:
            yield cluster
        finally:
            cluster.stop()


@pytest.fixture
def on_slice(tpu_slice, monkeypatch):
    """This process as a driver of tpu_slice for the length of one test."""
    with driver_of(tpu_slice, monkeypatch) as cluster:
        yield cluster


def _tpu_variables():
    return {k: v for k, v in os.environ.items() if k.startswith("TPU_")}


@shoal.remote(resources={"TPU": 1})
def hold_one_chip(barrier_dir, together):
    """What a one-chip task sees, once ``together`` such tasks run on its
    host at the same time (the simulated hosts share this machine's file
    system, so a folder of markers serves as the barrier), and ~0.5 s
    later, so that they overlap."""
    node = shoal.get_runtime_context().get_node_id()
    open(os.path.join(barrier_dir, f"{node}.{os.getpid()}"), "w").close()
    deadline = time.monotonic() + 30
    while True:
        running = sum(1 for name in os.listdir(barrier_dir)
                      if name.startswith(node + "."))
        if running >= together or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    time.sleep(0.5)
    return {
        "node": node,
        "running": running,
        "ids": shoal.get_runtime_context().get_accelerator_ids()["TPU"],
        "env": _tpu_variables(),
    }


@shoal.remote(resources={"TPU": CHIPS_PER_HOST})
def hold_a_host():
    return _tpu_variables()


def test_guide_snippet_prints_the_global_device_count_per_host(tpu_slice):
    out = tpu_slice.run_driver(["-c", GUIDE_SNIPPET],
                               [PACKAGE_DIR, FAKE_JAX])
    assert out.returncode == 0, out.stderr
    assert out.stdout == "[8, 8]\n", out.stdout + out.stderr


def test_one_chip_tasks_each_hold_a_chip_of_their_own(on_slice, tmp_path):
    seen = shoal.get([hold_one_chip.remote(str(tmp_path), CHIPS_PER_HOST)
                      for _ in range(HOSTS * CHIPS_PER_HOST)], timeout=120)
    by_node = {}
    for task in seen:
        assert task["running"] == CHIPS_PER_HOST, seen  # all 4 at once
        env = task["env"]
        chips = env["TPU_VISIBLE_CHIPS"].split(",")
        assert len(chips) == 1, task
        assert task["ids"] == chips, task
        # The launch contract, for a task that holds part of a host.
        assert env["TPU_CHIPS_PER_HOST_BOUNDS"] == "1,1,1", task
        assert env["TPU_HOST_BOUNDS"] == "1,1,1", task
        assert env["TPU_ACCELERATOR_TYPE"] == "v5p-16", task
        by_node.setdefault(task["node"], []).append(chips[0])
    assert sorted(by_node) == ["tpu-host-0", "tpu-host-1"], seen
    for node, chips in by_node.items():
        assert sorted(chips) == ["0", "1", "2", "3"], (node, seen)


def test_a_whole_host_task_gets_no_bounds_variables(on_slice):
    env = shoal.get(hold_a_host.remote(), timeout=120)
    assert env["TPU_VISIBLE_CHIPS"] == "0,1,2,3", env
    assert "TPU_CHIPS_PER_HOST_BOUNDS" not in env, env
    assert "TPU_HOST_BOUNDS" not in env, env


def test_python_seed_walkthrough(tpu_slice):
    out = tpu_slice.run_driver([WALKTHROUGH], [PACKAGE_DIR])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[8, 8]" in out.stdout, out.stdout
    # One process per chip through shoal launch --per-device.
    world = HOSTS * CHIPS_PER_HOST
    for rank in range(world):
        line = (f"RANK={rank} WORLD_SIZE={world} "
                f"TPU_VISIBLE_CHIPS={rank % CHIPS_PER_HOST}")
        assert line in out.stdout, out.stdout
    assert f"all {world} processes exited 0" in out.stdout, out.stdout


def test_the_tpu_helpers_reserve_the_slice_and_name_it(on_slice):
    reservation = tpu.reserve_slice("my-tpu", timeout_seconds=60)
    assert reservation.num_hosts == HOSTS
    assert reservation.chips_per_host == CHIPS_PER_HOST
    assert reservation.slice_name == "my-tpu"

    @shoal.remote(resources={"TPU": CHIPS_PER_HOST})
    def describe():
        return (shoal.get_runtime_context().get_node_id(),
                tpu.get_current_pod_name(),
                tpu.get_current_pod_worker_count(),
                tpu.get_num_tpu_chips_on_node())

    seen = shoal.get([describe.options(
        scheduling_strategy=reservation.strategy(i)).remote()
        for i in range(HOSTS)], timeout=120)
    assert seen == [("tpu-host-0", "my-tpu", HOSTS, CHIPS_PER_HOST),
                    ("tpu-host-1", "my-tpu", HOSTS, CHIPS_PER_HOST)]
    reservation.remove()
