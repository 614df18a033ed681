#!/usr/bin/env python3
"""How long reserving whole TPU slices by topology takes (shoal.util.tpu,
over shoal::tpu::ReserveSlices): from the call until every bundle is
placed, then given back.

  small: two simulated v5p-16 slices (4 real node agents, `shoal dev
         fake-tpu` hosts); reserves both as one group, and as a group per
         slice.
  scale: `shoal dev sim-nodes` with 100 v5p-128 slices (1,600 hosts) among
         10,000 nodes, 1 s heartbeats as bench/scale_bench.py has them;
         reserves 8 slices (128 hosts) as one group.

Prints one JSON line per case (each case in a process of its own), with
the median and the slowest of the rounds in milliseconds.

  PYTHONPATH=build/python bench/tpu_slices_bench.py --shoal build/bin/shoal
  ... --cases small          # or scale; both by default
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

import sim_scale  # bench/sim_scale.py: waiting for and ending simulators

TOKEN = "tpu-slices-bench-token"


def start(shoal, args, temp_dir, env_extra=None):
    env = dict(os.environ, SHOAL_TOKEN=TOKEN, **(env_extra or {}))
    env.pop("SHOAL_ADDRESS", None)
    subprocess.run([shoal, "start", *args, "--temp-dir", temp_dir,
                    "--node-ip-address", "127.0.0.1",
                    "--include-dashboard", "false"],
                   env=env, check=True, capture_output=True, timeout=120)


def address_of(temp_dir):
    with open(os.path.join(temp_dir, "session_latest",
                           "cluster_address")) as f:
        return f.read().strip()


def fake_host(shoal, root, name, worker):
    out = subprocess.run(
        [shoal, "dev", "fake-tpu", "--type", "v5p-16", "--worker",
         str(worker), "--name", name, "--root",
         os.path.join(root, f"{name}-{worker}")],
        check=True, capture_output=True, text=True).stdout
    return dict(line[len("export "):].split("=", 1)
                for line in out.splitlines() if line.startswith("export "))


def time_reservations(tpu, rounds, **request):
    """Milliseconds from the call until placed, for each round; and of
    that, until the groups were made (the cluster read, the slices chosen,
    the groups sent), and how long one read of the cluster's slices takes
    alone."""
    times, made, reads = [], [], []
    for _ in range(rounds):
        r0 = time.perf_counter()
        tpu.get_num_ready_tpu_slices(request["topology"], "v5p")
        reads.append((time.perf_counter() - r0) * 1000)
        t0 = time.perf_counter()
        slices = tpu.slice_placement_group(**request)
        made.append((time.perf_counter() - t0) * 1000)
        groups = (slices.slice_placement_groups if request.get("pg_per_slice")
                  else [slices.placement_group])
        for g in groups:
            if not g.wait(60):
                raise RuntimeError("slices were not placed within 60 s")
        times.append((time.perf_counter() - t0) * 1000)
        print(f"  round {len(times)}: {times[-1]:.1f} ms", file=sys.stderr,
              flush=True)
        slices.shutdown()
        deadline = time.monotonic() + 30
        while (tpu.get_num_ready_tpu_slices(request["topology"], "v5p") <
               request["num_slices"] and time.monotonic() < deadline):
            time.sleep(0.01)
    return {"rounds": rounds, "median_ms": round(statistics.median(times), 1),
            "max_ms": round(max(times), 1),
            "made_median_ms": round(statistics.median(made), 1),
            "cluster_read_median_ms": round(statistics.median(reads), 1)}


def small(shoal, rounds):
    import shoal as api
    from shoal.util import tpu
    root = tempfile.mkdtemp(prefix="shoal-slices-bench-")
    dirs = []
    try:
        for i, (name, worker) in enumerate(
                [("s1", 0), ("s1", 1), ("s2", 0), ("s2", 1)]):
            d = os.path.join(root, f"n{i}")
            args = (["--head", "--port", "0"] if i == 0 else
                    ["--address", address_of(dirs[0])])
            start(shoal, args + ["--num-cpus", "2"], d,
                  fake_host(shoal, root, name, worker))
            dirs.append(d)
        os.environ.update(SHOAL_ADDRESS=address_of(dirs[0]),
                          SHOAL_TOKEN=TOKEN)
        api.init()
        out = []
        for per_slice in (False, True):
            r = time_reservations(tpu, rounds, topology="2x2x2",
                                  accelerator_version="v5p", num_slices=2,
                                  pg_per_slice=per_slice)
            out.append({"case": "2 x v5p-16, real agents",
                        "group_per_slice": per_slice, **r})
        api.shutdown()
        return out
    finally:
        for d in reversed(dirs):
            subprocess.run([shoal, "stop", "--temp-dir", d, "--force"],
                           capture_output=True)


def scale(shoal, rounds):
    import shoal as api
    from shoal.util import tpu
    root = tempfile.mkdtemp(prefix="shoal-slices-bench-")
    head = os.path.join(root, "head")
    start(shoal, ["--head", "--port", "0", "--num-cpus", "1", "--storage",
                  "memory", "--health-timeout-ms", "30000",
                  "--heartbeat-ms", "1000"], head)
    address = address_of(head)
    env = dict(os.environ, SHOAL_TOKEN=TOKEN)
    sims, outs = [], []
    # 100 v5p-128 slices (16 hosts each), then CPU nodes up to 10,000
    # (5,000 at most per simulator: two descriptors per node).
    parts = [(["--tpu-type", "v5p-128"], 1600), ([], 5000), ([], 3399)]
    try:
        for i, (extra, count) in enumerate(parts):
            out = open(os.path.join(root, f"sim{i}.out"), "w+")
            sims.append(subprocess.Popen(
                [shoal, "dev", "sim-nodes", "--count", str(count),
                 "--address", address, "--node-id-prefix", f"sim{i}",
                 *extra], env=env, stdout=out, stderr=subprocess.DEVNULL))
            outs.append(out)
        t0 = time.monotonic()
        done = sim_scale.wait_registered(outs, 180)
        if done != len(outs):
            raise RuntimeError(f"{done} of {len(outs)} simulators had "
                               "registered their nodes after 180 s")
        register_s = round(time.monotonic() - t0, 1)
        time.sleep(12)  # past the first beats (full views) of the last nodes
        os.environ.update(SHOAL_ADDRESS=address, SHOAL_TOKEN=TOKEN)
        api.init()
        nodes = sum(1 for n in api.nodes() if n["Alive"])
        ready = tpu.get_num_ready_tpu_slices("4x4x4", "v5p")
        r = time_reservations(tpu, rounds, topology="4x4x4",
                              accelerator_version="v5p", num_slices=8)
        api.shutdown()
        return [{"case": "8 of 100 x v5p-128 among 10,000 simulated nodes",
                 "nodes": nodes, "ready_slices": ready,
                 "register_s": register_s, **r}]
    finally:
        sim_scale.stop(shoal, sims, head)


def main():
    # A SIGTERM (timeout, Ctrl-C's kin) still stops what the case started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser()
    ap.add_argument("--shoal", default="build/bin/shoal")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--cases", default="small,scale")
    a = ap.parse_args()
    shoal = os.path.abspath(a.shoal)
    cases = a.cases.split(",")
    if len(cases) > 1:  # each in a process (and a driver) of its own
        for case in cases:
            subprocess.run([sys.executable, __file__, "--shoal", shoal,
                            "--rounds", str(a.rounds), "--cases", case],
                           check=True)
        return 0
    for line in {"small": small, "scale": scale}[cases[0]](shoal, a.rounds):
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
