"""TPU slices as units: two simulated v5p-16 slices ("s1", "s2", two
`shoal dev fake-tpu` hosts of 4 chips each) reserved by topology with Ray's
ray.util.tpu names, label selectors on Ray's keys, and Ray's docstring
examples run with only the import changed."""

import os
import time

import pytest
from conftest import driver_of, fake_tpu_host, running_cluster

import shoal
from shoal.util import tpu
from shoal.util.placement_group import placement_group
from shoal.util.scheduling_strategies import PlacementGroupSchedulingStrategy

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_JAX = os.path.join(HERE, "fake_jax")
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(
    shoal.__file__)))


def _slice_hosts(accelerator_type, names, workers, cpus):
    """(args, variables) of every host of slices `names`, each host's
    variables made under the cluster's root."""
    def host(name, worker):
        return (["--num-cpus", str(cpus), "--node-id", f"{name}-w{worker}"],
                lambda root: fake_tpu_host(root, worker, accelerator_type,
                                           name))
    return [host(n, w) for n in names for w in range(workers)]


@pytest.fixture(scope="module")
def two_slices():
    with running_cluster("shoal-slices-",
                         _slice_hosts("v5p-16", ("s1", "s2"), 2, 2)) as c:
        yield c


@pytest.fixture
def on_slices(two_slices, monkeypatch):
    with driver_of(two_slices, monkeypatch) as cluster:
        yield cluster


@shoal.remote(num_cpus=0)
def where():
    return (os.environ.get("TPU_NAME"), os.environ.get("TPU_WORKER_ID"),
            shoal.get_runtime_context().get_node_id())


def test_nodes_carry_rays_tpu_labels(on_slices):
    labels = {n["NodeID"]: n["Labels"] for n in shoal.nodes()}
    assert labels["s2-w1"]["ray.io/tpu-slice-name"] == "s2"
    assert labels["s2-w1"]["ray.io/tpu-worker-id"] == "1"
    assert labels["s2-w1"]["ray.io/tpu-pod-type"] == "v5p-16"
    assert labels["s2-w1"]["ray.io/tpu-topology"] == "2x2x2"
    assert labels["s2-w1"]["ray.io/accelerator-type"] == "TPU-V5P"
    assert tpu.get_tpu_slice_name_from_node(
        [n for n in shoal.nodes() if n["NodeID"] == "s1-w0"][0]) == "s1"
    assert sorted(n["NodeID"] for n in tpu.get_tpu_nodes_for_slice("s2")) == [
        "s2-w0", "s2-w1"]


def test_label_selectors_pin_and_avoid(on_slices):
    pinned = where.options(label_selector={
        "ray.io/tpu-slice-name": "s2", "ray.io/tpu-worker-id": "1"})
    assert shoal.get([pinned.remote() for _ in range(3)], timeout=60) == [
        ("s2", "1", "s2-w1")] * 3
    avoid = where.options(label_selector={"ray.io/tpu-slice-name": "!in(s1)"})
    assert {shoal.get(avoid.remote(), timeout=60)[0] for _ in range(4)} == {
        "s2"}


def test_an_infeasible_selector_says_so(on_slices):
    ref = where.options(label_selector={"ray.io/tpu-slice-name": "s9"}).remote()
    with pytest.raises(Exception, match="s9"):
        shoal.get(ref, timeout=60)


def test_bundle_label_selectors_place_each_bundle(on_slices):
    pg = placement_group(
        [{"CPU": 1}, {"CPU": 1}], strategy="SPREAD",
        bundle_label_selector=[{"ray.io/tpu-worker-id": "1",
                                "ray.io/tpu-slice-name": "s1"},
                               {"ray.io/node-id": "s2-w0"}])
    try:
        assert pg.wait(30)
        assert pg.bundle_nodes() == ["s1-w1", "s2-w0"]
    finally:
        shoal.util.remove_placement_group(pg)
    with pytest.raises(ValueError, match="one per bundle"):
        placement_group([{"CPU": 1}], bundle_label_selector=[{}, {}])


