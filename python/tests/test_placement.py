"""Placement groups from Python, with Ray's names: bundles reserved
together, tasks and actors placed in a chosen bundle, removal."""

import os

import pytest

import shoal
from shoal.test_utils import wait_for_pid_to_exit
from shoal.util import (get_current_placement_group, placement_group,
                        placement_group_table, remove_placement_group)
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
    assert shoal.get(group.ready(), timeout=60) == group
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
    with pytest.raises(ValueError, match="bundle index 2 is invalid"):
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


@shoal.remote(num_cpus=0)
def current_group():
    group = get_current_placement_group()
    return None if group is None else group.id


@shoal.remote(num_cpus=0)
def children_groups(options):
    here = get_current_placement_group()
    return (None if here is None else here.id,
            shoal.get([current_group.options(**options).remote()
                       for _ in range(2)], timeout=60))


def test_a_group_captures_what_its_calls_start_when_asked(connected):
    group = placement_group([{"CPU": 1}, {"CPU": 1}])
    assert shoal.get(group.ready(), timeout=60) == group
    assert get_current_placement_group() is None  # a driver's
    table = placement_group_table(group)
    assert table["state"] == "CREATED"
    assert table["bundles"] == {0: {"CPU": 1.0}, 1: {"CPU": 1.0}}
    assert set(table["bundles_to_node_id"].values()) == set(
        group.bundle_nodes())
    assert group.id in placement_group_table()

    captures = children_groups.options(
        placement_group=group, placement_group_capture_child_tasks=True)
    here, children = shoal.get(captures.remote({}), timeout=60)
    assert here == group.id and children == [group.id, group.id]
    # placement_group=None opts out of the capture.
    _, children = shoal.get(captures.remote({"placement_group": None}),
                            timeout=60)
    assert children == [None, None]
    # Without the option, a group keeps only its own call.
    here, children = shoal.get(children_groups.options(
        placement_group=group).remote({}), timeout=60)
    assert here == group.id and children == [None, None]
    # The strategy's flag captures too.
    here, children = shoal.get(children_groups.options(
        scheduling_strategy=PlacementGroupSchedulingStrategy(
            group, placement_group_capture_child_tasks=True)).remote({}),
        timeout=60)
    assert children == [group.id, group.id]

    with pytest.raises(ValueError, match="bundle index must be -1"):
        current_group.options(placement_group_bundle_index=0).remote()
    with pytest.raises(ValueError, match="bundle index -2 is invalid"):
        current_group.options(placement_group=group,
                              placement_group_bundle_index=-2).remote()
    remove_placement_group(group)
    assert placement_group_table(group).get("state", "REMOVED") == "REMOVED"


@shoal.remote(num_cpus=0)
class Child:
    def pid(self):
        return os.getpid()


@shoal.remote(num_cpus=0, max_restarts=1)
class Parent:
    def __init__(self, service_name):
        self.child = Child.remote()  # made by the constructor
        self.service = Child.options(name=service_name, lifetime="detached",
                                     get_if_exists=True).remote()

    def pids(self):
        return shoal.get([self.child.pid.remote(),
                          self.service.pid.remote()])

    def make_another(self):
        self.another = Child.remote()
        return shoal.get(self.another.pid.remote())


def test_an_actors_own_actors_end_with_its_process(connected):
    parent = Parent.remote("kept-service")
    child_pid, service_pid = shoal.get(parent.pids.remote(), timeout=60)
    another_pid = shoal.get(parent.make_another.remote(), timeout=60)
    # A restart ends the parent's process: the actors it made go with it,
    # as Ray's owned actors do; a detached one stays.
    shoal.kill(parent, no_restart=False)
    wait_for_pid_to_exit(child_pid)
    wait_for_pid_to_exit(another_pid)
    os.kill(service_pid, 0)
    # The restarted parent made its own again.
    new_child_pid, _ = shoal.get(parent.pids.remote(), timeout=60)
    assert new_child_pid != child_pid
    shoal.kill(shoal.get_actor("kept-service"))
    shoal.kill(parent)
    wait_for_pid_to_exit(new_child_pid)
