"""Refs inside task results are lent, as Ray's are: a task that returns a
ref (or a value holding refs) returns at once, without waiting for the
object; the caller borrows the ref from the process that owns it (the
worker that submitted its task) and reads it through that owner: get, wait,
passing it to another task, cancel, and the owner's end."""

import os
import signal
import time

import numpy
import pytest

import shoal
from shoal.exceptions import (GetTimeoutError, ObjectLostError,
                              TaskCancelledError)
from shoal.test_utils import SignalActor, wait_for_pid_to_exit

from conftest import driver_of, running_cluster


@shoal.remote
def wait_for(signal_ref):
    return shoal.get(signal_ref[0])


@shoal.remote
def lend_waiting(signal_actor):
    """Returns a ref to a task still waiting for `signal_actor`, and its
    pid."""
    return os.getpid(), [wait_for.remote([signal_actor.wait.remote()])]


def test_a_returned_ref_is_not_waited_for(connected):
    signal_actor = SignalActor.remote()
    outer = lend_waiting.remote(signal_actor)
    _, [inner] = shoal.get(outer, timeout=30)  # returns while inner waits
    with pytest.raises(GetTimeoutError):
        shoal.get(inner, timeout=0.5)
    assert shoal.wait([inner], timeout=0.2)[0] == []
    shoal.get(signal_actor.send.remote())
    assert shoal.get(inner, timeout=30) is None
    assert shoal.wait([inner], timeout=5)[0] == [inner]


def test_an_actor_returns_a_call_to_itself(connected):
    @shoal.remote
    class Echo:
        def echo(self, s):
            me = shoal.get_runtime_context().current_actor
            return me.echo2.remote(s)

        def echo2(self, s):
            return s

    e = Echo.remote()
    assert shoal.get(shoal.get(e.echo.remote("hello"), timeout=30),
                     timeout=30) == "hello"


def test_lent_values_large_and_failed(connected):
    @shoal.remote
    def big():
        return numpy.arange(1 << 20, dtype=numpy.int64)

    @shoal.remote
    def fail():
        raise ZeroDivisionError("inner failed")

    @shoal.remote
    def lend():
        return {"big": big.remote(), "failed": fail.remote(),
                "put": shoal.put(numpy.ones(300_000))}

    lent = shoal.get(lend.remote(), timeout=30)
    assert numpy.array_equal(shoal.get(lent["big"], timeout=30),
                             numpy.arange(1 << 20, dtype=numpy.int64))
    assert shoal.get(lent["put"]).sum() == 300_000
    with pytest.raises(ZeroDivisionError, match="inner failed"):
        shoal.get(lent["failed"], timeout=30)


def test_a_borrowed_ref_passes_on_to_other_tasks(connected):
    @shoal.remote
    def inner(i):
        return i * 10

    @shoal.remote
    def outer(n):
        return [inner.remote(i) for i in range(n)]

    @shoal.remote
    def add(a, b):
        return a + b

    @shoal.remote
    def total(refs):
        return sum(shoal.get(refs))

    refs = shoal.get(outer.remote(3), timeout=30)
    # As a top-level argument (its value) and inside one (the ref).
    assert shoal.get(add.remote(refs[1], refs[2]), timeout=30) == 30
    assert shoal.get(total.remote(refs), timeout=30) == 30
    # A task returns a ref it borrowed: its owner lends it again.
    @shoal.remote
    def again(refs):
        return refs[2]

    assert shoal.get(shoal.get(again.remote(refs), timeout=30)) == 20


def test_a_worker_that_ends_after_the_call_carries_values(connected):
    @shoal.remote
    def inner():
        time.sleep(0.1)
        return 7

    @shoal.remote(max_calls=1, max_retries=0)
    def last():
        return os.getpid(), [inner.remote()]

    pid, [ref] = shoal.get(last.remote(), timeout=30)
    wait_for_pid_to_exit(pid, timeout=30)  # it ended, as max_calls says
    assert shoal.get(ref, timeout=30) == 7


def test_cancel_reaches_the_owner_of_a_borrowed_ref(connected):
    signal_actor = SignalActor.remote()
    _, [inner] = shoal.get(lend_waiting.remote(signal_actor),
                           timeout=30)
    with pytest.raises(GetTimeoutError):
        shoal.get(inner, timeout=0.5)
    shoal.cancel(inner)
    with pytest.raises(TaskCancelledError):
        shoal.get(inner, timeout=30)


def test_a_borrowed_ref_whose_owner_ends_is_lost(connected):
    signal_actor = SignalActor.remote()
    owner_pid, [inner] = shoal.get(
        lend_waiting.remote(signal_actor), timeout=30)
    os.kill(owner_pid, signal.SIGKILL)
    with pytest.raises(ObjectLostError, match="owner"):
        shoal.get(inner, timeout=30)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has ended too.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_an_idle_owner_is_kept_while_its_objects_are_borrowed(monkeypatch):
    @shoal.remote
    def inner():
        return os.getpid()

    @shoal.remote
    def lend():
        ref = inner.remote()
        shoal.wait([ref])
        return os.getpid(), [ref]

    # Agents that end a worker idle for 0.3 s.
    idle = (["--num-cpus", "2", "--worker-idle-timeout-ms", "300"], None)
    with running_cluster("shoal-borrow-", [idle, idle]) as cluster:
        with driver_of(cluster, monkeypatch):
            owner, [ref] = shoal.get(lend.remote(), timeout=60)
            other = shoal.get(ref, timeout=30)
            assert owner != other
            # The worker that ran `inner` lends nothing: it ends once idle.
            # The owner of `ref` lives on while the driver borrows it.
            wait_for_pid_to_exit(other, timeout=30)
            assert _alive(owner)
            # Released: the owner is idle for good, and ends too.
            del ref
            wait_for_pid_to_exit(owner, timeout=30)
