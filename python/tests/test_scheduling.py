"""Where tasks and actors run: NodeAffinitySchedulingStrategy and
label_selector, on a real two-node cluster whose second node has labels."""


import pytest

import shoal
from shoal.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from conftest import driver_of, running_cluster


@pytest.fixture(scope="module")
def labelled():
    """A head (zone a) and a node (zone b, disk ssd) of 2 CPUs each."""
    with running_cluster("shoal-py-", [
            (["--num-cpus", "2", "--labels", '{"zone": "a"}'], None),
            (["--num-cpus", "2", "--labels", '{"zone": "b", "disk": "ssd"}'],
             None)]) as cluster:
        yield cluster


@pytest.fixture
def driver(labelled, monkeypatch):
    with driver_of(labelled, monkeypatch) as cluster:
        yield cluster


@shoal.remote(num_cpus=1)
def where():
    return shoal.get_runtime_context().get_node_id()


@shoal.remote(num_cpus=1)
class Where:
    def node(self):
        return shoal.get_runtime_context().get_node_id()


def _nodes():
    """{zone: node id}."""
    return {n["Labels"]["zone"]: n["NodeID"] for n in shoal.nodes()
            if n["Alive"]}


def test_node_affinity_pins_tasks_and_actors_to_a_node(driver):
    nodes = _nodes()
    for zone, node in nodes.items():
        pinned = where.options(scheduling_strategy=(
            NodeAffinitySchedulingStrategy(node, soft=False)))
        # More tasks than the node has CPUs: every one still runs there.
        assert set(shoal.get([pinned.remote() for _ in range(6)],
                             timeout=60)) == {node}, zone
        actor = Where.options(scheduling_strategy=(
            NodeAffinitySchedulingStrategy(node, soft=False))).remote()
        assert shoal.get(actor.node.remote(), timeout=60) == node
        shoal.kill(actor)


def test_node_affinity_to_a_node_that_is_not_there(driver):
    gone = "0123456789ab"
    soft = where.options(scheduling_strategy=(
        NodeAffinitySchedulingStrategy(gone, soft=True)))
    assert shoal.get(soft.remote(), timeout=60) in _nodes().values()
    hard = where.options(scheduling_strategy=(
        NodeAffinitySchedulingStrategy(gone, soft=False)))
    with pytest.raises(shoal.InfeasibleError, match="no live node has labels"):
        shoal.get(hard.remote(), timeout=60)


def test_label_selectors_choose_nodes_by_their_labels(driver):
    nodes = _nodes()
    cases = {
        "a": {"zone": "a"},
        "b": {"zone": "!a"},
    }
    for zone, selector in cases.items():
        ran = shoal.get([where.options(label_selector=selector).remote()
                         for _ in range(4)], timeout=60)
        assert set(ran) == {nodes[zone]}, selector
    assert shoal.get(where.options(
        label_selector={"disk": "in(ssd,nvme)"}).remote()) == nodes["b"]
    assert shoal.get(where.options(
        label_selector={"disk": "!in(ssd)"}).remote()) == nodes["a"]
    actor = Where.options(label_selector={"zone": "b"}).remote()
    assert shoal.get(actor.node.remote(), timeout=60) == nodes["b"]
    shoal.kill(actor)


def test_bad_selectors_are_refused_at_submit(driver):
    with pytest.raises(TypeError, match="label_selector"):
        where.options(label_selector={"zone": 1}).remote()
    with pytest.raises(shoal.ShoalError, match="in\\( is not closed"):
        where.options(label_selector={"zone": "in(a"}).remote()
    with pytest.raises(ValueError, match="both name the node"):
        where.options(
            label_selector={"ray.io/node-id": "x"},
            scheduling_strategy=NodeAffinitySchedulingStrategy(
                "y", soft=False)).remote()