def test_worker_resources_and_coordinator_variables():
    assert tpu.get_tpu_worker_resources("2x2x2", "TPU-V5P") == (
        2, {"CPU": 1, "TPU": 4})
    assert tpu.get_tpu_worker_resources("2x2x2", "v5p", {"TPU": 1},
                                        num_slices=2) == (
        16, {"TPU": 1, "CPU": 1})
    assert tpu.get_tpu_num_slices_for_workers("2x2x2", "v5p", 5) == 3
    assert tpu.get_tpu_version_from_type("TPU-V6E") == "v6e"
    with pytest.raises(ValueError, match="Invalid accelerator_type"):
        tpu.get_tpu_version_from_type("TPU-V9")
    assert tpu.get_tpu_coordinator_env_vars("10.0.0.1", 2, 1) == {
        "MEGASCALE_COORDINATOR_ADDRESS": "10.0.0.1",
        "MEGASCALE_PORT": "8081",
        "MEGASCALE_NUM_SLICES": "2",
        "MEGASCALE_SLICE_ID": "1",
    }


def test_two_slices_as_one_group_in_worker_order(on_slices):
    _wait_until_both_slices_are_idle()
    assert tpu.get_num_ready_tpu_slices("2x2x2", "TPU-V5P") == 2
    slices = tpu.slice_placement_group("2x2x2", "v5p", num_slices=2)
    try:
        assert shoal.get(slices.placement_group.ready(), timeout=60)
        assert slices.num_hosts == 4 and slices.num_bundles == 4
        assert slices.slice_names == ["s1", "s2"]
        assert slices.placement_group.bundle_nodes() == [
            "s1-w0", "s1-w1", "s2-w0", "s2-w1"]
        assert tpu.get_num_ready_tpu_slices("2x2x2", "TPU-V5P") == 0
        seen = shoal.get(tpu.dispatch(where, tpu_slice=slices), timeout=60)
        assert seen == [("s1", "0", "s1-w0"), ("s1", "1", "s1-w1"),
                        ("s2", "0", "s2-w0"), ("s2", "1", "s2-w1")]
        # Every slice is held: a third cannot be had.
        with pytest.raises(Exception, match="v5p-32"):
            tpu.slice_placement_group("2x2x4", "v5p")
    finally:
        slices.shutdown()
    _wait_until_both_slices_are_idle()


def test_a_group_per_slice(on_slices):
    _wait_until_both_slices_are_idle()
    slices = tpu.slice_placement_group("2x2x2", "v5p", num_slices=2,
                                       pg_per_slice=True, name="job")
    try:
        groups = slices.slice_placement_groups
        assert [g.name for g in groups] == ["job_slice_0", "job_slice_1"]
        for g in groups:
            assert g.wait(60)
        assert [g.bundle_nodes() for g in groups] == [
            ["s1-w0", "s1-w1"], ["s2-w0", "s2-w1"]]
        only = shoal.get(tpu.dispatch(where, tpu_slice=slices,
                                      slice_index=1), timeout=60)
        assert [s[0] for s in only] == ["s2", "s2"]
        with pytest.raises(ValueError, match="pg_per_slice=True"):
            slices.placement_group
    finally:
        slices.shutdown()


def test_more_slices_than_the_cluster_has_fail_at_once(on_slices):
    with pytest.raises(Exception, match="cannot reserve 3 v5p-16"):
        tpu.SlicePlacementGroup("2x2x2", "v5p", num_slices=3)
    with pytest.raises(ValueError, match="3-D grid"):
        tpu.SlicePlacementGroup("4x4", "v5p")
    with pytest.raises(ValueError, match="tpu_resource_per_chip"):
        tpu.SlicePlacementGroup("2x2x2", "v5p", tpu_resource_per_chip=2)


def _wait_until_both_slices_are_idle():
    """Slices given back read as idle once the nodes' next reports say so."""
    deadline = time.monotonic() + 30
    while tpu.get_num_ready_tpu_slices("2x2x2", "v5p") < 2:
        assert time.monotonic() < deadline, "slices stayed busy"
        time.sleep(0.05)


