#!/usr/bin/env python3
"""The scale figures of one real head against simulated nodes.

Starts a head (`shoal start --head`, SQLite storage, 1 s heartbeats),
then `shoal dev sim-nodes` processes against it: --nodes plain nodes
({CPU: 1, sim: 1} each, at most 5,000 per process), one v5p-2048 slice of
256 hosts, a process of 1% of --nodes that is killed at once later, and
one lone node that is killed alone. Prints one `name value unit` line per
figure (docs/design/scale.md):

  register_<N>_nodes_s        start of the simulators to every node
                              registered
  view_whole_<N>_nodes_s      ... to every node holding the whole view
  head_cpu_cores_<N>_nodes    the head's CPU over --window s, idle
  head_rss_mib_<N>_nodes      the head's RSS then
  status_<N>_nodes_ms         `shoal status`, median of 3
  pg_1000_hosts_place_ms      a STRICT_SPREAD group of 1,000 {CPU: 1}
                              bundles created and placed (scale_bench)
  slice_256_hosts_reserve_ms  ReserveTpuSlice of the whole v5p-2048 slice
  node_death_detect_s_<N>_nodes   kill -9 of the lone node to the head
                              marking it dead (health timeout: --health-ms)
  node_loss_1pct_detect_s     kill -9 of 1% of the nodes at once (holding
                              a STRICT_SPREAD gang) to every one of them
                              dead
  gang_on_lost_nodes_failed_s ... to the gang's driver getting its
                              InfeasibleError, which names the lost hosts;
                              then a 1,000-host group and 100,000 tasks
                              run on the rest
  queued_<T>_tasks_s          (with --tasks-nodes) a separate cluster of
                              that many nodes drains T no-op tasks queued
                              at once from one driver

  bench/scale_bench.py --shoal build/bin/shoal --nodes 10000 \\
      --tasks-nodes 1000 --tasks 1000000
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sim_scale import PER_PROCESS, TICK, cpu_ticks, rss_mib  # noqa: E402

TOKEN = "scale-bench-token"


def figure(name, value, unit):
    print(f"{name} {value} {unit}", flush=True)


class Cluster:
    def __init__(self, shoal, heartbeat_ms, health_ms):
        self.shoal = shoal
        self.tmp = tempfile.mkdtemp(prefix="shoal-scale-")
        self.env = dict(os.environ, SHOAL_TOKEN=TOKEN)
        subprocess.run(
            [shoal, "start", "--head", "--port", "0", "--temp-dir", self.tmp,
             "--num-cpus", "1", "--include-dashboard", "false",
             "--heartbeat-ms", str(heartbeat_ms),
             "--health-timeout-ms", str(health_ms)],
            env=self.env, check=True, capture_output=True)
        session = next(os.path.join(self.tmp, d) for d in os.listdir(self.tmp)
                       if d.startswith("session_"))
        self.address = open(os.path.join(session,
                                         "cluster_address")).read().strip()
        self.head_pid = int(open(os.path.join(session, "head.pid")).read())
        self.sims = {}  # prefix -> (Popen, output file)

    def start_sim(self, prefix, count, *extra):
        out = open(os.path.join(self.tmp, f"{prefix}.out"), "w+")
        p = subprocess.Popen(
            [self.shoal, "dev", "sim-nodes", "--count", str(count),
             "--address", self.address, "--node-id-prefix", prefix] +
            list(extra), env=self.env, stdout=out, stderr=subprocess.DEVNULL)
        self.sims[prefix] = (p, out)

    def sim_said(self, prefix, text):
        out = self.sims[prefix][1]
        out.seek(0)
        return text in out.read()

    def wait_all(self, text, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self.sim_said(p, text) for p in self.sims):
                return True
            time.sleep(0.2)
        return False

    def kill_sim(self, prefix):
        p = self.sims.pop(prefix)[0]
        p.kill()
        p.wait()

    def status(self, fmt="json"):
        p = subprocess.run([self.shoal, "status", "--address", self.address,
                            "--format", fmt], env=self.env,
                           capture_output=True)
        if p.returncode != 0 or fmt != "json":
            return p.returncode
        return json.loads(p.stdout)

    def dead(self, prefix):
        nodes = self.status()["nodes"]
        return sum(n["state"] != "ALIVE" and
                   n["node_id"].startswith(prefix + "-") for n in nodes)

    def driver(self, *args):
        p = subprocess.run([os.path.join(os.path.dirname(self.shoal),
                                         "scale_bench")] + list(args) +
                           ["--address", self.address], env=self.env,
                           capture_output=True, text=True, timeout=900)
        for line in p.stdout.splitlines():
            print(line, flush=True)
        if p.returncode != 0:
            print(f"# scale_bench {args[0]} failed: {p.stderr[-500:]}",
                  flush=True)

    def stop(self):
        for p, _ in self.sims.values():
            p.send_signal(signal.SIGTERM)
        for p, _ in self.sims.values():
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        subprocess.run([self.shoal, "stop", "--temp-dir", self.tmp, "--force"],
                       capture_output=True)


def wait_dead(cluster, prefix, count, t0, timeout):
    while time.monotonic() - t0 < timeout:
        if cluster.dead(prefix) >= count:
            return round(time.monotonic() - t0, 2)
        time.sleep(0.1)
    return None


def scale(a):
    n = a.nodes
    k = f"{n // 1000}k" if n % 1000 == 0 else str(n)
    doomed = max(1, n // 100)
    c = Cluster(a.shoal, a.heartbeat_ms, a.health_ms)
    try:
        t0 = time.monotonic()
        left, i = n - doomed, 0
        while left > 0:
            m = min(left, PER_PROCESS)
            c.start_sim(f"sim{i}", m, "--num-cpus", "1", "--resources",
                        '{"sim": 1}')
            left -= m
            i += 1
        c.start_sim("doomed", doomed, "--num-cpus", "1", "--resources",
                    '{"doomed": 1}')
        c.start_sim("tpu", 256, "--num-cpus", "1", "--tpu-type", "v5p-2048")
        c.start_sim("lone", 1, "--num-cpus", "1")
        if not c.wait_all("simulated nodes registered", a.register_timeout):
            print("# not every node registered in time", flush=True)
        figure(f"register_{k}_nodes_s", round(time.monotonic() - t0, 2), "s")
        whole = c.wait_all("hold the whole view", a.register_timeout)
        figure(f"view_whole_{k}_nodes_s",
               round(time.monotonic() - t0, 2) if whole else "none", "s")
        time.sleep(5)
        before = cpu_ticks(c.head_pid)
        w0 = time.monotonic()
        time.sleep(a.window)
        cores = (cpu_ticks(c.head_pid) - before) / TICK / (time.monotonic() -
                                                           w0)
        figure(f"head_cpu_cores_{k}_nodes", round(cores, 3), "cores")
        figure(f"head_rss_mib_{k}_nodes", round(rss_mib(c.head_pid)), "MiB")
        times = []
        for _ in range(3):
            s0 = time.monotonic()
            c.status("text")
            times.append((time.monotonic() - s0) * 1000)
        figure(f"status_{k}_nodes_ms", round(statistics.median(times)), "ms")
        c.driver("place", "--bundles", "1000")
        c.driver("slice", "--slice", "tpu-v5p-2048-0")

        t0 = time.monotonic()
        c.kill_sim("lone")
        figure(f"node_death_detect_s_{k}_nodes",
               wait_dead(c, "lone", 1, t0, a.health_ms / 1000 + 30), "s")
        # A gang over the 1% that is about to vanish.
        gang = subprocess.Popen(
            [os.path.join(os.path.dirname(c.shoal), "scale_bench"), "gang",
             "--bundles", str(doomed), "--address", c.address], env=c.env,
            stdout=subprocess.PIPE, text=True)
        line = gang.stdout.readline()
        print(line.rstrip(), flush=True)
        t0 = time.monotonic()
        c.kill_sim("doomed")
        figure("node_loss_1pct_detect_s",
               wait_dead(c, "doomed", doomed, t0, a.health_ms / 1000 + 30),
               "s")
        try:
            rest, _ = gang.communicate(timeout=a.health_ms / 1000 + 60)
            print(rest.rstrip(), flush=True)
            figure("gang_on_lost_nodes_failed_s",
                   round(time.monotonic() - t0, 2), "s")
        except subprocess.TimeoutExpired:
            gang.kill()
            print("# the gang did not fail", flush=True)
        print(f"# health timeout {a.health_ms} ms; {doomed} nodes lost; "
              "the rest of the cluster:", flush=True)
        c.driver("place", "--bundles", "1000", "--trials", "1")
        c.driver("tasks", "--tasks", "100000")
    finally:
        c.stop()


def tasks(a):
    c = Cluster(a.shoal, a.heartbeat_ms, a.health_ms)
    try:
        c.start_sim("sim", a.tasks_nodes, "--num-cpus", "1", "--resources",
                    '{"sim": 1}')
        c.wait_all("simulated nodes registered", a.register_timeout)
        time.sleep(3)
        c.driver("tasks", "--tasks", str(a.tasks))
    finally:
        c.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shoal", default="build/bin/shoal")
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--heartbeat-ms", type=int, default=1000)
    ap.add_argument("--health-ms", type=int, default=10000)
    ap.add_argument("--window", type=float, default=10)
    ap.add_argument("--register-timeout", type=float, default=300)
    ap.add_argument("--tasks-nodes", type=int, default=0)
    ap.add_argument("--tasks", type=int, default=1000000)
    a = ap.parse_args()
    if a.nodes > 0:
        scale(a)
    if a.tasks_nodes > 0:
        tasks(a)


if __name__ == "__main__":
    sys.exit(main())
