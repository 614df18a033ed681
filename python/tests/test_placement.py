"""Placement groups from Python, with Ray's names: bundles reserved
together, tasks and actors placed in a chosen bundle, removal."""

import pytest

import shoal
from shoal.util import placement_group, remove_placement_group
from shoal.util.scheduling_strategies import PlacementGroupSchedulingStrategy


@shoal.remote(num_cpus=1)
def node_of():
    return shoal.get_runtime_context().get_node_id()


@shoal.remote(num_cpus=1)
class Where:
    def node(self):
        return shoal.get_runtime_context().get_node_id()


def test_strict_spread_places_one_bundle_per_node(connected):
    group = placement_group([{"CPU": 1}, {"CPU": 1}],
                            strategy="STRICT_SPREAD")
    assert shoal.get(group.ready(), timeout=60) is True
    assert group.wait(timeout_seconds=10)
    nodes = group.bundle_nodes()
    assert len(set(nodes)) == 2
    ran = shoal.get([
        node_of.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            group, placement_group_bundle_index=i)).remote()
        for i in range(2)])
    assert ran == nodes
    actor = Where.options(placement_group=group,
                          placement_group_bundle_index=1).remote()
    assert shoal.get(actor.node.remote()) == nodes[1]
    shoal.kill(actor)
    remove_placement_group(group)


def test_bad_groups_fail_clearly(connected):
    with pytest.raises(ValueError, match="non-empty"):
        placement_group([])
    with pytest.raises(ValueError, match="strategy"):
        placement_group([{"CPU": 1}], strategy="SIDEWAYS")
    group = placement_group([{"CPU": 1}] * 3, strategy="STRICT_SPREAD")
    with pytest.raises(shoal.InfeasibleError):
        group.wait(timeout_seconds=30)  # three bundles, two nodes
    two = placement_group([{"CPU": 1}, {"CPU": 1}])
    with pytest.raises(ValueError, match="bundle_index 2 is out of range"):
        node_of.options(placement_group=two,
                        placement_group_bundle_index=2).remote()


def test_bad_bundles_and_requests_that_fit_no_bundle_are_refused(connected):
    for bundles in ([], [{}], [{"CPU": 0}], [{"CPU": -1}], [{"bundle": 1}]):
        with pytest.raises(ValueError):
            placement_group(bundles)
    group = placement_group([{"slot": 1}])
    assert group.wait(timeout_seconds=30)
    # A task takes a CPU unless told otherwise: the bundle has none.
    with pytest.raises(ValueError, match="cannot fit into any bundles"):
        node_of.options(placement_group=group).remote()
    with pytest.raises(ValueError, match="cannot fit"):
        node_of.options(placement_group=group, num_cpus=0,
                        resources={"slot": 2}).remote()
    # So does an actor in a group.
    with pytest.raises(ValueError, match="cannot fit"):
        Where.options(placement_group=group, num_cpus=None).remote()
    assert shoal.get(node_of.options(placement_group=group, num_cpus=0,
                                     resources={"slot": 1}).remote())
    remove_placement_group(group)


@shoal.remote(num_cpus=1)
def held():
    context = shoal.get_runtime_context()
    return (context.get_assigned_resources(),
            context.get_placement_group_id(),
            shoal.worker.get_resource_ids())


def test_a_task_without_a_bundle_index_runs_in_any_bundle(connected):
    group = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="SPREAD")
    assert group.wait(timeout_seconds=30)
    ran = shoal.get([node_of.options(placement_group=group).remote()
                     for _ in range(4)], timeout=60)
    assert set(ran) <= set(group.bundle_nodes())
    resources, group_id, ids = shoal.get(
        held.options(placement_group=group).remote(), timeout=60)
    assert resources == {f"CPU_group_{group.id}": 1.0}
    assert group_id == group.id
    assert list(ids) == [f"CPU_group_{group.id}"]
    # In bundle 1: its own resources and the group's, as Ray names them.
    resources, _, _ = shoal.get(held.options(
        placement_group=group, placement_group_bundle_index=1).remote())
    assert resources == {f"CPU_group_{group.id}": 1.0,
                         f"CPU_group_1_{group.id}": 1.0}
    resources, group_id, ids = shoal.get(held.remote())
    assert resources == {"CPU": 1.0} and group_id is None
    assert ids == {"CPU": [(0, 1.0)]}
    remove_placement_group(group)
