"""TPU helpers, with the names of Ray's ``ray.util.accelerators.tpu`` and
``ray.util.tpu``: what this host's slice is, and reserving every host of a
slice as one gang.

    from shoal.util import tpu
    slice = tpu.reserve_slice()       # every host of a slice, or none
    refs = [step.options(scheduling_strategy=slice.strategy(i)).remote()
            for i in range(slice.num_hosts)]
"""

import os

from shoal import _shoal
from shoal.util.placement_group import PlacementGroup
from shoal.util.scheduling_strategies import PlacementGroupSchedulingStrategy


def get_current_pod_name():
    """The slice this host belongs to (TPU_NAME), or None."""
    return os.environ.get("TPU_NAME") or None


def get_current_pod_worker_count():
    """The number of hosts of this host's slice, or None off a TPU."""
    hostnames = os.environ.get("TPU_WORKER_HOSTNAMES")
    if hostnames:
        return len(hostnames.split(","))
    accelerator = os.environ.get("TPU_ACCELERATOR_TYPE")
    return _hosts_of(accelerator) if accelerator else None


def get_num_tpu_chips_on_node():
    """The chips this process was given (all of the host's in a task that
    holds them), else those the host has."""
    held = _shoal.assigned_devices()
    if held["kind"] == "TPU":
        return len(held["ids"])
    root = os.environ.get("SHOAL_DEVICE_ROOT", "/")
    dev = os.path.join(root, "dev")
    try:
        return sum(1 for n in os.listdir(dev) if n.startswith("accel")
                   and not os.path.isdir(os.path.join(dev, n)))
    except OSError:
        return 0


def _hosts_of(accelerator_type):
    """Hosts of a slice type ("v5p-16" -> 2), from its chip count."""
    try:
        generation, cores = accelerator_type.rsplit("-", 1)
        cores = int(cores)
    except ValueError:
        return None
    # v2-v4 and v5p count TensorCores (2 per chip); v5e and v6e count chips.
    chips = cores // 2 if generation in ("v2", "v3", "v4", "v5p") else cores
    per_host = 4 if generation in ("v2", "v3", "v4", "v5p") else min(chips, 8)
    return max(1, chips // per_host)


class SliceReservation:
    """Every host of one TPU slice, reserved as a STRICT_SPREAD group with
    one bundle per host in TPU worker-id order."""

    def __init__(self, info):
        # The bundles ReserveTpuSlice (src/api/api.cc) made: each host's
        # chips, a CPU, and the slice's name.
        bundle = {"TPU": info["chips_per_host"], "CPU": 1,
                  info["slice_name"]: 1}
        self.placement_group = PlacementGroup(
            info["id"], [dict(bundle) for _ in range(info["bundles"])])
        self.slice_name = info["slice_name"]
        self.accelerator_type = info["accelerator_type"]
        self.chips_per_host = info["chips_per_host"]
        self.hosts = list(info["hosts"])

    @property
    def num_hosts(self):
        return len(self.hosts)

    def strategy(self, host_index):
        """Runs a task on host ``host_index`` (its TPU worker id)."""
        return PlacementGroupSchedulingStrategy(self.placement_group,
                                                host_index)

    def remove(self):
        _shoal.remove_placement_group(self.placement_group.id,
                                      self.placement_group.bundle_count)


def reserve_slice(slice_name="", timeout_seconds=None):
    """Reserves every host of ``slice_name`` (any free slice when empty)."""
    from shoal import _require_init
    _require_init()
    timeout_ms = -1 if timeout_seconds is None else int(timeout_seconds * 1000)
    return SliceReservation(_shoal.reserve_tpu_slice(slice_name, timeout_ms))
