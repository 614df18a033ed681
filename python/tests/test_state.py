"""The state API (shoal.util.state, shoal.state) and the runtime context on
a real cluster of two nodes: records with Ray's field names, filters and
limits, task summaries, and where drivers, tasks and actors run."""

import os
import signal
import time

import pytest

import shoal
import shoal.state
from shoal.util import state


@shoal.remote
def square(x):
    return x * x


@shoal.remote
def context_in_task():
    ctx = shoal.get_runtime_context()
    return ctx.get_node_id(), ctx.get_job_id(), ctx.get_actor_id()


@shoal.remote
def task_context():
    ctx = shoal.get_runtime_context()
    return (ctx.get_task_id(), ctx.get_task_name(),
            ctx.get_task_function_name(), ctx.get())


@shoal.remote
class Named:
    def context(self):
        ctx = shoal.get_runtime_context()
        return (ctx.get_task_id(), ctx.get_task_name(),
                ctx.get_task_function_name(), ctx.get())

    async def context_async(self):
        ctx = shoal.get_runtime_context()
        return ctx.get_task_id(), ctx.get_task_name()


@shoal.remote(num_cpus=1)
class Probe:
    def __init__(self):
        # The constructor knows its actor, and whether it is a restart.
        ctx = shoal.get_runtime_context()
        self.made_as = (ctx.get_actor_id(), ctx.was_current_actor_reconstructed)

    def made(self):
        return self.made_as

    def pid(self):
        return os.getpid()

    def context(self):
        ctx = shoal.get_runtime_context()
        return {"actor_id": ctx.get_actor_id(),
                "node_id": ctx.get_node_id(),
                "resources": ctx.get_assigned_resources(),
                "name": ctx.get_actor_name(),
                "restarted": ctx.was_current_actor_reconstructed,
                "pg": ctx.get_placement_group_id()}


def _eventually(check, timeout=10):
    deadline = time.time() + timeout
    while True:
        try:
            return check()
        except AssertionError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def test_actors_and_nodes(connected):
    probe = Probe.options(name="probe-state").remote()
    info = shoal.get(probe.context.remote())
    actor_id = probe._actor_id
    assert info["actor_id"] == actor_id
    assert info["resources"] == {"CPU": 1.0}
    assert info["name"] == "probe-state"
    assert info["restarted"] is False and info["pg"] is None
    assert shoal.get(probe.made.remote()) == (actor_id, False)

    alive = state.list_actors(filters=[("state", "=", "alive")])
    mine = [a for a in alive if a.actor_id == actor_id]
    assert len(mine) == 1
    record = mine[0]
    assert record["class_name"] == "Probe" and record.name == "probe-state"
    assert record.state == "ALIVE" and record.pid > 0
    assert record.node_id == info["node_id"]
    assert state.get_actor(actor_id).state == "ALIVE"
    assert state.get_actor("no-such-actor") is None
    assert not [a for a in state.list_actors(
        filters=[("state", "!=", "ALIVE")]) if a.actor_id == actor_id]

    nodes = state.list_nodes()
    assert len(nodes) == 2
    assert sum(n.is_head_node for n in nodes) == 1
    assert {n.state for n in nodes} == {"ALIVE"}
    assert state.get_node(info["node_id"]).resources_total["CPU"] == 2.0
    assert len(state.list_nodes(limit=1)) == 1

    old = shoal.state.actors()
    assert old[actor_id]["State"] == "ALIVE"
    assert old[actor_id]["Address"]["NodeID"] == info["node_id"]
    assert shoal.state.actors(actor_id)["Name"] == "probe-state"
    per_node = shoal.state.available_resources_per_node()
    assert set(per_node) == {n.node_id for n in nodes}

    shoal.kill(probe)
    _eventually(lambda: _assert_state(actor_id, "DEAD"))


def _assert_state(actor_id, want):
    assert state.get_actor(actor_id).state == want


def test_filters_are_checked(connected):
    with pytest.raises(ValueError, match="not a valid column"):
        state.list_actors(filters=[("colour", "=", "red")])
    with pytest.raises(ValueError, match="predicate"):
        state.list_nodes(filters=[("state", ">", "ALIVE")])


