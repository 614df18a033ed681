"""Actors from Python on a real cluster: calls in order, named lookup from
another driver, namespaces, detached actors that outlive their driver,
restarts after a crash, concurrency, async actors, kill, exit_actor,
__ray_terminate__, the end of an actor whose handles are gone, and
errors."""

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


def test_an_attribute_does_not_hide_a_method_of_the_same_name(connected):
    # As in Ray, calls find the method on the class.
    @shoal.remote
    class Flag:
        def __init__(self):
            self.done = False

        def done(self):  # noqa: F811 - the name the attribute shares
            return "the method"

        @staticmethod
        def helper():
            return "static"

    flag = Flag.remote()
    assert shoal.get(flag.done.remote()) == "the method"
    assert shoal.get(flag.helper.remote()) == "static"


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
    tally = Counter.options(name="tally").remote(5)  # noqa: F841 (kept)
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
        shoal.init(namespace="shared")

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
    with pytest.raises(ValueError, match="no live actor"):
        shoal.get_actor("store")  # this job's namespace is its own
    store = shoal.get_actor("store", namespace="shared")
    assert shoal.get(store.get.remote("a")) == 41
    shoal.kill(store)


def test_a_non_detached_actor_ends_with_its_driver(connected):
    made = _driver("""
        import shoal
        shoal.init(namespace="shared")

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
            shoal.get_actor("lonely", namespace="shared")
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


def _wait_exit(pid, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    pytest.fail(f"process {pid} did not exit in {timeout} s")


def test_async_actor_runs_calls_at_once(connected):
    import asyncio

    @shoal.remote
    class Waiter:
        LIMIT = 7

        async def wait(self, seconds):
            asyncio.get_running_loop()  # runs on the actor's loop
            await asyncio.sleep(seconds)
            return Waiter.LIMIT  # class attributes read through the name

        def plain(self):
            return "sync"

    waiter = Waiter.remote()
    assert shoal.get(waiter.__ray_ready__.remote()) is True
    start = time.time()
    assert shoal.get([waiter.wait.remote(1) for _ in range(200)]) == [7] * 200
    assert time.time() - start < 10  # 200 s if they ran one at a time
    assert shoal.get(waiter.plain.remote()) == "sync"
    assert dir(waiter) == ["__init__", "__ray_terminate__", "plain", "wait"]


def test_exit_actor_ends_it_for_good(connected, tmp_path):
    marker = tmp_path / "shutdown"

    @shoal.remote
    class Quitter:
        def pid(self):
            return os.getpid()

        def quit(self):
            shoal.actor.exit_actor()
            return "not reached"

        def __ray_shutdown__(self):
            marker.write_text("down")

    quitter = Quitter.options(max_restarts=2).remote()
    pid = shoal.get(quitter.pid.remote())
    with pytest.raises(shoal.ActorDiedError, match="exit_actor"):
        shoal.get(quitter.quit.remote())
    _wait_exit(pid)
    assert marker.read_text() == "down"
    with pytest.raises(shoal.ActorDiedError, match="exited"):
        shoal.get(quitter.pid.remote(), timeout=30)  # not restarted
    with pytest.raises(TypeError, match="non-actor worker"):
        shoal.actor.exit_actor()


def test_async_exit_actor_raises_asyncio_actor_exit(connected):
    @shoal.remote
    class AsyncQuitter:
        async def quit(self):
            try:
                shoal.actor.exit_actor()
            except shoal.exceptions.AsyncioActorExit:
                pass  # the actor ends all the same
            return "caught"

    quitter = AsyncQuitter.remote()
    with pytest.raises(shoal.ActorDiedError):
        shoal.get(quitter.quit.remote())


def test_terminate_runs_pending_calls_first(connected):
    counter = Counter.remote()
    pid = shoal.get(counter.pid.remote())
    refs = [counter.add.remote(1) for _ in range(20)]
    counter.__ray_terminate__.remote()
    assert shoal.get(refs) == list(range(1, 21))
    _wait_exit(pid)


def test_calls_running_when_the_last_handle_goes_keep_their_results(
        connected):
    import asyncio

    @shoal.remote
    class Slow:
        async def echo(self, x):
            await asyncio.sleep(0.5)
            return x

        async def await_inner(self, refs):
            return await refs[0]  # a ref inside the arguments

    # The handle is gone as soon as the call is made; the actor ends after.
    assert shoal.get(Slow.remote().echo.remote(7)) == 7
    assert shoal.get(Slow.remote().await_inner.remote([shoal.put(3)])) == 3


def test_an_actor_ends_when_its_last_handle_is_gone(connected):
    counter = Counter.remote()
    copy = counter
    pid = shoal.get(counter.pid.remote())
    del counter
    assert shoal.get(copy.add.remote(1)) == 1  # a handle is left
    del copy
    _wait_exit(pid)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_an_actor_passed_to_a_task_ends_once_the_task_is_done(connected):
    from shoal.test_utils import SignalActor

    @shoal.remote
    def use(counter, signal_actor):
        shoal.get(signal_actor.wait.remote())
        return shoal.get(counter.add.remote(5))

    signal_actor = SignalActor.remote()
    counter = Counter.remote()
    pid = shoal.get(counter.pid.remote())
    result = use.remote(counter, signal_actor)
    del counter  # the task still holds a handle
    time.sleep(1)
    assert _alive(pid)
    signal_actor.send.remote()
    assert shoal.get(result) == 5
    _wait_exit(pid)


def test_an_actor_passed_to_thousands_of_tasks_ends_after_the_last(
        connected):
    # More calls than the owner looks at per poll: it still sees them all.
    @shoal.remote(num_cpus=0)
    def touch(counter, i):
        return i

    counter = Counter.remote()
    pid = shoal.get(counter.pid.remote())
    refs = [touch.remote(counter, i) for i in range(2500)]
    del counter
    assert shoal.get(refs) == list(range(2500))
    _wait_exit(pid)


def test_an_actor_kept_by_whoever_it_was_passed_to_lives_on(connected):
    @shoal.remote
    class Keeper:
        def __init__(self, counter=None):
            self.counter = counter

        def keep(self, counter):
            self.counter = counter

        def use(self):
            return shoal.get(self.counter.add.remote(1))

    @shoal.remote
    def pass_on(counter):
        # Passed on, not waited for: the task outlives this one.
        return [use_later.remote(counter)]

    @shoal.remote
    def use_later(counter):
        time.sleep(1)
        return shoal.get(counter.add.remote(10))

    kept_by_method, kept_by_constructor, passed = (
        Counter.remote(), Counter.remote(), Counter.remote())
    pids = shoal.get([c.pid.remote() for c in
                      (kept_by_method, kept_by_constructor, passed)])
    keeper = Keeper.remote()
    shoal.get(keeper.keep.remote(kept_by_method))
    other = Keeper.remote(kept_by_constructor)
    inner = shoal.get(pass_on.remote(passed))[0]
    del kept_by_method, kept_by_constructor, passed
    time.sleep(1)
    assert shoal.get(keeper.use.remote()) == 1
    assert shoal.get(other.use.remote()) == 1
    assert shoal.get(inner) == 10
    assert all(_alive(pid) for pid in pids)


def test_an_actor_made_with_a_handle_it_drops_lets_that_one_end(connected):
    @shoal.remote
    class Glance:
        def __init__(self, counter):
            self.seen = shoal.get(counter.add.remote(1))

        def seen_value(self):
            return self.seen

    counter = Counter.remote()
    pid = shoal.get(counter.pid.remote())
    glance = Glance.remote(counter)
    del counter
    assert shoal.get(glance.seen_value.remote()) == 1
    _wait_exit(pid)


def test_a_kill_before_the_actor_runs_takes_one_of_its_restarts(connected):
    # As in Ray: the kill restarts it (its placement goes on as that
    # restart), so its one restart is used and the next kill ends it.
    counter = Counter.options(max_restarts=1).remote()
    shoal.kill(counter, no_restart=False)
    assert shoal.get(counter.add.remote(1)) == 1
    shoal.kill(counter, no_restart=False)
    with pytest.raises(shoal.exceptions.ActorDiedError,
                       match="restarts are used up"):
        shoal.get(counter.add.remote(1))


def test_namespaces_keep_names_apart(connected):
    a = Counter.options(name="same", namespace="one").remote(1)
    b = Counter.options(name="same", namespace="two").remote(2)
    assert shoal.get(shoal.get_actor("same", namespace="one").add.remote(0)) \
        == 1
    assert shoal.get(shoal.get_actor("same", namespace="two").add.remote(0)) \
        == 2
    with pytest.raises(ValueError):
        shoal.get_actor("same")  # not in this job's namespace
    again = Counter.options(name="same", namespace="one",
                            get_if_exists=True).remote(99)
    assert again == a
    del b


def test_an_unnamed_detached_actor(connected):
    lasting = Counter.options(lifetime="detached").remote(3)
    assert shoal.get(lasting.add.remote(1)) == 4
    shoal.kill(lasting)


def test_actor_classes_cannot_be_made_or_inherited_directly():
    with pytest.raises(TypeError, match="cannot be instantiated directly"):
        Counter()
    with pytest.raises(TypeError, match="Inheriting from actor classes"):
        class Derived(Counter):  # noqa: F841
            pass
    assert {"add", "history", "options", "remote"} <= set(dir(Counter))


@shoal.remote
class _Holder:
    def __init__(self, value):
        self._value = value

    def value(self):
        return self._value


@shoal.remote
def _call_holder(holder):
    return shoal.get(holder.value.remote())


@shoal.remote
def _raise_value_error():
    raise ValueError("no value for the constructor")


def test_an_actor_whose_argument_is_pending_is_created_at_once(connected):
    # As in Ray, .remote() does not wait for a constructor's pending
    # argument: here it depends on what this thread does next. The actor's
    # handle works at once, here and passed to a task; its calls run once
    # the argument is ready.
    from shoal.test_utils import SignalActor
    signal_actor = SignalActor.remote()
    ready = signal_actor.wait.remote()
    holder = _Holder.remote(shoal.put("made"))  # a ready one, for contrast
    waiting = _Holder.options(name="waits-for-its-argument").remote(ready)
    through_task = _call_holder.remote(waiting)
    direct = waiting.value.remote()
    assert shoal.get(holder.value.remote()) == "made"
    assert shoal.wait([direct, through_task], num_returns=2,
                      timeout=0.5)[0] == []
    # Its name is taken from the start.
    with pytest.raises(ValueError, match="waits-for-its-argument"):
        _Holder.options(name="waits-for-its-argument").remote(1)
    shoal.get(signal_actor.send.remote())
    assert shoal.get(direct) is None  # what signal.wait returned
    assert shoal.get(through_task) is None


def test_an_argument_that_fails_kills_the_actor_waiting_for_it(connected):
    holder = _Holder.remote(_raise_value_error.remote())
    with pytest.raises(shoal.exceptions.ActorDiedError,
                       match="no value for the constructor"):
        shoal.get(holder.value.remote(), timeout=60)
