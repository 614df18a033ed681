"""A test stand-in for JAX, which Debian does not package.

The guide's snippets call ``jax.device_count()`` in Shoal tasks; this
module answers the way JAX on a TPU host would, from nothing but the
environment variables that Shoal's node agent and ``shoal launch`` set
(TPU_VISIBLE_CHIPS, the bounds variables, TPU_WORKER_HOSTNAMES,
TPU_ACCELERATOR_TYPE, ...): it reports the chips it was given. Put the
folder above this package on PYTHONPATH to use it.
"""

import os

__version__ = "0.0+shoal.stand.in"

# Generations whose accelerator type counts TensorCores, two per chip; their
# multi-host slices have 4 chips per host.
_CORE_COUNTED = ("v2", "v3", "v4", "v5p")


class Device:
    """One device, as ``jax.devices()`` lists it."""

    def __init__(self, device_id, process_index, platform):
        self.id = device_id
        self.process_index = process_index
        self.platform = platform

    def __repr__(self):
        return (f"{self.platform.capitalize()}Device(id={self.id}, "
                f"process_index={self.process_index})")


def _ints(name):
    """The comma-separated integers of variable ``name``, or None."""
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    return [int(v) for v in value.split(",") if v.strip()]


def _product(values):
    out = 1
    for v in values:
        out *= v
    return out


def _slice_shape():
    """(chips, chips per host) of TPU_ACCELERATOR_TYPE, or None."""
    accelerator = os.environ.get("TPU_ACCELERATOR_TYPE", "")
    try:
        generation, count = accelerator.rsplit("-", 1)
        count = int(count)
    except ValueError:
        return None
    if generation in _CORE_COUNTED:
        chips = max(1, count // 2)
        return chips, min(chips, 4)
    chips = count  # v5litepod (v5e) and v6e count chips
    return chips, chips if chips <= 8 else 4


def _on_tpu():
    return (os.environ.get("TPU_VISIBLE_CHIPS") is not None
            or _slice_shape() is not None)


def default_backend():
    return "tpu" if _on_tpu() else "cpu"


def local_device_count():
    """The chips this process was given (TPU_VISIBLE_CHIPS), else all of
    the host's; one CPU device off a TPU host."""
    visible = _ints("TPU_VISIBLE_CHIPS")
    if visible is not None:
        return len(visible)
    bounds = _ints("TPU_CHIPS_PER_HOST_BOUNDS")
    if bounds is not None:
        return _product(bounds)
    shape = _slice_shape()
    return shape[1] if shape else 1


def process_count():
    """The processes of this process's slice: one per chip under
    TPU_PROCESS_BOUNDS (one process per device), one for a task holding
    part of a host (TPU_HOST_BOUNDS=1,1,1), else one per host."""
    for name in ("TPU_PROCESS_BOUNDS", "TPU_HOST_BOUNDS"):
        bounds = _ints(name)
        if bounds is not None:
            return _product(bounds)
    if os.environ.get("JAX_NUM_PROCESSES"):
        return int(os.environ["JAX_NUM_PROCESSES"])
    hostnames = os.environ.get("TPU_WORKER_HOSTNAMES", "")
    if hostnames:
        return len(hostnames.split(","))
    shape = _slice_shape()
    return max(1, shape[0] // shape[1]) if shape else 1


def process_index():
    """This process's index in its slice, 0-based."""
    if _ints("TPU_PROCESS_BOUNDS") is not None:
        return int(os.environ.get("CLOUD_TPU_TASK_ID", "0"))
    if process_count() == 1:
        return 0
    for name in ("JAX_PROCESS_ID", "TPU_WORKER_ID"):
        if os.environ.get(name):
            return int(os.environ[name])
    return 0


def device_count():
    """The devices of the whole slice: every process has as many as this
    one."""
    return local_device_count() * process_count()


def devices():
    """Every device of the slice, process by process."""
    per_process = local_device_count()
    platform = default_backend()
    return [Device(p * per_process + i, p, platform)
            for p in range(process_count()) for i in range(per_process)]


def local_devices():
    """The devices of this process."""
    me = process_index()
    return [d for d in devices() if d.process_index == me]
