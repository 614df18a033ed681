#!/usr/bin/env python3
"""The cost of a program's first start on a fresh cluster against its next.

Starts a cluster of two simulated TPU v5p-16 hosts on this machine (as
scripts/demo does: `shoal dev fake-tpu`, a head and a second node, each
with a temp dir of its own), then times, each once on the fresh cluster and
again right after:

  launch_per_host_first_s / _second_s     shoal launch --per-host -- true
  launch_per_device_first_s / _second_s   shoal launch --per-device -- true
                                          (8 processes, one per chip)
  hello_tasks_first_s / _second_s         hello_tasks 100 (a C++ driver)
  blob_bytes_after_<program>              what the head holds in its
                                          session's blobs/ after it

and prints one `name value unit` line per figure. The goals (the README's
"A program's first start"): a first launch within 2x of the second, a first
hello_tasks under 1 s above the second, and no bytes sent to the head when
every node is on the driver's host.

  bench/first_start_bench.py --build build [--rounds 3]

Each round starts a fresh cluster; the figures are the medians.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def run(argv, env, timeout=120):
    start = time.monotonic()
    done = subprocess.run(argv, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=timeout)
    took = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n"
                 f"{done.stdout.decode(errors='replace')[-4000:]}")
    return took


def blob_bytes(session):
    total = 0
    for root, _, files in os.walk(os.path.join(session, "blobs")):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def fake_tpu_env(shoal, worker, root, base):
    out = subprocess.run([shoal, "dev", "fake-tpu", "--type", "v5p-16",
                          "--worker", str(worker), "--root", root],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    env = dict(base)
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("export "):
            line = line[len("export "):]
        if "=" in line:
            key, value = line.split("=", 1)
            env[key] = value.strip("'\"")
    return env


def one_round(build):
    shoal = os.path.join(build, "bin", "shoal")
    hello = os.path.join(build, "bin", "hello_tasks")
    root = tempfile.mkdtemp(prefix="shoal-first-start-")
    base = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
    head_dir, node_dir = os.path.join(root, "host-a"), os.path.join(root,
                                                                    "host-b")
    figures = {}
    try:
        env_a = fake_tpu_env(shoal, 0, os.path.join(root, "tpu-0"), base)
        env_b = fake_tpu_env(shoal, 1, os.path.join(root, "tpu-1"), base)
        run([shoal, "start", "--head", "--port", "0", "--node-ip-address",
             "127.0.0.1", "--temp-dir", head_dir, "--include-dashboard",
             "false"], env_a)
        session = os.path.join(head_dir, "session_latest")
        with open(os.path.join(session, "cluster_address")) as f:
            address = f.read().strip()
        token_file = os.path.join(session, "token")
        run([shoal, "start", "--address", address, "--token-file", token_file,
             "--node-ip-address", "127.0.0.1", "--temp-dir", node_dir], env_b)
        env = dict(base, SHOAL_TEMP_DIR=head_dir)
        steps = [
            ("launch_per_host", [shoal, "launch", "--per-host", "--", "true"]),
            ("launch_per_device",
             [shoal, "launch", "--per-device", "--", "true"]),
            ("hello_tasks", [hello, "100"]),
        ]
        for name, argv in steps:
            figures[f"{name}_first_s"] = run(argv, env)
            figures[f"blob_bytes_after_{name}"] = blob_bytes(session)
            figures[f"{name}_second_s"] = run(argv, env)
    finally:
        subprocess.run([shoal, "stop", "--temp-dir", node_dir],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run([shoal, "stop", "--temp-dir", head_dir],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(root, ignore_errors=True)
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rounds = [one_round(args.build) for _ in range(args.rounds)]
    for name in rounds[0]:
        value = statistics.median(r[name] for r in rounds)
        unit = "bytes" if name.startswith("blob_bytes") else "s"
        print(f"{name} {value:.3f} {unit}" if unit == "s" else
              f"{name} {int(value)} {unit}")
    for name in ("launch_per_host", "launch_per_device", "hello_tasks"):
        first = statistics.median(r[f"{name}_first_s"] for r in rounds)
        second = statistics.median(r[f"{name}_second_s"] for r in rounds)
        print(f"{name}_first_over_second {first / second:.2f} x")
        print(f"{name}_first_minus_second {first - second:.3f} s")


if __name__ == "__main__":
    main()