def test_tasks_and_summary(connected):
    assert shoal.get([square.remote(i) for i in range(4)]) == [0, 1, 4, 9]
    job = shoal.get_runtime_context().get_job_id()

    def finished():
        tasks = state.list_tasks(filters=[("name", "=", "square"),
                                          ("job_id", "=", job)])
        assert len(tasks) == 4
        assert {t.state for t in tasks} == {"FINISHED"}
        return tasks

    tasks = _eventually(finished)
    assert tasks[0].type == "NORMAL_TASK" and tasks[0].node_id
    assert state.get_task(tasks[0].task_id).task_id == tasks[0].task_id
    summary = state.summarize_tasks()["cluster"]["summary"]
    assert summary["square"]["state_counts"]["FINISHED"] >= 4
    with pytest.warns(UserWarning, match="larger limit"):
        assert len(state.list_tasks(filters=[("job_id", "=", job)],
                                    limit=2)) == 2


def test_runtime_context(connected):
    ctx = shoal.get_runtime_context()
    driver_node = ctx.get_node_id()
    head = [n for n in state.list_nodes() if n.is_head_node][0]
    assert driver_node == head.node_id  # both nodes are on this host
    assert ctx.get_task_id() is None and ctx.get_actor_id() is None
    assert ctx.get_assigned_resources() == {}
    node, job, actor = shoal.get(context_in_task.remote())
    assert node in {n.node_id for n in state.list_nodes()}
    assert job == ctx.get_job_id() and actor is None
    assert shoal.util.get_node_ip_address() == "127.0.0.1"


def test_a_task_knows_its_own_id_name_and_function(connected):
    ctx = shoal.get_runtime_context()
    assert ctx.get_task_name() is None and ctx.get_task_function_name() is None
    summary = ctx.get()
    assert "task_id" not in summary and "actor_id" not in summary
    assert summary["job_id"].hex() == ctx.get_job_id()
    with pytest.warns(DeprecationWarning, match="Use get_node_id"):
        assert ctx.node_id.hex() == ctx.get_node_id()

    ref = task_context.options(name="my task").remote()
    task_id, name, function, summary = shoal.get(ref)
    assert name == "my task"
    assert function == f"{__name__}.task_context"
    assert summary["task_id"].hex() == task_id
    assert isinstance(summary["task_id"], shoal.TaskID)
    assert summary["node_id"] in {n.node_id for n in state.list_nodes()}
    # The id is the one the state API lists the task under.
    def listed():
        task = state.get_task(task_id)
        assert task is not None and task.name == "task_context"
    _eventually(listed)
    # Each call has its own.
    assert shoal.get(task_context.remote())[0] != task_id
    assert shoal.get(task_context.remote())[1] == "task_context"

    actor = Named.remote()
    task_id, name, function, summary = shoal.get(actor.context.remote())
    assert name == "Named.context"
    assert function == f"{__name__}.Named.context"
    assert summary["actor_id"] == actor._actor_id
    assert summary["task_id"].hex() == task_id and task_id
    async_id, async_name = shoal.get(actor.context_async.remote())
    assert async_name == "Named.context_async"
    assert async_id and async_id != task_id
    shoal.kill(actor)

    # A class made inside a function lists its calls by its own name, as
    # Ray's do ("Local.ping", not "test_...<locals>.Local.ping").
    @shoal.remote
    class Local:
        async def ping(self):
            return shoal.get_runtime_context().get_task_id()

    local = Local.remote()
    ping_id = shoal.get(local.ping.remote())

    def listed_by_name():
        found = state.list_tasks(filters=[("name", "=", "Local.ping")])
        assert [t.task_id for t in found] == [ping_id]

    _eventually(listed_by_name)


def test_a_restarted_actor_knows_it_from_its_constructor_on(connected):
    probe = Probe.options(max_restarts=1, max_task_retries=1).remote()
    assert shoal.get(probe.made.remote())[1] is False
    os.kill(shoal.get(probe.pid.remote()), signal.SIGKILL)
    # Calls made while it restarts wait for the new instance.
    actor_id, restarted = shoal.get(probe.made.remote(), timeout=60)
    assert (actor_id, restarted) == (probe._actor_id, True)
    assert shoal.get(probe.context.remote())["restarted"] is True
