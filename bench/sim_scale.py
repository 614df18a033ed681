#!/usr/bin/env python3
"""What one real head costs with N simulated nodes (docs/design/scale.md).

For each N: starts a head (`shoal start --head`, which also starts the head
node's agent), runs `shoal dev sim-nodes` against it (several processes of
at most 5,000 nodes: each simulated node holds two file descriptors), waits
until every node registered, then measures over --window seconds the head's
and the simulators' CPU (from /proc/<pid>/stat) and RSS, the heartbeat
request and reply sizes (as the simulators report them), and how long
`shoal status` takes. Prints one JSON line per N.

  bench/sim_scale.py --shoal build/bin/shoal 100 1000 10000
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

TICK = os.sysconf("SC_CLK_TCK")
PER_PROCESS = 5000


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def run(shoal, count, window, heartbeat_ms, register_timeout,
        token="scale-bench-token"):
    tmp = tempfile.mkdtemp(prefix="shoal-scale-")
    env = dict(os.environ, SHOAL_TOKEN=token)
    start = [shoal, "start", "--head", "--port", "0", "--temp-dir", tmp,
             "--num-cpus", "1", "--include-dashboard", "false",
             "--storage", "memory", "--health-timeout-ms", "30000"]
    if heartbeat_ms:
        start += ["--heartbeat-ms", str(heartbeat_ms)]
    subprocess.run(start, env=env, check=True, capture_output=True)
    session = next(os.path.join(tmp, d) for d in os.listdir(tmp)
                   if d.startswith("session_"))
    address = open(os.path.join(session, "cluster_address")).read().strip()
    head_pid = int(open(os.path.join(session, "head.pid")).read())
    time.sleep(1)
    head_rss_empty = rss_mib(head_pid)
    sims = []
    outs = []
    t0 = time.monotonic()
    left, i = count, 0
    while left > 0:
        n = min(left, PER_PROCESS)
        out = open(os.path.join(tmp, f"sim{i}.out"), "w+")
        sims.append(subprocess.Popen(
            [shoal, "dev", "sim-nodes", "--count", str(n), "--address",
             address, "--node-id-prefix", f"sim{i}"] +
            (["--heartbeat-ms", str(heartbeat_ms)] if heartbeat_ms else []),
            env=env, stdout=out, stderr=subprocess.DEVNULL))
        outs.append(out)
        left -= n
        i += 1
    result = {"nodes": count, "sim_processes": len(sims)}
    try:
        done = wait_registered(outs, register_timeout)
        result["register_s"] = round(time.monotonic() - t0, 2)
        result["all_registered"] = done == len(outs)
        time.sleep(12)  # past the first beats (full views) of the last nodes
        pids = [head_pid] + [s.pid for s in sims]
        before = [cpu_ticks(p) for p in pids]
        w0 = time.monotonic()
        time.sleep(window)
        seconds = time.monotonic() - w0
        used = [(cpu_ticks(p) - b) / TICK / seconds
                for p, b in zip(pids, before)]
        result["head_cpu_cores"] = round(used[0], 3)
        result["sim_cpu_cores"] = round(sum(used[1:]), 3)
        head_rss = rss_mib(head_pid)
        result["head_rss_mib"] = round(head_rss, 1)
        result["head_rss_kib_per_node"] = round(
            (head_rss - head_rss_empty) * 1024 / count, 1)
        result["sim_rss_mib"] = round(sum(rss_mib(s.pid) for s in sims), 1)
        # The simulators' last 10 s reports: heartbeat rates and sizes.
        beats, req, rep, failed = 0.0, [], [], 0
        for out in outs:
            out.seek(0)
            lines = [l for l in out.read().splitlines() if "heartbeats/s" in l]
            if not lines:
                continue
            m = re.search(r"; (\d+) heartbeats/s, (\d+) bytes per request, "
                          r"(\d+) per reply; (\d+) failed", lines[-1])
            if m:
                beats += float(m.group(1))
                req.append(int(m.group(2)))
                rep.append(int(m.group(3)))
                failed += int(m.group(4))
        result["heartbeats_per_s"] = beats
        result["heartbeat_request_bytes"] = max(req) if req else None
        result["heartbeat_reply_bytes"] = max(rep) if rep else None
        result["heartbeat_failures_10s"] = failed
        status_ms = {}
        for fmt in ("text", "json"):
            times = []
            for _ in range(3):
                s0 = time.monotonic()
                p = subprocess.run(
                    [shoal, "status", "--address", address, "--format", fmt],
                    env=env, capture_output=True)
                times.append((time.monotonic() - s0) * 1000)
                if p.returncode != 0:
                    status_ms[fmt + "_error"] = p.stderr.decode()[-200:]
            status_ms[fmt] = round(statistics.median(times))
        result["status_ms"] = status_ms
        p = subprocess.run([shoal, "status", "--address", address, "--format",
                            "json"], env=env, capture_output=True)
        try:
            nodes = json.loads(p.stdout)["nodes"]
            result["alive_in_status"] = sum(n["state"] == "ALIVE"
                                            for n in nodes)
        except (ValueError, KeyError):
            result["alive_in_status"] = None
    finally:
        stop(shoal, sims, tmp)
    return result


def wait_registered(outs, timeout):
    """Waits until every simulator's output (a file each) says its nodes
    registered, or `timeout` s pass; how many did."""
    deadline = time.monotonic() + timeout
    while True:
        done = 0
        for out in outs:
            out.seek(0)
            done += "simulated nodes registered" in out.read()
        if done == len(outs) or time.monotonic() >= deadline:
            return done
        time.sleep(0.2)


def stop(shoal, sims, temp_dir):
    """Ends the simulators (SIGTERM, then SIGKILL after 60 s) and the
    cluster of `temp_dir`."""
    for s in sims:
        s.send_signal(signal.SIGTERM)
    for s in sims:
        try:
            s.wait(60)
        except subprocess.TimeoutExpired:
            s.kill()
            s.wait()
    subprocess.run([shoal, "stop", "--temp-dir", temp_dir, "--force"],
                   capture_output=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shoal", default="build/bin/shoal")
    ap.add_argument("--window", type=float, default=15)
    ap.add_argument("--heartbeat-ms", type=int, default=0,
                    help="the nodes' interval (default: the head's, 500 ms)")
    ap.add_argument("--register-timeout", type=float, default=600,
                    help="measure anyway after this many seconds")
    ap.add_argument("counts", type=int, nargs="+")
    a = ap.parse_args()
    for n in a.counts:
        print(json.dumps(run(a.shoal, n, a.window, a.heartbeat_ms,
                             a.register_timeout)),
              flush=True)


if __name__ == "__main__":
    sys.exit(main())
