"""Fixtures for the Python frontend's tests: real clusters, started and
stopped with the `shoal` CLI (SHOAL_CLI, set by ctest) in a temp dir of
their own."""

import contextlib
import os
import subprocess
import sys
import tempfile

import pytest

import shoal


def _cli():
    return os.environ.get("SHOAL_CLI", "shoal")


def _env(temp_dir):
    env = dict(os.environ)
    env["SHOAL_TEMP_DIR"] = temp_dir
    env.pop("SHOAL_ADDRESS", None)
    env.pop("SHOAL_TOKEN", None)
    return env


@pytest.fixture
def local_cluster(monkeypatch):
    """shoal.init() with no cluster to find: it starts its own."""
    with tempfile.TemporaryDirectory(prefix="shoal-py-") as temp_dir:
        monkeypatch.setenv("SHOAL_TEMP_DIR", temp_dir)
        monkeypatch.delenv("SHOAL_ADDRESS", raising=False)
        monkeypatch.delenv("SHOAL_TOKEN", raising=False)
        shoal.init(num_cpus=2, resources={"slot": 3})
        yield temp_dir
        shoal.shutdown()


@pytest.fixture
def started_cluster(monkeypatch):
    """A cluster `shoal start --head` started; yields its temp dir."""
    with tempfile.TemporaryDirectory(prefix="shoal-py-") as temp_dir:
        env = _env(temp_dir)
        subprocess.run([_cli(), "start", "--head", "--port", "0",
                        "--num-cpus", "1", "--node-ip-address", "127.0.0.1",
                        "--temp-dir", temp_dir],
                       env=env, check=True, capture_output=True, timeout=60)
        monkeypatch.setenv("SHOAL_TEMP_DIR", temp_dir)
        monkeypatch.delenv("SHOAL_ADDRESS", raising=False)
        monkeypatch.delenv("SHOAL_TOKEN", raising=False)
        try:
            yield temp_dir
        finally:
            shoal.shutdown()
            subprocess.run([_cli(), "stop", "--temp-dir", temp_dir], env=env,
                           capture_output=True, timeout=60)


def _start(args, temp_dir, host_variables=None):
    subprocess.run([_cli(), "start", *args, "--node-ip-address", "127.0.0.1",
                    "--temp-dir", temp_dir],
                   env={**_env(temp_dir), **(host_variables or {})},
                   check=True, capture_output=True, timeout=60)


def _stop(temp_dir):
    subprocess.run([_cli(), "stop", "--temp-dir", temp_dir],
                   env=_env(temp_dir), capture_output=True, timeout=60)


def fake_tpu_host(root, worker, accelerator_type="v5p-16", name=None):
    """Makes simulated host ``worker`` of a TPU slice (``name``; the
    default "my-tpu") under ``root``; returns the variables a node agent on
    it must have."""
    folder = os.path.join(root, f"tpu-{name or 'my-tpu'}-{worker}")
    args = [_cli(), "dev", "fake-tpu", "--type", accelerator_type,
            "--worker", str(worker), "--root", folder]
    if name:
        args += ["--name", name]
    out = subprocess.run(args, check=True, capture_output=True, text=True,
                         timeout=60).stdout
    variables = {}
    for line in out.splitlines():  # "export NAME=value"
        if line.startswith("export "):
            key, _, value = line[len("export "):].partition("=")
            variables[key] = value
    return variables


class Cluster:
    """A head and a second node (and `more_nodes`) started with `shoal
    start`, each with a temp dir of its own (one node per temp dir);
    `head_variables` and `node_variables` are set for each node's start (a
    simulated TPU host's, say)."""

    def __init__(self, root, head_args, node_args, head_variables=None,
                 node_variables=None, more_nodes=()):
        self.head_dir = os.path.join(root, "head")
        self.node_dir = os.path.join(root, "node")
        # Each further node (args, variables) in a temp dir of its own.
        self.more_dirs = [os.path.join(root, f"node{i + 2}")
                          for i in range(len(more_nodes))]
        try:
            _start(["--head", "--port", "0", *head_args], self.head_dir,
                   head_variables)
            session = os.path.join(self.head_dir, "session_latest")
            with open(os.path.join(session, "cluster_address")) as f:
                self.address = f.read().strip()
            with open(os.path.join(session, "token")) as f:
                self.token = f.read().strip()
            joins = [(node_args, node_variables, self.node_dir)] + [
                (args, variables, d)
                for (args, variables), d in zip(more_nodes, self.more_dirs)]
            for args, variables, temp_dir in joins:
                _start(["--address", self.address, "--token", self.token,
                        *args], temp_dir, variables)
        except BaseException:
            self.stop()
            raise

    def stop(self):
        for temp_dir in self.more_dirs:
            _stop(temp_dir)
        _stop(self.node_dir)
        _stop(self.head_dir)

    def run_driver(self, argv, python_path=None):
        """Runs a Python driver against this cluster; its CompletedProcess."""
        env = _env(self.head_dir)
        if python_path is not None:
            env["PYTHONPATH"] = os.pathsep.join(python_path)
        return subprocess.run([sys.executable, *argv], env=env,
                              capture_output=True, text=True, timeout=180)


@contextlib.contextmanager
def running_cluster(prefix, hosts):
    """A Cluster of `hosts` ((args, variables) each, the head's first) in a
    temp dir of its own, stopped and removed when the block ends."""
    with tempfile.TemporaryDirectory(prefix=prefix) as root:
        (head, head_vars), (node, node_vars), *more = [
            (args, variables(root) if callable(variables) else variables)
            for args, variables in hosts]
        cluster = Cluster(root, head, node, head_vars, node_vars,
                          more_nodes=more)
        try:
            yield cluster
        finally:
            cluster.stop()


@contextlib.contextmanager
def driver_of(cluster, monkeypatch):
    """This process as a driver of `cluster` while the block runs."""
    monkeypatch.setenv("SHOAL_TEMP_DIR", cluster.head_dir)
    monkeypatch.delenv("SHOAL_ADDRESS", raising=False)
    monkeypatch.delenv("SHOAL_TOKEN", raising=False)
    shoal.init()
    try:
        yield cluster
    finally:
        shoal.shutdown()


@pytest.fixture(scope="module")
def two_nodes():
    """Two nodes of 2 CPUs each; the second has a "slot" resource."""
    with tempfile.TemporaryDirectory(prefix="shoal-py-") as root:
        cluster = Cluster(root, ["--num-cpus", "2"],
                          ["--num-cpus", "2", "--resources", '{"slot": 2}'])
        try:
            yield cluster
        finally:
            cluster.stop()


@pytest.fixture
def connected(two_nodes, monkeypatch):
    """A driver joined to two_nodes for the length of one test."""
    with driver_of(two_nodes, monkeypatch) as cluster:
        yield cluster
