"""A cluster of several nodes on this host, for tests: Ray's
``ray.cluster_utils.Cluster`` over ``shoal start`` and ``shoal stop``.

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    worker = cluster.add_node(num_cpus=4, resources={"slot": 1})
    cluster.wait_for_nodes()
    shoal.init(address=cluster.address)
    ...
    cluster.remove_node(worker)      # its agent stops; its tasks fail over
    cluster.shutdown()

Every node is a real head or node agent with a temp dir of its own under one
folder that ``shutdown()`` removes. The cluster's token is put in this
process's ``SHOAL_TOKEN`` while the cluster lives, so that
``shoal.init(address=cluster.address)`` joins it as Ray's does.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

__all__ = ["Cluster", "Node", "cluster_not_supported"]

# The clusters of this process not yet shut down (a test harness stops
# them when a test ends, where the process does not run atexit).
live_clusters = set()

# Ray's test clusters run on Linux and macOS; Shoal's on Linux.
cluster_not_supported = False

# What a node gets unless told otherwise, as in Ray's test clusters: one CPU,
# no GPU, a small object store.
_NODE_DEFAULTS = {"num_cpus": 1, "num_gpus": 0,
                  "object_store_memory": 150 * 1024 * 1024}
# Options of Ray's nodes that say nothing to Shoal's (ports of Ray's own
# processes, its internal config).
_IGNORED = {"_system_config", "dashboard_port", "min_worker_port",
            "max_worker_port", "include_dashboard", "dashboard_host",
            "enable_object_reconstruction", "redis_port", "node_name",
            "_node_name", "log_to_driver", "ray_client_server_port",
            "node_manager_port", "object_manager_port", "env_vars",
            "namespace", "_temp_dir", "metrics_export_port"}


def _cli():
    from shoal import _cluster_program
    return _cluster_program()


class Node:
    """One node of a Cluster: its agent (and, for the head, the head)."""

    def __init__(self, temp_dir, head, start_args=()):
        self.temp_dir = temp_dir
        self.head = head
        self._start_args = list(start_args)  # of `shoal start`
        session = os.path.join(temp_dir, "session_latest")
        self.node_id = _read(session, "node_id")
        self.unique_id = self.node_id
        self.address = _read(session, "agent_address")
        self.node_ip_address = self.address.rsplit(":", 1)[0]
        self.agent_pid = int(_read(session, "agent.pid") or 0)

    def __repr__(self):
        return f"Node({self.node_id}, head={self.head})"

    def kill_raylet(self):
        """Ends the node's agent at once (SIGKILL), as a crash would."""
        _stop(self.temp_dir, force=True)

    def kill_gcs_server(self):
        """Ends the head's process at once (SIGKILL), as a crash would. The
        agents, workers and drivers live on; the cluster's state is in the
        head's storage (start_gcs_server takes it up)."""
        if not self.head:
            raise ValueError("kill_gcs_server(): only the head node runs "
                             "the head")
        session = os.path.join(self.temp_dir, "session_latest")
        pid = int(_read(session, "head.pid") or 0)
        if pid <= 0:
            raise RuntimeError(f"no head runs from {self.temp_dir}")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        from shoal.test_utils import wait_for_pid_to_exit
        wait_for_pid_to_exit(pid, timeout=30)

    def start_gcs_server(self):
        """Starts the head again on its session (after kill_gcs_server): it
        takes up the cluster's state, its address and token."""
        if not self.head:
            raise ValueError("start_gcs_server(): only the head node runs "
                             "the head")
        done = subprocess.run([_cli(), "start", *self._start_args,
                               "--temp-dir", self.temp_dir],
                              env=_env(self.temp_dir), capture_output=True,
                              text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"restarting the head failed: "
                               f"{done.stderr.strip()}")

    def all_processes_alive(self):
        try:
            os.kill(self.agent_pid, 0)
            return True
        except OSError:
            return False


def _read(session, name):
    try:
        with open(os.path.join(session, name)) as f:
            return f.read().strip()
    except OSError:
        return ""


def _stop(temp_dir, force=False):
    subprocess.run([_cli(), "stop", "--temp-dir", temp_dir,
                    *(["--force"] if force else [])],
                   env=_env(temp_dir), capture_output=True, timeout=120)


def _env(temp_dir):
    env = dict(os.environ)
    env["SHOAL_TEMP_DIR"] = temp_dir
    env.pop("SHOAL_ADDRESS", None)
    return env