def test_two_subslices_of_one_slice(on_slices):
    _wait_until_both_slices_are_idle()
    first = tpu.subslice_placement_group("2x2x1", "v5p")
    second = tpu.subslice_placement_group("2x2x1", "v5p")
    try:
        assert first.placement_group.wait(30) and second.placement_group.wait(30)
        assert (first.slice_name, first.worker_ids) == ("s1", [0])
        assert (second.slice_name, second.worker_ids) == ("s1", [1])
        assert second.subslice_index == 1 and second.num_hosts == 1
        assert first.parent_topology == "2x2x2"
        assert first.bundle_label_selector == [
            {"shoal.io/tpu-slice-name": "s1", "shoal.io/tpu-worker-id": "0"}]
        both = shoal.get([
            where.options(num_cpus=0, resources={"TPU": 4},
                          scheduling_strategy=PlacementGroupSchedulingStrategy(
                              g.placement_group)).remote()
            for g in (first, second)], timeout=60)
        assert [w[2] for w in both] == ["s1-w0", "s1-w1"]
    finally:
        first.shutdown()
        second.shutdown()
    with pytest.raises(RuntimeError, match="cut into a 2x2x4 sub-slice"):
        tpu.subslice_placement_group("2x2x4", "v5p")


@pytest.fixture(scope="module")
def v6e_slices():
    """Two simulated v6e-16 slices (4x4: four hosts of 4 chips each), the
    topology of Ray's docstring examples. Two, as the examples need: the
    one-shot dispatch keeps its slice until the driver exits, as Ray's
    does, and the next example reserves another."""
    with running_cluster("shoal-v6e-",
                         _slice_hosts("v6e-16", ("t1", "t2"), 4, 1)) as c:
        yield c


# Ray's docstring examples for ray.util.tpu (SlicePlacementGroup, dispatch,
# subslice_placement_group) as Ray's documentation has them, with only the
# import changed and a line to print what each returns.
DOCSTRING_EXAMPLES = """\
import shoal as ray
from shoal.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from shoal.util.tpu import SlicePlacementGroup
ray.init()

slice_handle = SlicePlacementGroup(topology="4x4", accelerator_version="v6e")
slice_pg = slice_handle.slice_placement_group
ray.get(slice_pg.ready(), timeout=10)

@ray.remote(num_cpus=0, resources={'TPU': 4})
def spmd_task(world, rank):
    print(f"Current TPU is rank {rank} of {world}")

tasks = [
    spmd_task.options(
        scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=slice_pg,
        )
    ).remote(world=4, rank=i)
    for i in range(slice_handle.num_hosts)
]
ray.get(tasks)
slice_handle.shutdown()

from shoal.util.tpu import dispatch, slice_placement_group

@ray.remote
def my_tpu_task():
    import jax
    return jax.device_count()

# One-shot: reserve a v6e 4x4 slice, run on every host, then
# release automatically when the driver exits.
results = ray.get(
    dispatch(my_tpu_task, topology="4x4", accelerator_version="v6e")
)
print(results)

# Reuse an existing slice across multiple calls.
slice_handle = slice_placement_group(topology="4x4", accelerator_version="v6e")
ray.get(slice_handle.slice_placement_group.ready())

results1 = ray.get(dispatch(my_tpu_task, tpu_slice=slice_handle))
results2 = ray.get(dispatch(my_tpu_task, tpu_slice=slice_handle))
slice_handle.shutdown()
print(results1, results2)

from shoal.util.tpu import subslice_placement_group

sg = subslice_placement_group(
    subslice_topology="2x4",
    accelerator_version="v6e",
)

@ray.remote(num_cpus=0, resources={"TPU": 4})
def train(world, rank):
    return (world, rank)

tasks = [
    train.options(
        scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=sg.placement_group,
        )
    ).remote(world=sg.num_hosts, rank=i)
    for i in range(sg.num_hosts)
]
print(ray.get(tasks), sg.worker_ids)
sg.shutdown()
"""


def test_rays_docstring_examples_run(v6e_slices):
    out = v6e_slices.run_driver(["-c", DOCSTRING_EXAMPLES],
                                [PACKAGE_DIR, FAKE_JAX])
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "[16, 16, 16, 16]" in lines, out.stdout
    assert "[16, 16, 16, 16] [16, 16, 16, 16]" in lines, out.stdout
    # A 2x4 of the 4x4 is a column of its 2x2 hosts: workers 0 and 2.
    assert "[(2, 0), (2, 1)] [0, 2]" in lines, out.stdout
