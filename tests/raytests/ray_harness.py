"""A pytest plugin that runs Ray's own test files against Shoal.

    pytest -p ray_harness --forked ../shared/raytests/test_basic.py

It changes plumbing only, never a test:

- ``import ray`` (and ``ray.util``, ``ray.exceptions``, ``ray.cluster_utils``
  and any ``ray.X`` that ``shoal.X`` provides) gives Shoal's module itself;
- Ray's test helpers map onto Shoal's (``ray._private.test_utils`` and
  ``ray._common.test_utils`` onto ``shoal.test_utils``);
- the few Ray-internal names the files import at the top (constants, the
  Ray Client switches) are given plumbing values here, so that a file whose
  tests need none of them is collected; a test that uses Ray's internals
  (``ray._private.worker``, ``ray._raylet``) fails on them and is counted;
- the fixtures of Ray's ``conftest.py`` (``ray_start_regular``,
  ``shutdown_only``, ``ray_start_cluster``...) start real Shoal clusters:
  ``shoal.init`` and ``shoal.cluster_utils.Cluster`` (``shoal start``).
"""

import contextlib
import importlib
import importlib.abc
import importlib.util
import logging
import os
import signal
import sys
import tempfile
import threading
import types

import pytest

import shoal
import shoal.test_utils
from shoal.cluster_utils import Cluster

# Ray's fixtures start every node with one CPU and a small store.
_DEFAULT_INIT = {"num_cpus": 1, "object_store_memory": 150 * 1024 * 1024,
                 "namespace": ""}


# ---------------------------------------------------------------------------
# Ray-internal names the files import at their top.


def _module(name, **attributes):
    module = types.ModuleType(name)
    module.__path__ = []  # a package: its submodules may be imported
    module.__dict__.update(attributes)
    return module


def _not_in_shoal(what):
    def missing(*args, **kwargs):
        raise NotImplementedError(f"{what} is Ray-internal; Shoal has none")
    return missing


_CONSTANTS = dict(
    KV_NAMESPACE_FUNCTION_TABLE=b"fun",
    TASK_PUSH_ERROR="task",
    WORKER_CRASH_PUSH_ERROR="worker_crash",
    WORKER_DIED_PUSH_ERROR="worker_died",
    PUT_RECONSTRUCTION_PUSH_ERROR="put_reconstruction",
    PICKLING_LARGE_OBJECT_PUSH_ERROR="pickling_large_object",
    EXCESS_QUEUEING_WARNING="excess_queueing_warning",
    DASHBOARD_AGENT_DIED_ERROR="dashboard_agent_died",
    FUNCTION_SIZE_WARN_THRESHOLD=10**7,
)


def _create_remote_signal_actor(ray):
    return shoal.test_utils.SignalActor


# Modules the files import that neither Shoal nor Ray's public API has.
_SHIMS = {
    "ray._private": lambda: _module("ray._private"),
    "ray._common": lambda: _module("ray._common"),
    "ray.tests": lambda: _module("ray.tests"),
    "ray._private.ray_constants": lambda: _module(
        "ray._private.ray_constants", **_CONSTANTS),
    "ray.ray_constants": lambda: _module("ray.ray_constants", **_CONSTANTS),
    "ray._private.test_utils": lambda: _module(
        "ray._private.test_utils",
        **{k: getattr(shoal.test_utils, k) for k in shoal.test_utils.__all__},
        client_test_enabled=lambda: False),
    "ray._common.test_utils": lambda: shoal.test_utils,
    "ray.tests.client_test_utils": lambda: _module(
        "ray.tests.client_test_utils",
        create_remote_signal_actor=_create_remote_signal_actor),
    # Ray Client (ray://) is not in Shoal: its switches say so.
    "ray.util.client": lambda: _module("ray.util.client"),
    "ray.util.client.ray_client_helpers": lambda: _module(
        "ray.util.client.ray_client_helpers",
        connect_to_client_or_not=lambda *a, **k: contextlib.nullcontext()),
    "ray._private.utils": lambda: _module(
        "ray._private.utils",
        publish_error_to_driver=_not_in_shoal("publish_error_to_driver")),
    "ray.cloudpickle": lambda: importlib.import_module("cloudpickle"),
}


class _RayAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``ray.X`` is ``shoal.X`` (the same module object), else a shim."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "ray" and not fullname.startswith("ray."):
            return None
        if fullname in _SHIMS:
            module = _SHIMS[fullname]()
        else:
            try:
                module = importlib.import_module("shoal" + fullname[3:])
            except ImportError:
                return None
        spec = importlib.util.spec_from_loader(fullname, self)
        spec._shoal_module = module
        return spec

    def create_module(self, spec):
        module = spec._shoal_module
        self._kept_spec = getattr(module, "__spec__", None)
        return module

    def exec_module(self, module):
        # The import machinery set the alias's spec on Shoal's module: give
        # it its own back.
        if self._kept_spec is not None:
            module.__spec__ = self._kept_spec


sys.meta_path.insert(0, _RayAlias())
# `from ray import ray_constants` looks the name up on the package first.
shoal.ray_constants = _SHIMS["ray.ray_constants"]()


# ---------------------------------------------------------------------------
# Ray's fixtures, over Shoal.


