"""Nothing outlives its owner: a Python driver killed with kill -9 in the
middle of tasks, with an actor and objects in the store, leaves no lease,
no worker, no actor and no object behind."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import shoal


def _status(cluster):
    out = subprocess.run(
        [os.environ.get("SHOAL_CLI", "shoal"), "status", "--format", "json",
         "--temp-dir", cluster.head_dir],
        capture_output=True, text=True, timeout=60, check=True).stdout
    return json.loads(out)


def _workers_of(cluster, job_id):
    """Pids of the Python workers `cluster` started for `job_id` (job ids
    repeat across clusters: another one on this host has its own job18;
    the cluster's token, in its workers' environment, tells them apart)."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        # A Python worker's title is Ray's (ray::IDLE); its environment is
        # whole.
        if ((b"shoal.worker" in cmdline or cmdline.startswith(b"ray::"))
                and f"SHOAL_JOB_ID={job_id}".encode() in env
                and f"SHOAL_TOKEN={cluster.token}".encode() in env):
            pids.append(int(pid))
    return pids


DRIVER = """
    import sys, time
    import numpy as np
    import shoal
    shoal.init()

    @shoal.remote
    def sleep_long():
        time.sleep(600)

    @shoal.remote
    class Holder:
        def ping(self):
            return 1

    holder = Holder.options(name="held-by-doomed").remote()
    shoal.get(holder.ping.remote())
    kept = shoal.put(np.ones(8 << 20, dtype=np.uint8))  # 8 MiB in the store
    running = [sleep_long.remote() for _ in range(4)]
    print(shoal.get_runtime_context().get_job_id(), flush=True)
    time.sleep(600)
"""


def _tasks_of(cluster, job_id):
    out = subprocess.run(
        [os.environ.get("SHOAL_CLI", "shoal"), "list", "tasks", "--format",
         "json", "--filter", f"job_id={job_id}", "--limit", "1000",
         "--temp-dir", cluster.head_dir],
        capture_output=True, text=True, timeout=60, check=True).stdout
    return json.loads(out)


def test_a_killed_driver_leaves_nothing_behind(two_nodes, monkeypatch):
    env = dict(os.environ, SHOAL_TEMP_DIR=two_nodes.head_dir)
    env.pop("SHOAL_ADDRESS", None)
    driver = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(DRIVER)], env=env,
        stdout=subprocess.PIPE, text=True)
    try:
        job_id = driver.stdout.readline().strip()
        assert job_id, "the driver did not start"
        # Its tasks hold all 4 CPUs of the two nodes, in workers of its job.
        deadline = time.time() + 30
        while (len(_workers_of(two_nodes, job_id)) < 5
               and time.time() < deadline):
            time.sleep(0.1)
        assert len(_workers_of(two_nodes, job_id)) >= 5  # 4 tasks and the actor
        status = _status(two_nodes)
        assert any(lease["job_id"] == job_id
                   for lease in status.get("leases", [])), status
        # The head has heard of its tasks (reports come every second).
        deadline = time.time() + 30
        while time.time() < deadline and len(
                [t for t in _tasks_of(two_nodes, job_id)
                 if t["name"].endswith("sleep_long")]) < 4:
            time.sleep(0.2)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()

    monkeypatch.setenv("SHOAL_TEMP_DIR", two_nodes.head_dir)
    monkeypatch.delenv("SHOAL_ADDRESS", raising=False)
    deadline = time.time() + 30
    left = None
    while time.time() < deadline:
        status = _status(two_nodes)
        leases = [lease for lease in status.get("leases", [])
                  if lease.get("job_id") == job_id]
        actors = [a for a in status.get("actors", [])
                  if a.get("name") == "held-by-doomed"
                  and a.get("state") != "DEAD"]
        left = (leases, actors, _workers_of(two_nodes, job_id))
        if not any(left):
            break
        time.sleep(0.2)
    assert not any(left), left
    # Its tasks are not listed as running: they failed with the driver.
    deadline = time.time() + 10
    while time.time() < deadline:
        tasks = _tasks_of(two_nodes, job_id)
        if all(t["state"] in ("FINISHED", "FAILED") for t in tasks):
            break
        time.sleep(0.2)
    sleeping = [t for t in tasks if t["name"].endswith("sleep_long")]
    assert len(sleeping) == 4, tasks
    for t in sleeping:
        assert t["state"] == "FAILED", tasks
        assert t["error_type"] == "WORKER_DIED", tasks
        assert "driver ended" in t["error"], tasks
    shoal.init()
    try:
        # Its CPUs are free and its object is gone from the store.
        deadline = time.time() + 10
        while time.time() < deadline:
            free, total = shoal.available_resources(), \
                shoal.cluster_resources()
            if (free.get("CPU") == total["CPU"]
                    and free.get("object_store_memory")
                    == total["object_store_memory"]):
                break
            time.sleep(0.2)
        assert free.get("CPU") == total["CPU"], (free, total)
        assert free.get("object_store_memory") == \
            total["object_store_memory"], (free, total)
    finally:
        shoal.shutdown()
