"""Figures for the Python frontend, printed as `name value unit` lines like
shoal_bench's, on the same cluster shape: a head and two node agents on this
host, 2 CPUs each. Run from the source folder after a build:

    PYTHONPATH=build/python /usr/bin/python3 bench/py_bench.py [--tasks N]

It starts the cluster with the `shoal` CLI in fresh temp dirs and stops it
at the end.

    py_tasks_async_per_s        20,000 no-op tasks submitted, then gathered
    py_tasks_sync_per_s         submit one no-op task, get it, repeat
    py_actor_calls_sync_per_s   one actor: call a no-op method, get it
    py_actor_calls_async_per_s  one actor: submit every call, then gather
    py_put_GBps / py_get_GBps   a 256 MiB numpy array: one copy in, mapped
                                back without a copy
"""

import argparse
import os
import shutil
import subprocess
import tempfile
import time

import numpy as np

import shoal

SIZE = 256 << 20  # bytes per object, as the goal table says
ROUNDS = 5


def best_rate(fn, nbytes, rounds=ROUNDS):  # memcpy's ceiling
    """The best of `rounds` runs of fn(), in GB/s of `nbytes`."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return nbytes / best / 1e9


def _cli():
    if os.environ.get("SHOAL_CLI"):
        return os.environ["SHOAL_CLI"]
    try:
        from shoal._build import SHOAL_CLI
        return SHOAL_CLI
    except ImportError:
        return shutil.which("shoal") or "shoal"


class TwoAgents:
    """A head (with its agent) and a second agent, `cpus` CPUs each."""

    def __init__(self, cpus):
        self.root = tempfile.mkdtemp(prefix="shoal-pybench-")
        self.dirs = [os.path.join(self.root, name) for name in ("a", "b")]
        self._cli("start", "--head", "--port", "0", "--num-cpus", str(cpus),
                  temp_dir=self.dirs[0])
        session = os.path.join(self.dirs[0], "session_latest")
        with open(os.path.join(session, "cluster_address")) as f:
            address = f.read().strip()
        with open(os.path.join(session, "token")) as f:
            token = f.read().strip()
        self._cli("start", "--address", address, "--token", token,
                  "--num-cpus", str(cpus), temp_dir=self.dirs[1])
        os.environ["SHOAL_TEMP_DIR"] = self.dirs[0]
        os.environ.pop("SHOAL_ADDRESS", None)
        os.environ.pop("SHOAL_TOKEN", None)

    def _cli(self, *args, temp_dir):
        if args[0] == "start":
            args += ("--node-ip-address", "127.0.0.1")
        subprocess.run([_cli(), *args, "--temp-dir", temp_dir], check=True,
                       capture_output=True, timeout=120)

    def stop(self):
        for d in reversed(self.dirs):
            self._cli("stop", temp_dir=d)
        shutil.rmtree(self.root, ignore_errors=True)


@shoal.remote
def noop(i):
    return i


@shoal.remote
class Echo:
    def echo(self, i):
        return i


def task_figures(num_tasks, num_sync):
    shoal.get([noop.remote(i) for i in range(2000)])  # workers started
    best_async = 0.0
    for round_ in range(3):
        start = time.perf_counter()
        values = shoal.get([noop.remote(i) for i in range(num_tasks)])
        rate = num_tasks / (time.perf_counter() - start)
        assert values == list(range(num_tasks))
        print(f"# async round {round_}: {rate:.0f} tasks/s")
        best_async = max(best_async, rate)
    latencies = []
    start = time.perf_counter()
    for i in range(num_sync):
        t0 = time.perf_counter()
        assert shoal.get(noop.remote(i)) == i
        latencies.append(time.perf_counter() - t0)
    sync = num_sync / (time.perf_counter() - start)
    latencies.sort()
    print(f"py_tasks_async_per_s {best_async:.0f} tasks/s")
    print(f"py_tasks_sync_per_s {sync:.0f} tasks/s")
    print(f"py_task_roundtrip_p50_us "
          f"{latencies[len(latencies) // 2] * 1e6:.1f} us")


def actor_figures(num_calls, num_sync):
    actor = Echo.remote()
    shoal.get([actor.echo.remote(i) for i in range(1000)])
    start = time.perf_counter()
    for i in range(num_sync):
        assert shoal.get(actor.echo.remote(i)) == i
    sync = num_sync / (time.perf_counter() - start)
    best_async = 0.0
    for _ in range(3):
        start = time.perf_counter()
        values = shoal.get([actor.echo.remote(i) for i in range(num_calls)])
        best_async = max(best_async,
                         num_calls / (time.perf_counter() - start))
        assert values == list(range(num_calls))
    shoal.kill(actor)
    print(f"py_actor_calls_sync_per_s {sync:.0f} calls/s")
    print(f"py_actor_calls_async_per_s {best_async:.0f} calls/s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--sync", type=int, default=3000)
    parser.add_argument("--cpus-per-node", type=int, default=2)
    args = parser.parse_args()
    cluster = TwoAgents(args.cpus_per_node)
    try:
        shoal.init()
        print(f"# cluster: head + 2 node agents on this host, "
              f"{args.cpus_per_node} CPU each; {os.cpu_count()} hardware "
              "threads")
        task_figures(args.tasks, args.sync)
        actor_figures(args.tasks, args.sync)
        object_figures()
    finally:
        shoal.shutdown()
        cluster.stop()


def object_figures():
    array = np.random.default_rng(0).integers(
        0, 255, SIZE, dtype=np.uint8)
    target = np.empty_like(array)

    memcpy = best_rate(lambda: np.copyto(target, array), SIZE)
    # As shoal_bench's object rounds: put, get, read, then the ref goes (its
    # store pages are reused by the next round's put once it is deleted).
    put = get = read = 0.0
    for i in range(ROUNDS):
        start = time.perf_counter()
        ref = shoal.put(array)
        put_s = time.perf_counter() - start
        print(f"# round {i}: put {SIZE / put_s / 1e9:.2f} GB/s" +
              (" (store pages touched for the first time)" if i == 0 else ""))
        put = max(put, SIZE / put_s / 1e9)
        start = time.perf_counter()
        back = shoal.get(ref)
        get = max(get, SIZE / (time.perf_counter() - start) / 1e9)
        start = time.perf_counter()
        total = int(back.sum(dtype=np.uint64))
        read = max(read, SIZE / (time.perf_counter() - start) / 1e9)
        assert total == int(array.sum(dtype=np.uint64))
        del back, ref

    small = [shoal.put(i) for i in range(2000)]
    start = time.perf_counter()
    for _ in range(3):
        small = [shoal.put(i) for i in range(2000)]
    puts_per_s = 6000 / (time.perf_counter() - start)
    start = time.perf_counter()
    for _ in range(3):
        shoal.get(small)
    gets_per_s = 6000 / (time.perf_counter() - start)

    print(f"# numpy uint8 array of {SIZE >> 20} MiB; best of {ROUNDS}")
    print(f"py_put_GBps {put:.2f} GB/s")
    print(f"py_get_GBps {get:.1f} GB/s")
    print(f"py_get_and_read_GBps {read:.2f} GB/s")
    print(f"py_memcpy_GBps {memcpy:.2f} GB/s")
    print(f"py_put_vs_memcpy {put / memcpy:.2f} x")
    print(f"py_put_calls_per_s {puts_per_s:.0f} calls/s")
    print(f"py_get_calls_per_s {gets_per_s:.0f} calls/s")


if __name__ == "__main__":
    main()
