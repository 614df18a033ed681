"""The seed walkthrough in Python, on a TPU slice (real, or simulated with
`shoal dev fake-tpu`): a task on one chip, a task on every chip of one
host, one such task per host (host-centric, as multi-controller JAX runs),
and one process per chip through `shoal launch --per-device`. The C++
version is examples/seed_walkthrough.cc.

  PYTHONPATH=build/python /usr/bin/python3 examples/python/seed_walkthrough.py
"""

import os
import subprocess
import sys

import shoal
from shoal.util import tpu

CHIPS_PER_HOST = 4

# What each process of `shoal launch --per-device` prints.
LAUNCHED_PROGRAM = (
    "import os; print(' '.join(k + '=' + os.environ.get(k, '') for k in "
    "('RANK', 'WORLD_SIZE', 'TPU_VISIBLE_CHIPS')))")


def held_chips():
    """The TPU chips this process was given, as Ray reports them."""
    return shoal.get_runtime_context().get_accelerator_ids()["TPU"]


def global_device_count():
    """The chips of this process's slice, as JAX would count them: the
    chips this host gave it (TPU_VISIBLE_CHIPS) times the slice's hosts
    (TPU_WORKER_HOSTNAMES, else TPU_ACCELERATOR_TYPE)."""
    visible = os.environ.get("TPU_VISIBLE_CHIPS", "")
    chips = len([c for c in visible.split(",") if c])
    return chips * (tpu.get_current_pod_worker_count() or 1)


@shoal.remote(resources={"TPU": 1})
def one_device():
    """Where a one-chip task runs, and the chip it holds."""
    node = shoal.get_runtime_context().get_node_id()
    return f"{node} holds TPU {held_chips()}"


@shoal.remote(resources={"TPU": CHIPS_PER_HOST})
def every_device_of_this_host():
    """(line, global device count) for a task holding a whole host."""
    held = shoal.get_runtime_context().get_assigned_devices()
    count = global_device_count()
    line = (f"{shoal.get_runtime_context().get_node_id()} (worker "
            f"{held['worker_id']} of slice {held['slice_name']}) holds TPU "
            f"{held_chips()}: {count} devices in the slice")
    return line, count


def tpu_hosts():
    """The alive nodes with a whole TPU host's chips."""
    return [n for n in shoal.nodes() if n["Alive"]
            and n["Resources"].get("TPU", 0) >= CHIPS_PER_HOST]


def shoal_cli():
    """The `shoal` command, found as shoal.init() finds it for a local
    cluster: SHOAL_CLI, else the build's, else PATH's."""
    try:
        return shoal._cluster_program()
    except shoal.ShoalError:
        return "shoal"


def rank_of(line):
    """The rank `shoal launch` puts before a process's line ("[rank 3
    host 0 chip 3] ..."); lines of the launch itself sort last."""
    if line.startswith("[rank "):
        return int(line.split()[1])
    return sys.maxsize


def run():
    shoal.init()
    hosts = len(tpu_hosts())
    chips = int(shoal.cluster_resources().get("TPU", 0))
    print(f"Cluster: {chips} TPU chips, {hosts} host(s) of {CHIPS_PER_HOST}")
    if hosts < 1:
        print(f"seed_walkthrough.py: no TPU host of {CHIPS_PER_HOST} chips: "
              "start nodes on TPU hosts (or fake ones: shoal dev fake-tpu)",
              file=sys.stderr)
        return 1

    print("\n1. One device (a task holding one chip):")
    print(f"  {shoal.get(one_device.remote())}")

    print(f"\n2. One host, every device (a TPU: {CHIPS_PER_HOST} task):")
    line, _ = shoal.get(every_device_of_this_host.remote())
    print(f"  {line}")

    print(f"\n3. Every host, every device (one TPU: {CHIPS_PER_HOST} task "
          "per host, host-centric):")
    # The slice's hosts as one gang, so that each task lands on a host of
    # its own, in worker-id order.
    reservation = tpu.reserve_slice(timeout_seconds=60)
    try:
        per_host = shoal.get([
            every_device_of_this_host.options(
                scheduling_strategy=reservation.strategy(h)).remote()
            for h in range(reservation.num_hosts)])
    finally:
        reservation.remove()
    for line, _ in per_host:
        print(f"  {line}")
    print(f"  {[count for _, count in per_host]}")
    # The launch reserves the slice's hosts itself; this driver is done.
    shoal.shutdown()

    print("\n4. Device-centric (one process per chip: shoal launch "
          f"--per-device --slice {reservation.slice_name}):")
    sys.stdout.flush()
    launch = subprocess.run(
        [shoal_cli(), "launch", "--per-device", "--slice",
         reservation.slice_name, "--", sys.executable, "-c",
         LAUNCHED_PROGRAM],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # The processes print at once; their lines are shown in rank order.
    for line in sorted(launch.stdout.splitlines(), key=rank_of):
        print(f"  {line}")
    return launch.returncode


def main():
    try:
        return run()
    except shoal.ShoalError as e:
        # No cluster to join, a wrong token, a task that failed.
        print(f"seed_walkthrough.py: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