@pytest.fixture(autouse=True)
def _own_temp_dir(monkeypatch):
    """Every test finds only the clusters it starts: a temp dir of its own,
    and no address or token from the environment."""
    with tempfile.TemporaryDirectory(prefix="shoal-raytest-") as temp_dir:
        monkeypatch.setenv("SHOAL_TEMP_DIR", temp_dir)
        monkeypatch.delenv("SHOAL_ADDRESS", raising=False)
        monkeypatch.delenv("SHOAL_TOKEN", raising=False)
        yield temp_dir
        if shoal.is_initialized():
            shoal.shutdown()
        # A test's own Cluster(), which Ray stops at exit: a forked test
        # process ends without running atexit.
        for cluster in list(shoal.cluster_utils.live_clusters):
            cluster.shutdown()


@contextlib.contextmanager
def _ray_start(**kwargs):
    init_kwargs = {**_DEFAULT_INIT, **kwargs}
    info = shoal.init(**init_kwargs)
    try:
        yield info
    finally:
        shoal.shutdown()


def _param(request):
    return dict(getattr(request, "param", {}) or {})


@pytest.fixture
def ray_start_regular(request):
    with _ray_start(**_param(request)) as info:
        yield info


# Each test runs in a process of its own (--forked), so the "shared"
# fixtures start one cluster per test, as the unshared ones do.
@pytest.fixture
def ray_start_regular_shared(request):
    with _ray_start(**_param(request)) as info:
        yield info


@pytest.fixture(params=[{"local_mode": True}, {"local_mode": False}])
def ray_start_shared_local_modes(request):
    with _ray_start(**_param(request)) as info:
        yield info


@pytest.fixture
def ray_start_2_cpus(request):
    with _ray_start(**{**_param(request), "num_cpus": 2}) as info:
        yield info


@pytest.fixture
def ray_start_10_cpus(request):
    with _ray_start(**{**_param(request), "num_cpus": 10}) as info:
        yield info


@pytest.fixture
def ray_start_object_store_memory(request):
    store_size = getattr(request, "param", 150 * 1024 * 1024)
    with _ray_start(object_store_memory=store_size) as info:
        yield info


@pytest.fixture
def ray_init_with_task_retry_delay():
    with _ray_start(_system_config={"task_retry_delay_ms": 100}) as info:
        yield info


@pytest.fixture
def shutdown_only():
    yield None
    shoal.shutdown()


@contextlib.contextmanager
def _ray_start_cluster(**kwargs):
    num_nodes = kwargs.pop("num_nodes", 0)
    do_init = kwargs.pop("do_init", num_nodes > 0)
    kwargs.pop("skip_cluster", None)
    init_kwargs = {**_DEFAULT_INIT, **kwargs}
    namespace = init_kwargs.pop("namespace")
    cluster = Cluster()
    try:
        for i in range(num_nodes):
            if i > 0:
                init_kwargs.pop("_system_config", None)
            cluster.add_node(**init_kwargs)
            if i == 0 and do_init:
                shoal.init(address=cluster.address, namespace=namespace)
        yield cluster
    finally:
        shoal.shutdown()
        cluster.shutdown()


@pytest.fixture
def ray_start_cluster(request):
    with _ray_start_cluster(**_param(request)) as cluster:
        yield cluster


@pytest.fixture
def ray_start_cluster_head(request):
    param = _param(request)
    with _ray_start_cluster(num_nodes=1, do_init=True, **param) as cluster:
        yield cluster


@pytest.fixture
def error_pubsub():
    subscriber = shoal.test_utils.init_error_pubsub()
    yield subscriber
    subscriber.close()


@pytest.fixture
def propagate_logs():
    logger = logging.getLogger("ray")
    logger.propagate = True
    yield
    logger.propagate = False


@pytest.fixture
def set_enable_auto_connect(request, monkeypatch):
    value = getattr(request, "param", "0")
    monkeypatch.setenv("SHOAL_AUTO_INIT", value)
    yield value


class TestTimedOut(Exception):
    """The test ran past --ray-test-timeout seconds."""


def pytest_addoption(parser):
    parser.addoption("--ray-test-timeout", type=float, default=120.0,
                     help="seconds a test may run before it fails")


_watchdog = None


def _arm(seconds, what):
    """Fails the test (SIGALRM, where Python next runs: a blocking get()
    checks every 100 ms) after ``seconds``, and ends its process 30 s
    later if that never comes (the runner then stops its clusters)."""
    global _watchdog

    def expired(signum, frame):
        raise TestTimedOut(f"{what} ran past {seconds:.0f} s")

    signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    if _watchdog is not None:
        _watchdog.cancel()
    _watchdog = threading.Timer(seconds + 30, lambda: os._exit(3))
    _watchdog.daemon = True
    _watchdog.start()


def _disarm():
    signal.setitimer(signal.ITIMER_REAL, 0)
    if _watchdog is not None:
        _watchdog.cancel()


# These run in the test's own (forked) process: setup and the test share
# the limit, teardown (stopping clusters) gets a minute of its own.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    _arm(item.config.getoption("--ray-test-timeout"), "the test")
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    _arm(60, "the test's teardown")
    try:
        yield
    finally:
        _disarm()


def pytest_configure(config):
    # Ray's files mark tests they run only under Ray Client or on some
    # platforms; unknown marks must not warn.
    for mark in ("timeout", "skipif", "parametrize"):
        config.addinivalue_line("markers", f"{mark}: Ray's own marks")


def pytest_report_header(config):
    return (f"ray is shoal ({os.path.dirname(shoal.__file__)}); "
            f"harness {__file__}")