def _start_args(args):
    """`shoal start` flags for Ray's node options."""
    options = {**_NODE_DEFAULTS, **args}
    out = ["--node-ip-address", "127.0.0.1"]
    for key, value in options.items():
        if key in _IGNORED or value is None:
            continue
        if key == "num_cpus":
            out += ["--num-cpus", str(value)]
        elif key == "num_gpus":
            out += ["--num-gpus", str(value)]
        elif key == "object_store_memory":
            out += ["--object-store-memory", str(int(value))]
        elif key == "resources":
            out += ["--resources", json.dumps(value)]
        elif key == "labels":
            out += ["--labels", json.dumps(value)]
        elif key == "_storage":  # the head's: a file, or redis://HOST:PORT
            out += ["--storage", str(value)]
        else:
            raise ValueError(f"Cluster.add_node(): unknown option {key!r}")
    return out


class Cluster:
    """Ray's test cluster: a head, then nodes added and removed at will."""

    def __init__(self, initialize_head=False, connect=False,
                 head_node_args=None, shutdown_at_exit=True):
        self._root = tempfile.mkdtemp(prefix="shoal-cluster-")
        live_clusters.add(self)
        self.head_node = None
        self.worker_nodes = set()
        self.address = None
        self.token = None
        self._old_token = os.environ.get("SHOAL_TOKEN")
        self._old_address = os.environ.get("SHOAL_ADDRESS")
        self._count = 0
        self.connected = False
        if shutdown_at_exit:
            import atexit
            atexit.register(self.shutdown)
        if initialize_head:
            self.add_node(**(head_node_args or {}))
            if connect:
                self.connect()
        elif connect:
            raise ValueError("Cluster(connect=True) needs initialize_head")

    @property
    def gcs_address(self):
        return self.address

    def connect(self, namespace=None):
        import shoal
        shoal.init(address=self.address, namespace=namespace)
        self.connected = True

    def add_node(self, wait=True, **node_args):
        """Starts a node (the head, if there is none yet); returns it."""
        self._count += 1
        temp_dir = os.path.join(self._root, f"node{self._count}")
        head = self.head_node is None
        args = _start_args(node_args)
        if head:
            args = ["--head", "--port", "0", *args]
        else:
            args = ["--address", self.address, *args]
        done = subprocess.run([_cli(), "start", *args, "--temp-dir",
                               temp_dir], env=_env(temp_dir),
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"shoal start {' '.join(args)} failed: "
                               f"{done.stderr.strip()}")
        node = Node(temp_dir, head, args)
        if head:
            session = os.path.join(temp_dir, "session_latest")
            self.address = _read(session, "cluster_address")
            self.token = _read(session, "token")
            # The cluster this process finds (init() and init("auto")), as
            # Ray's Cluster records itself as the host's current cluster.
            os.environ["SHOAL_TOKEN"] = self.token
            os.environ["SHOAL_ADDRESS"] = self.address
            self.head_node = node
        else:
            self.worker_nodes.add(node)
        if wait:
            self._wait_for_node(node)
        return node

    def remove_node(self, node, allow_graceful=True):
        """Stops a node: its agent (and, for the head, the head)."""
        _stop(node.temp_dir, force=not allow_graceful)
        if node is self.head_node:
            self.head_node = None
        else:
            self.worker_nodes.discard(node)

    def list_all_nodes(self):
        nodes = [self.head_node] if self.head_node else []
        return nodes + sorted(self.worker_nodes, key=lambda n: n.temp_dir)

    def _alive_node_ids(self):
        done = subprocess.run([_cli(), "list", "nodes", "--format", "json",
                               "--address", self.address],
                              env={**os.environ, "SHOAL_TOKEN": self.token},
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            return set()
        rows = json.loads(done.stdout or "[]")
        return {row.get("node_id") for row in rows
                if row.get("state", "ALIVE") == "ALIVE"}

    def _wait_for_node(self, node, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if node.node_id in self._alive_node_ids():
                return
            time.sleep(0.1)
        raise TimeoutError(f"node {node.node_id} did not join in {timeout} s")

    def wait_for_nodes(self, timeout=30):
        """Waits until the head sees exactly the nodes of this cluster."""
        deadline = time.monotonic() + timeout
        wanted = {n.node_id for n in self.list_all_nodes()}
        while time.monotonic() < deadline:
            if self._alive_node_ids() == wanted:
                return
            time.sleep(0.1)
        raise TimeoutError(f"the cluster did not reach {len(wanted)} nodes "
                           f"in {timeout} s")

    def shutdown(self):
        """Stops every node, then the head; removes their folders."""
        import shoal
        if self.connected:
            shoal.shutdown()
            self.connected = False
        for node in list(self.worker_nodes):
            self.remove_node(node, allow_graceful=False)
        if self.head_node is not None:
            self.remove_node(self.head_node, allow_graceful=False)
        if self.token is not None:
            for name, old in (("SHOAL_TOKEN", self._old_token),
                              ("SHOAL_ADDRESS", self._old_address)):
                if old is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = old
            self.token = None
        shutil.rmtree(self._root, ignore_errors=True)
        live_clusters.discard(self)
