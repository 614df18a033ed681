#!/usr/bin/python3
"""What a stranger flood on the head's RPC port costs the cluster.

Starts a one-node cluster of its own (`build/bin/shoal start --head` in a
temp dir), measures `shoal status` and a program of one task on it, then
lets a peer without the token hold N TCP connections to the head's RPC port
(3,000 by default), opening a new one for each the head drops, and measures
the same again while it does. Prints one `name value unit` line per figure:

  connections_held_median      connections the peer had open (sampled every
                               0.1 s while the figures were taken; the
                               rest were being reopened)
  connections_opened           connections the peer opened in all
  connections_dropped          of them, dropped by the head
  status_median_s / _max_s     `shoal status`, over --runs runs
  task_program_median_s / _max_s
                               a program (hello_tasks 1) that connects and
                               runs one task, over 3 runs
  head_rss_peak_mib            the head's peak RSS (VmHWM)

each figure once without the peer (`_quiet`) and once with it (`_flood`).
Nothing is asserted: tests/integration/rpc_strangers_test.cc checks the
promise, this prints what it costs.

  /usr/bin/python3 bench/rpc_strangers_bench.py --build build \\
      [--strangers 3000] [--runs 10] [--kind silent|partial]

--kind partial: each connection sends the first bytes of a hello and stalls.
"""
import argparse
import os
import resource
import selectors
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time


def clean_env():
    return {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}


def read(path):
    with open(path) as f:
        return f.read().strip()


def vm_hwm_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def timed(argv, env, timeout=120):
    start = time.monotonic()
    done = subprocess.run(argv, env=env, timeout=timeout,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace")
    took = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n"
                 f"{done.stdout[-3000:]}")
    return took


class Flood:
    """N connections to host:port, each reopened as soon as it is dropped,
    until stop(). Each sends nothing, or the start of a hello (a header that
    promises 200 bytes more)."""

    PARTIAL_HELLO = struct.pack("<IB", 13 + 200, 1) + b"\0" * 4

    def __init__(self, host, port, n, partial, threads=2):
        self.addr = (host, port)
        self.partial = partial
        self.opened = self.dropped = self.failed = 0
        self.held = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        shares = [n // threads + (i < n % threads) for i in range(threads)]
        self.threads = [threading.Thread(target=self._hold, args=(k,),
                                         daemon=True) for k in shares]
        for t in self.threads:
            t.start()

    def _open(self, sel):
        try:
            s = socket.create_connection(self.addr, timeout=1)
            if self.partial:
                s.sendall(self.PARTIAL_HELLO)
            s.setblocking(False)
        except OSError:
            with self.lock:
                self.failed += 1
            return False
        sel.register(s, selectors.EVENT_READ)
        with self.lock:
            self.opened += 1
            self.held += 1
        return True

    def _hold(self, n):
        sel = selectors.EpollSelector()
        missing = n
        while not self.stopping.is_set():
            while missing > 0 and not self.stopping.is_set():
                if not self._open(sel):
                    break
                missing -= 1
            for key, _ in sel.select(0.01 if missing else 0.1):
                s = key.fileobj
                try:
                    while s.recv(4096):
                        pass
                except BlockingIOError:
                    continue
                except OSError:
                    pass
                sel.unregister(s)
                s.close()
                missing += 1
                with self.lock:
                    self.held -= 1
                    self.dropped += 1
        for key in list(sel.get_map().values()):
            key.fileobj.close()
        sel.close()

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(30)


def measure(shoal, hello, temp_dir, env, runs):
    status = [timed([shoal, "status", "--temp-dir", temp_dir], env)
              for _ in range(runs)]
    program = [timed([hello, "1"], env) for _ in range(3)]
    return {
        "status_median_s": statistics.median(status),
        "status_max_s": max(status),
        "task_program_median_s": statistics.median(program),
        "task_program_max_s": max(program),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--strangers", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--kind", choices=("silent", "partial"),
                        default="silent")
    args = parser.parse_args()
    shoal = os.path.join(args.build, "bin", "shoal")
    hello = os.path.join(args.build, "bin", "hello_tasks")
    for path in (shoal, hello):
        if not os.access(path, os.X_OK):
            sys.exit(f"{path} is missing: build it first (cmake --build "
                     f"{args.build} --target shoal_cli hello_tasks)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < args.strangers + 200:
        sys.exit(f"{args.strangers} connections need more open files than "
                 f"the hard limit ({hard}): raise it (ulimit -Hn)")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    root = tempfile.mkdtemp(prefix="shoal-strangers-bench-")
    temp_dir = os.path.join(root, "head")
    env = clean_env()
    flood = None
    try:
        timed([shoal, "start", "--head", "--port", "0", "--node-ip-address",
               "127.0.0.1", "--include-dashboard", "false", "--num-cpus", "2",
               "--temp-dir", temp_dir], env)
        session = os.path.join(temp_dir, "session_latest")
        address = read(os.path.join(session, "cluster_address"))
        head_pid = int(read(os.path.join(session, "head.pid")))
        program_env = dict(env, SHOAL_ADDRESS=address,
                           SHOAL_TOKEN=read(os.path.join(session, "token")))
        host, port = address.rsplit(":", 1)

        figures = {}
        for name, value in measure(shoal, hello, temp_dir, program_env,
                                   args.runs).items():
            figures[f"{name}_quiet"] = value
        figures["head_rss_peak_mib_quiet"] = vm_hwm_mib(head_pid)

        flood = Flood(host, int(port), args.strangers, args.kind == "partial")
        # Every connection opened once, and as many dropped: the head is
        # busy dropping and the peer reopening.
        deadline = time.monotonic() + 120
        while (min(flood.opened, flood.dropped) < args.strangers and
               time.monotonic() < deadline):
            time.sleep(0.1)
        samples = []
        sampling = threading.Event()

        def sample():
            while not sampling.is_set():
                samples.append(flood.held)
                time.sleep(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        for name, value in measure(shoal, hello, temp_dir, program_env,
                                   args.runs).items():
            figures[f"{name}_flood"] = value
        sampling.set()
        sampler.join()
        figures["head_rss_peak_mib_flood"] = vm_hwm_mib(head_pid)
        flood.stop()
        print(f"strangers {args.strangers} ({args.kind})")
        print(f"connections_held_median {int(statistics.median(samples))} "
              "connections")
        print(f"connections_opened {flood.opened} connections")
        print(f"connections_dropped {flood.dropped} connections")
        print(f"connections_not_taken {flood.failed} connections")
        for name, value in figures.items():
            unit = "MiB" if "rss" in name else "s"
            print(f"{name} {value:.3f} {unit}")
    finally:
        if flood is not None:
            flood.stop()
        subprocess.run([shoal, "stop", "--temp-dir", temp_dir], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=120)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
