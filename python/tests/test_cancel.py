"""shoal.cancel() on a real cluster of two nodes, as Ray's cancel(): a task
that has not reached a worker fails at once, a running one is interrupted
(KeyboardInterrupt in it, a blocking get in it included) or its worker
ended (force), dependents fail with it, and a finished task keeps its
result. A recursive cancel (the default) stops what the task submitted
too, and what that submitted in turn."""

import os
import time

import pytest

import shoal
from shoal.exceptions import TaskCancelledError
from shoal.test_utils import (SignalActor, wait_for_condition,
                              wait_for_pid_to_exit)


@shoal.remote
def identity(x):
    return x


@shoal.remote(num_cpus=0)
class Pids:
    def __init__(self):
        self.pids = []

    def add(self, pid):
        self.pids.append(pid)

    def get(self):
        return self.pids


@shoal.remote
def spin(pids):
    shoal.get(pids.add.remote(os.getpid()))
    while True:
        time.sleep(0.05)


@shoal.remote
def blocked_in_get(pids, signal):
    shoal.get(pids.add.remote(os.getpid()))
    return shoal.get(signal.wait.remote())


def _running_pid(pids):
    """The pid of the worker once the task has told it (it runs)."""
    wait_for_condition(lambda: shoal.get(pids.get.remote()), timeout=30)
    return shoal.get(pids.get.remote())[0]


def test_a_task_waiting_for_its_argument_fails_with_its_dependents(connected):
    signal = SignalActor.remote()
    waiting = identity.remote(signal.wait.remote())
    dependent = identity.remote(waiting)
    assert shoal.wait([waiting], timeout=0.2)[0] == []
    shoal.cancel(waiting)
    with pytest.raises(TaskCancelledError, match="cancelled before it ran"):
        shoal.get(waiting, timeout=10)
    with pytest.raises(TaskCancelledError):
        shoal.get(dependent, timeout=10)
    shoal.get(signal.send.remote())


@pytest.mark.parametrize("force", [False, True])
def test_a_running_task_is_stopped(connected, force):
    pids = Pids.remote()
    ref = spin.remote(pids)
    pid = _running_pid(pids)
    start = time.monotonic()
    shoal.cancel(ref, force=force)
    with pytest.raises(TaskCancelledError):
        shoal.get(ref, timeout=20)
    assert time.monotonic() - start < 10
    if force:
        wait_for_pid_to_exit(pid)  # its worker was ended
    else:
        os.kill(pid, 0)  # its worker lives on
        assert shoal.get(identity.remote(7), timeout=20) == 7
    shoal.kill(pids)


def test_a_task_blocked_in_get_is_interrupted(connected):
    signal = SignalActor.remote()
    pids = Pids.remote()
    ref = blocked_in_get.remote(pids, signal)
    _running_pid(pids)
    shoal.cancel(ref)
    with pytest.raises(TaskCancelledError, match="while it ran"):
        shoal.get(ref, timeout=10)
    shoal.get(signal.send.remote())
    shoal.kill(pids)


def test_a_finished_task_keeps_its_result(connected):
    ref = identity.remote(5)
    assert shoal.get(ref) == 5
    shoal.cancel(ref)
    assert shoal.get(ref) == 5
    with pytest.raises(TypeError, match="ObjectRef"):
        shoal.cancel("not a ref")


@shoal.remote
def submits(pids, signal, depth):
    """Submits a chain `depth` tasks deep below it, then, as each of them,
    tells its pid and waits for `signal`; tells when it is interrupted."""
    below = submits.remote(pids, signal, depth - 1) if depth > 0 else None
    shoal.get(pids.add.remote(os.getpid()))
    try:
        return shoal.get(signal.wait.remote()), below
    except KeyboardInterrupt:
        shoal.get(pids.add.remote("stopped"))
        raise


def _reported(pids, stopped=False):
    """The pids the tasks told, or with `stopped`, their "stopped"s."""
    return [x for x in shoal.get(pids.get.remote())
            if (x == "stopped") == stopped]


@pytest.mark.parametrize("force", [False, True])
def test_a_recursive_cancel_stops_what_the_task_submitted(connected, force):
    signal = SignalActor.remote()
    pids = Pids.remote()
    ref = submits.remote(pids, signal, 2)  # three tasks, one CPU each
    wait_for_condition(lambda: len(_reported(pids)) == 3, timeout=30)
    workers = _reported(pids)
    shoal.cancel(ref, force=force)  # recursive, as Ray's default
    with pytest.raises(TaskCancelledError):
        shoal.get(ref, timeout=20)
    if force:
        for pid in workers:  # each worker was ended, the deepest included
            wait_for_pid_to_exit(pid)
    else:
        # Each task was interrupted (each worker lives on).
        wait_for_condition(lambda: len(_reported(pids, stopped=True)) == 3,
                           timeout=20)
    shoal.get(signal.send.remote())
    shoal.kill(pids)


def test_a_cancel_that_is_not_recursive_leaves_the_children_running(connected):
    signal = SignalActor.remote()
    pids = Pids.remote()
    ref = submits.remote(pids, signal, 1)
    wait_for_condition(lambda: len(_reported(pids)) == 2, timeout=30)
    shoal.cancel(ref, recursive=False)
    with pytest.raises(TaskCancelledError):
        shoal.get(ref, timeout=20)
    wait_for_condition(lambda: _reported(pids, stopped=True), timeout=20)
    time.sleep(1)  # a child cancelled with it would have stopped by now
    assert len(_reported(pids, stopped=True)) == 1
    shoal.get(signal.send.remote())  # the child ends on its own
    shoal.kill(pids)
