"""Helpers for testing programs that use Shoal, with the names Ray's test
helpers have (``ray._private.test_utils``, ``ray._common.test_utils``):

- ``SignalActor``: an actor that tasks wait on until the test sends it;
- ``Semaphore``: an actor of N permits;
- ``wait_for_condition``: polls a predicate until it holds or time runs out;
- ``wait_for_pid_to_exit``;
- ``run_string_as_driver``: runs a script as a driver of its own;
- ``placement_group_assert_no_leak``: removes groups and checks that every
  resource they held came back;
- ``init_error_pubsub`` and ``get_error_message``: the driver's error
  stream (task failures, worker deaths) as dicts with Ray's keys;
- ``kill_actor_and_wait_for_failure``, ``convert_actor_state`` and
  ``dicts_equal``.
"""

import os
import subprocess
import sys
import threading
import time

import shoal
from shoal import _errors

__all__ = [
    "Semaphore",
    "SignalActor",
    "convert_actor_state",
    "dicts_equal",
    "generate_system_config_map",
    "get_error_message",
    "get_other_nodes",
    "init_error_pubsub",
    "kill_actor_and_wait_for_failure",
    "placement_group_assert_no_leak",
    "run_string_as_driver",
    "run_string_as_driver_nonblocking",
    "wait_for_condition",
    "wait_for_pid_to_exit",
]


@shoal.remote(num_cpus=0, max_concurrency=64)
class SignalActor:
    """Calls to ``wait`` block until ``send`` (then every one returns)."""

    def __init__(self):
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._waiters = 0

    def send(self, clear=False):
        self._ready.set()
        if clear:
            self._ready.clear()

    def wait(self, should_wait=True):
        if not should_wait:
            return
        with self._lock:
            self._waiters += 1
        try:
            self._ready.wait()
        finally:
            with self._lock:
                self._waiters -= 1

    def cur_num_waiters(self):
        with self._lock:
            return self._waiters


@shoal.remote(num_cpus=0, max_concurrency=64)
class Semaphore:
    """``acquire`` blocks while all ``value`` permits are held."""

    def __init__(self, value=1):
        self._semaphore = threading.Semaphore(value)
        self._lock = threading.Lock()
        self._value = value

    def acquire(self):
        self._semaphore.acquire()
        with self._lock:
            self._value -= 1

    def release(self):
        with self._lock:
            self._value += 1
        self._semaphore.release()

    def locked(self):
        with self._lock:
            return self._value <= 0


def init_error_pubsub():
    """A subscription to this driver's error stream: the errors of its job
    published from now on (``get_error_message`` reads them; ``close()``
    ends it)."""
    shoal._require_init()
    return _errors.stream().subscribe()


def get_error_message(subscriber, num, error_type=None, timeout=20):
    """Up to ``num`` errors from ``subscriber`` (of ``error_type`` when
    given: "task", "worker_died"), waiting up to ``timeout`` seconds; each
    a dict with "type", "error_message", "job_id" and "timestamp"."""
    return subscriber.get(num, error_type=error_type, timeout=timeout)


def wait_for_condition(condition_predictor, timeout=10, retry_interval_ms=100,
                       raise_exceptions=False, **kwargs):
    """Calls ``condition_predictor(**kwargs)`` until it returns true; raises
    RuntimeError after ``timeout`` seconds, naming the last exception it
    raised (which is raised at once with ``raise_exceptions``)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            if condition_predictor(**kwargs):
                return
        except Exception as e:  # noqa: BLE001 - reported below
            if raise_exceptions:
                raise
            last = e
        time.sleep(retry_interval_ms / 1000.0)
    message = "The condition wasn't met before the timeout expired."
    if last is not None:
        message += f" Last exception: {last!r}"
    raise RuntimeError(message)


# An actor's states, in the order of the numbers Ray's tests give them
# (gcs ActorTableData).
_ACTOR_STATES = ("DEPENDENCIES_UNREADY", "PENDING_CREATION", "ALIVE",
                 "RESTARTING", "DEAD")


def convert_actor_state(state):
    """The name an actor's state has in ``shoal.state.actors()`` ("ALIVE"),
    for a state given by its number or its name."""
    return state if isinstance(state, str) else _ACTOR_STATES[state]


def get_other_nodes(cluster, exclude_head=False):
    """The nodes of ``cluster`` (a cluster_utils.Cluster) other than the one
    this process joined through, without the head if ``exclude_head``."""
    mine = shoal.get_runtime_context().get_node_id()
    return [node for node in cluster.list_all_nodes()
            if node.node_id != mine and not (exclude_head and node.head)]


def kill_actor_and_wait_for_failure(actor, timeout=10, retry_interval_ms=100):
    """Kills ``actor`` (letting it restart) and waits until the head has
    it dead or restarted; RuntimeError after ``timeout`` seconds."""
    from shoal import state
    actor_id = actor._actor_id
    restarts = state.actors(actor_id).get("NumRestarts", 0)
    shoal.kill(actor, no_restart=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = state.actors(actor_id)
        if info.get("State") == "DEAD" or \
                info.get("NumRestarts", 0) > restarts:
            return
        time.sleep(retry_interval_ms / 1000)
    raise RuntimeError(f"actor {actor_id} was not dead or restarted "
                       f"{timeout} s after it was killed")


def dicts_equal(dict1, dict2, abs_tol=1e-4):
    """Whether two dicts of numbers hold the same keys and values (within
    ``abs_tol``)."""
    if dict1.keys() != dict2.keys():
        return False
    return all(abs(dict1[k] - dict2[k]) <= abs_tol for k in dict1)


def wait_for_pid_to_exit(pid, timeout=20):
    """Waits for process ``pid`` to end; TimeoutError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"process {pid} did not exit in {timeout} s")


def _driver_env(env):
    """The environment of a driver started from this one: it joins the
    cluster this process is part of (or finds its own by the usual rule)."""
    env = dict(os.environ if env is None else env)
    path = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    if env.get("PYTHONPATH"):
        path.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(path)
    return env


def run_string_as_driver(driver_script, env=None, encode="utf-8"):
    """Runs ``driver_script`` in a new Python process; its output (stdout
    and stderr). Raises subprocess.CalledProcessError when it fails."""
    proc = subprocess.run([sys.executable, "-"], input=driver_script.encode(
        encode), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env=_driver_env(env), timeout=300)
    output = proc.stdout.decode(encode, errors="replace")
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, proc.args,
                                            output)
    return output


def run_string_as_driver_nonblocking(driver_script, env=None):
    """Starts ``driver_script`` in a new Python process; its Popen."""
    proc = subprocess.Popen([sys.executable, "-"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=_driver_env(env))
    proc.stdin.write(driver_script.encode("utf-8"))
    proc.stdin.close()
    return proc


def generate_system_config_map(**kwargs):
    """Ray's internal settings for ``init``: Shoal has none of them, so
    ``init`` takes and ignores ``_system_config``."""
    return {"_system_config": kwargs}


def placement_group_assert_no_leak(pgs_created, timeout=30):
    """Removes the groups, then waits until every resource is free again."""
    from shoal.util import remove_placement_group
    for pg in pgs_created:
        remove_placement_group(pg)

    def all_free():
        total = shoal.cluster_resources()
        free = shoal.available_resources()
        return all(abs(free.get(k, 0) - v) < 1e-6 for k, v in total.items()
                   if not k.startswith("node:") and "_group_" not in k)

    wait_for_condition(all_free, timeout=timeout)
