"""A pytest plugin that runs Ray's own test files against Shoal.

    pytest -p ray_harness --forked ../shared/raytests/test_basic.py

It changes plumbing only, never a test:

- ``import ray`` (and ``ray.util``, ``ray.exceptions``, ``ray.cluster_utils``
  and any ``ray.X`` that ``shoal.X`` provides) gives Shoal's module itself,
  here and in the drivers a test starts (ray_alias.py);
- Ray's test helpers map onto Shoal's (``ray._private.test_utils`` and
  ``ray._common.test_utils`` onto ``shoal.test_utils``);
- the few Ray-internal names the files import at the top (constants, the
  Ray Client switches) are given plumbing values, so that a file whose
  tests need none of them is collected; a test that uses Ray's internals
  (``ray._private.worker``'s core worker, ``ray._raylet``) fails on them and
  is counted, unless excluded.txt names it (left out of the measure);
- Ray's HTTP proxy fixture starts a real proxy;
- the fixtures of Ray's ``conftest.py`` (``ray_start_regular``,
  ``shutdown_only``, ``ray_start_cluster``...) start real Shoal clusters:
  ``shoal.init`` and ``shoal.cluster_utils.Cluster`` (``shoal start``).
"""

import contextlib
import logging
import os
import select
import signal
import socket
import socketserver
import subprocess
import tempfile
import threading
import time
import urllib.parse

import pytest

import shoal
import shoal.test_utils
from shoal.cluster_utils import Cluster

import ray_alias  # noqa: F401 - `import ray` is Shoal from here on
from exclusions import excluded_tests

# Ray's fixtures start every node with one CPU and a small store.
_DEFAULT_INIT = {"num_cpus": 1, "object_store_memory": 150 * 1024 * 1024,
                 "namespace": ""}




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
def ray_start_no_cpu(request):
    with _ray_start(**{**_param(request), "num_cpus": 0}) as info:
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
            if i > 0:  # the head's own settings
                init_kwargs.pop("_system_config", None)
                init_kwargs.pop("_storage", None)
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


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def external_redis(_own_temp_dir):
    """Ray's fixture: a real Redis server of the test's own, for a head
    that keeps the cluster's state there (``shoal start --storage``)."""
    port = _free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "no", "--dir", _own_temp_dir],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("redis-server did not start")
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.kill()
        server.wait()


@pytest.fixture
def ray_start_cluster_head_with_external_redis(request, external_redis):
    param = _param(request)
    with _ray_start_cluster(num_nodes=1, do_init=True, _storage=external_redis,
                            **param) as cluster:
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


class _ProxyHandler(socketserver.BaseRequestHandler):
    """An HTTP proxy's one connection: CONNECT host:port tunnels, and a
    plain request (GET http://host/...) goes to its host as it is."""

    def handle(self):
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 65536:
            chunk = self.request.recv(4096)
            if not chunk:
                return
            head += chunk
        line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if len(line) < 2:
            return
        if line[0] == "CONNECT":
            host, _, port = line[1].rpartition(":")
            rest = head.split(b"\r\n\r\n", 1)[1]
            greeting = b"HTTP/1.1 200 Connection established\r\n\r\n"
        else:
            url = urllib.parse.urlsplit(line[1])
            host, port, rest, greeting = (url.hostname, url.port or 80,
                                          head, b"")
        try:
            upstream = socket.create_connection((host, int(port)), timeout=10)
        except OSError:
            self.request.sendall(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
            return
        with upstream:
            self.request.sendall(greeting)
            upstream.sendall(rest)
            _pipe(self.request, upstream)


def _pipe(a, b):
    """Copies bytes both ways between sockets ``a`` and ``b`` until one
    side closes."""
    a.settimeout(None)
    b.settimeout(None)
    pairs = {a: b, b: a}
    while True:
        readable, _, _ = select.select(list(pairs), [], [])
        for sock in readable:
            data = sock.recv(65536)
            if not data:
                return
            pairs[sock].sendall(data)


@pytest.fixture
def start_http_proxy():
    """Ray's fixture: a real HTTP proxy on this host, and the environment
    that points programs at it (a driver must still reach its cluster)."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _ProxyHandler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    address = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield {"http_proxy": address, "https_proxy": address,
               "HTTP_PROXY": address, "HTTPS_PROXY": address}
    finally:
        server.shutdown()
        server.server_close()


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


def _is_excluded(excluded, path, name):
    base = name.split("[", 1)[0]
    return (path, "") in excluded or (path, base) in excluded


def pytest_ignore_collect(collection_path, config):
    """A whole file of excluded.txt is not even imported."""
    return (collection_path.name, "") in excluded_tests() or None


def pytest_collection_modifyitems(config, items):
    excluded = excluded_tests()
    kept, dropped = [], []
    for item in items:
        path = os.path.basename(str(item.fspath))
        (dropped if _is_excluded(excluded, path, item.name) else
         kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_configure(config):
    # Ray's files mark tests they run only under Ray Client or on some
    # platforms; unknown marks must not warn.
    for mark in ("timeout", "skipif", "parametrize"):
        config.addinivalue_line("markers", f"{mark}: Ray's own marks")


def pytest_report_header(config):
    return (f"ray is shoal ({os.path.dirname(shoal.__file__)}); "
            f"harness {__file__}")
