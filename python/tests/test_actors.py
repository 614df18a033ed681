"""Actors from Python on a real cluster: calls in order, named lookup from
another driver, detached actors that outlive their driver, restarts after
a crash, concurrency, kill, and errors."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import shoal


@shoal.remote
class Counter:
    def __init__(self, start=0):
        self.n = start
        self.log = []

    def add(self, x):
        self.n += x
        self.log.append(x)
        return self.n

    def history(self):
        return self.log

    def pid(self):
        return os.getpid()

    def fail(self):
        raise KeyError("no such thing")


def test_calls_run_in_order(connected):
    counter = Counter.remote(100)
    refs = [counter.add.remote(i) for i in range(500)]
    assert shoal.get(refs[-1]) == 100 + sum(range(500))
    assert shoal.get(counter.history.remote()) == list(range(500))
    assert shoal.get(counter.pid.remote()) != os.getpid()


def test_a_method_error_keeps_the_actor(connected):
    counter = Counter.remote()
    with pytest.raises(KeyError, match="no such thing"):
        shoal.get(counter.fail.remote())
    assert shoal.get(counter.add.remote(2)) == 2
    with pytest.raises(AttributeError, match="no method 'missing'"):
        counter.missing.remote()


def test_handles_travel_to_tasks(connected):
    counter = Counter.remote()

    @shoal.remote
    def bump(handle, x):
        return shoal.get(handle.add.remote(x))

    shoal.get([bump.remote(counter, 1) for _ in range(5)])
    assert shoal.get(counter.add.remote(0)) == 5


def test_named_lookup_and_kill(connected):
    Counter.options(name="tally").remote(5)
    found = shoal.get_actor("tally")
    assert shoal.get(found.add.remote(1)) == 6
    with pytest.raises(ValueError, match="no live actor"):
        shoal.get_actor("nobody")
    shoal.kill(found)
    # The kill is asynchronous, as Ray's is: a call made at once may still
    # be answered; soon every call fails.
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            shoal.get(found.add.remote(1), timeout=30)
        except shoal.ActorDiedError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("calls still succeed 30 s after the kill")
    with pytest.raises(ValueError, match="no live actor"):
        shoal.get_actor("tally")


def _driver(code, cluster):
    env = dict(os.environ, SHOAL_TEMP_DIR=cluster.head_dir)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                          env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_detached_actor_outlives_its_driver(connected):
    made = _driver("""
        import shoal
        shoal.init()

        @shoal.remote
        class Store:
            def __init__(self):
                self.items = {}
            def set(self, k, v):
                self.items[k] = v
            def get(self, k):
                return self.items.get(k)

        s = Store.options(name="store", lifetime="detached").remote()
        shoal.get(s.set.remote("a", 41))
        print("made")
    """, connected)
    assert made.returncode == 0, made.stderr
    store = shoal.get_actor("store")
    assert shoal.get(store.get.remote("a")) == 41
    shoal.kill(store)


def test_a_non_detached_actor_ends_with_its_driver(connected):
    made = _driver("""
        import shoal
        shoal.init()

        @shoal.remote
        class Lonely:
            def ping(self):
                return 1

        a = Lonely.options(name="lonely").remote()
        shoal.get(a.ping.remote())
    """, connected)
    assert made.returncode == 0, made.stderr
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            shoal.get_actor("lonely")
        except ValueError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the actor outlived its driver")


def test_restart_after_a_crash(connected):
    counter = Counter.options(max_restarts=1, max_task_retries=1).remote(10)
    first = shoal.get(counter.pid.remote())
    assert shoal.get(counter.add.remote(1)) == 11
    os.kill(first, signal.SIGKILL)
    # The call is retried on the restarted actor, made again from its
    # constructor's arguments.
    assert shoal.get(counter.add.remote(1), timeout=60) == 11
    second = shoal.get(counter.pid.remote())
    assert second != first
    os.kill(second, signal.SIGKILL)  # no restart left
    with pytest.raises(shoal.ActorDiedError):
        shoal.get(counter.add.remote(1), timeout=60)


def test_concurrent_calls(connected):
    @shoal.remote
    class Sleeper:
        def nap(self, seconds):
            time.sleep(seconds)
            return 1

    sleeper = Sleeper.options(max_concurrency=4).remote()
    shoal.get(sleeper.nap.remote(0))
    start = time.time()
    assert sum(shoal.get([sleeper.nap.remote(0.5) for _ in range(4)])) == 4
    assert time.time() - start < 1.5  # not 2 s: the calls overlapped


def test_constructor_error_and_impossible_actor(connected):
    @shoal.remote
    class Broken:
        def __init__(self):
            raise RuntimeError("cannot start")

        def ping(self):
            return 1

    broken = Broken.remote()
    with pytest.raises(shoal.ActorDiedError, match="cannot start"):
        shoal.get(broken.ping.remote(), timeout=60)
    huge = Counter.options(resources={"TPU": 64}).remote()
    with pytest.raises((shoal.InfeasibleError, shoal.ActorDiedError)):
        shoal.get(huge.add.remote(1), timeout=60)
