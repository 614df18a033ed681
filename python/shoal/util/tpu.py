"""TPU helpers, with the names of Ray's ``ray.util.accelerators.tpu`` and
``ray.util.tpu``: what this host's slice is, whole slices reserved by
topology (one group, or one per slice, all or nothing), a function run on
every host of a slice, and the variables of a multi-slice JAX job.

    from shoal.util import tpu
    slices = tpu.slice_placement_group("2x2x2", "v5p", num_slices=2)
    shoal.get(slices.placement_group.ready())
    refs = tpu.dispatch(step, tpu_slice=slices)   # one task per host

    slice = tpu.reserve_slice()       # one named slice, every host or none
"""

import math
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
        # The bundles ReserveTpuSlice (src/api/tpu.cc) made: each host's
        # chips and a CPU, pinned to the host by label.
        bundle = {"TPU": info["chips_per_host"], "CPU": 1}
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


# Ray's TPU generations (ray._private.accelerators.tpu.VALID_TPU_TYPES).
VALID_TPU_TYPES = ("v2", "v3", "v4", "v5p", "v5litepod", "v6e")


def get_tpu_version_from_type(accelerator_type):
    """The generation of an accelerator type: "TPU-V6E" -> "v6e"."""
    lower = accelerator_type.lower()
    if lower.startswith("tpu-"):
        version = lower[len("tpu-"):]
    elif lower.startswith("tpu"):
        version = "v" + lower[len("tpu"):]
    else:
        version = lower
    if version == "v5e":
        version = "v5litepod"
    if version not in VALID_TPU_TYPES:
        raise ValueError(
            f"Invalid accelerator_type: {accelerator_type}. Must be one of "
            f"{list(VALID_TPU_TYPES)} or start with 'TPU-' followed by a "
            "valid type.")
    return version


def _check_resource_per_chip(tpu_resource_per_chip):
    if tpu_resource_per_chip not in (None, 1):
        raise ValueError(
            "tpu_resource_per_chip other than 1 (devices per chip) is not "
            "supported by Shoal: its TPU generations (v2-v6e) have one "
            "device per chip")


def _shape(topology, accelerator_type, chips_per_vm=None):
    """(pod type, hosts, chips per host, chips) of one slice."""
    version = get_tpu_version_from_type(accelerator_type)
    try:
        shape = _shoal.slice_shape(topology.strip().lower(), version)
    except _shoal.ShoalError as e:
        raise ValueError(str(e)) from None
    if chips_per_vm is not None and chips_per_vm != shape[2]:
        raise ValueError(
            f"chips_per_vm={chips_per_vm}: a {shape[0]} host has {shape[2]} "
            "chips in Shoal; leave chips_per_vm out")
    return shape


def get_tpu_worker_resources(topology, accelerator_type,
                             resources_per_worker=None, num_slices=1,
                             chips_per_vm=None, tpu_resource_per_chip=None):
    """(number of workers, one worker's resources) for ``num_slices``
    slices of ``topology``: by default one worker per host, holding its
    chips and a CPU."""
    _check_resource_per_chip(tpu_resource_per_chip)
    _, hosts, chips_per_host, chips = _shape(topology, accelerator_type,
                                             chips_per_vm)
    resources = dict(resources_per_worker or {})
    resources.setdefault("CPU", 1)
    resources.setdefault("TPU", chips_per_host)
    per_worker = resources["TPU"]
    if per_worker <= 0:
        raise ValueError("TPU resources must be positive.")
    if chips % per_worker != 0:
        raise ValueError(
            f"The requested resources per worker ({per_worker} TPU devices) "
            f"do not divide evenly into the TPU devices available per slice "
            f"({chips}).")
    return int(chips * num_slices // per_worker), resources


def get_tpu_num_slices_for_workers(topology, accelerator_type, num_workers,
                                   resources_per_worker=None,
                                   tpu_resource_per_chip=None):
    """How many slices ``num_workers`` workers of that shape need."""
    if not topology or not accelerator_type:
        return 1
    try:
        per_slice, _ = get_tpu_worker_resources(
            topology, accelerator_type, resources_per_worker, 1,
            tpu_resource_per_chip=tpu_resource_per_chip)
    except ValueError:
        return 1
    return max(1, math.ceil(num_workers / per_slice)) if per_slice else 1


def get_tpu_coordinator_env_vars(coordinator_address, num_slices, slice_id,
                                 coordinator_port="8081"):
    """The variables of one slice of a multi-slice JAX job (the MEGASCALE
    contract; ``shoal launch --num-slices`` sets them itself)."""
    return {
        "MEGASCALE_COORDINATOR_ADDRESS": coordinator_address,
        "MEGASCALE_PORT": str(coordinator_port),
        "MEGASCALE_NUM_SLICES": str(num_slices),
        "MEGASCALE_SLICE_ID": str(slice_id),
    }


def get_tpu_slice_name_from_node(node):
    """The slice of a node dict (as ``shoal.nodes()`` gives), or None."""
    labels = node.get("Labels") or {}
    return (labels.get("ray.io/tpu-slice-name")
            or labels.get("shoal.io/tpu-slice-name"))


def get_tpu_nodes_for_slice(slice_name, nodes=None):
    """The live nodes of slice ``slice_name``."""
    if nodes is None:
        import shoal
        if not shoal.is_initialized():
            return []
        nodes = shoal.nodes()
    return [n for n in nodes if n.get("Alive")
            and get_tpu_slice_name_from_node(n) == slice_name]


def get_num_ready_tpu_slices(topology, accelerator_type,
                             tpu_resource_per_chip=None):
    """How many slices of ``topology`` are whole (every host alive with all
    its chips) and idle now."""
    _check_resource_per_chip(tpu_resource_per_chip)
    from shoal import _require_init
    _require_init()
    return _shoal.count_ready_slices(
        topology.strip().lower(), get_tpu_version_from_type(accelerator_type))


class SlicePlacementGroup:
    """Whole TPU slices of one topology reserved together (Ray's
    ``ray.util.tpu.SlicePlacementGroup``): ``num_slices`` slices that are
    whole, idle ones first, in one placement group or one per slice
    (``pg_per_slice``), every slice or none. Bundles go slice after slice,
    and within a slice in TPU worker-id order, each pinned by label to its
    host.

    Where Shoal differs from Ray: the slices are chosen by the driver from
    the cluster's node records and pinned by label, so there are no head
    placement groups (``head_placement_groups`` is empty and
    ``release_head_pgs`` does nothing); ``tpu_resource_per_chip`` must be
    1 and ``chips_per_vm`` the host's own count."""

    def __init__(self, topology, accelerator_version,
                 resources_per_bundle=None, strategy="SPREAD", name="",
                 lifetime=None, num_slices=1, chips_per_vm=None,
                 head_reservation_timeout_s=None, bundle_label_selector=None,
                 pg_per_slice=False, tpu_resource_per_chip=None):
        del head_reservation_timeout_s  # no head groups (see above)
        from shoal import _require_init
        from shoal.util.placement_group import _check_selectors
        _require_init()
        _check_resource_per_chip(tpu_resource_per_chip)
        if lifetime not in (None, "detached", "non_detached"):
            raise ValueError('lifetime must be "detached" or "non_detached"')
        self._topology = topology.strip().lower()
        self._accelerator_version = get_tpu_version_from_type(
            accelerator_version.strip())
        self._num_slices = num_slices
        self._pg_per_slice = pg_per_slice
        _, self._hosts_per_slice, self._chips_per_host, _ = _shape(
            self._topology, self._accelerator_version, chips_per_vm)
        self._num_bundles, self._bundle_resources = get_tpu_worker_resources(
            self._topology, self._accelerator_version, resources_per_bundle,
            num_slices)
        if bundle_label_selector and len(
                bundle_label_selector) != self._num_bundles:
            raise ValueError(
                f"bundle_label_selector length ({len(bundle_label_selector)})"
                f" must match the number of bundles ({self._num_bundles}).")
        selectors = _check_selectors(bundle_label_selector,
                                     self._num_bundles)
        info = _shoal.reserve_slices(
            self._topology, self._accelerator_version, num_slices,
            pg_per_slice,
            {k: float(v) for k, v in (resources_per_bundle or {}).items()},
            strategy, name or "", lifetime == "detached", selectors)
        self._slice_names = list(info["slice_names"])
        self._bundle_label_selector = [dict(s) for s in
                                       info["bundle_label_selector"]]
        per_group = len(self._bundle_label_selector) // len(info["groups"])
        self._groups = []
        for g, (group_id, count) in enumerate(info["groups"]):
            first = g * per_group
            self._groups.append(PlacementGroup(
                group_id, [dict(self._bundle_resources)] * count,
                f"{name}_slice_{g}" if name and pg_per_slice else name,
                self._bundle_label_selector[first:first + count]))

    @property
    def slice_placement_group(self):
        if self._pg_per_slice:
            raise ValueError(
                "pg_per_slice=True, use `slice_placement_groups` instead.")
        return self._groups[0] if self._groups else None

    @property
    def placement_group(self):
        return self.slice_placement_group

    @property
    def slice_placement_groups(self):
        if not self._pg_per_slice:
            raise ValueError(
                "pg_per_slice=False, use `slice_placement_group` instead.")
        return list(self._groups)

    @property
    def slice_names(self):
        """The slices reserved, in slice order (Shoal's addition)."""
        return list(self._slice_names)

    @property
    def tpu_resource_per_chip(self):
        return 1

    @property
    def chips_per_host(self):
        return self._chips_per_host

    @property
    def devices_per_host(self):
        return self._chips_per_host

    @property
    def num_hosts(self):
        return self._hosts_per_slice * self._num_slices

    @property
    def num_bundles(self):
        return self._num_bundles

    @property
    def topology(self):
        return self._topology

    @property
    def accelerator_version(self):
        return self._accelerator_version

    @property
    def num_slices(self):
        return self._num_slices

    @property
    def head_placement_groups(self):
        return []

    @property
    def bundle_label_selector(self):
        return [dict(s) for s in self._bundle_label_selector]

    @property
    def bundle_resources(self):
        return dict(self._bundle_resources)

    def release_head_pgs(self, slice_index=None):
        """Nothing to release: Shoal pins slices by label (see above)."""
        if slice_index is not None and not (
                0 <= slice_index < self._num_slices):
            raise ValueError(f"Invalid slice_index: {slice_index}.")

    def shutdown(self):
        """Gives every slice back. Idempotent."""
        groups, self._groups = self._groups, []
        for g in groups:
            try:
                _shoal.remove_placement_group(g.id, g.bundle_count)
            except _shoal.ShoalError:
                pass

    def __repr__(self):
        return (f"SlicePlacementGroup({self._num_slices} x "
                f"{self._accelerator_version} {self._topology}: "
                f"{', '.join(self._slice_names)})")


def slice_placement_group(topology, accelerator_version,
                          resources_per_bundle=None, num_slices=1,
                          chips_per_vm=None, pg_per_slice=False,
                          tpu_resource_per_chip=None, **kwargs):
    """Reserves ``num_slices`` slices of ``topology``; see
    SlicePlacementGroup. ``kwargs``: name, lifetime, strategy,
    bundle_label_selector."""
    return SlicePlacementGroup(
        topology=topology, accelerator_version=accelerator_version,
        resources_per_bundle=resources_per_bundle, num_slices=num_slices,
        chips_per_vm=chips_per_vm, pg_per_slice=pg_per_slice,
        tpu_resource_per_chip=tpu_resource_per_chip, **kwargs)


def dispatch(fn, *args, topology=None, accelerator_version=None,
             tpu_slice=None, slice_index=None, num_slices=1,
             chips_per_vm=None, head_reservation_timeout_s=None,
             pg_ready_timeout_s=None, **kwargs):
    """Runs remote function ``fn`` once on every host of a slice (each task
    in its host's bundle, holding the bundle's chips and no CPU); returns
    one ObjectRef per host, slice after slice, in worker-id order. With
    ``tpu_slice`` it uses that reservation (and leaves it); without, it
    reserves ``num_slices`` slices of ``topology`` for these tasks."""
    import shoal
    if not hasattr(fn, "options"):
        raise TypeError(
            "fn must be a @ray.remote-decorated function, but got "
            f"{type(fn).__name__!r} which has no .options() method.")
    owns = tpu_slice is None
    if slice_index is not None:
        if owns:
            raise ValueError("slice_index can only be used when an existing "
                             "tpu_slice is provided.")
        if not tpu_slice._pg_per_slice:
            raise ValueError("slice_index can only be used when tpu_slice "
                             "was created with pg_per_slice=True.")
        if not 0 <= slice_index < tpu_slice.num_slices:
            raise ValueError(
                f"Invalid slice_index {slice_index}. Must be between 0 and "
                f"{tpu_slice.num_slices - 1}.")
    if owns:
        if topology is None or accelerator_version is None:
            raise ValueError("topology and accelerator_version are required "
                             "when tpu_slice is not provided.")
        tpu_slice = SlicePlacementGroup(
            topology=topology, accelerator_version=accelerator_version,
            num_slices=num_slices, chips_per_vm=chips_per_vm,
            head_reservation_timeout_s=head_reservation_timeout_s)
    groups = list(tpu_slice._groups)
    if not groups:
        raise ValueError(
            "The provided tpu_slice has already been shut down. Create a new "
            "SlicePlacementGroup or pass tpu_slice=None to reserve one "
            "automatically.")
    if slice_index is not None:
        groups = [groups[slice_index]]
    ready, _ = shoal.wait([g.ready() for g in groups],
                          num_returns=len(groups), timeout=pg_ready_timeout_s)
    if len(ready) != len(groups):
        if owns:
            tpu_slice.shutdown()
        raise TimeoutError(
            f"TPU slice placement group was not ready within "
            f"{pg_ready_timeout_s}s. Ensure your cluster has sufficient TPU "
            "resources available.")
    try:
        shoal.get(ready)
    except Exception:
        if owns:
            tpu_slice.shutdown()
        raise
    chips = tpu_slice.bundle_resources.get("TPU", tpu_slice.devices_per_host)
    refs = []
    for group in groups:
        for index in range(group.bundle_count):
            refs.append(fn.options(
                num_cpus=0, resources={"TPU": chips},
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=group,
                    placement_group_bundle_index=index),
            ).remote(*args, **kwargs))
    return refs


class SubslicePlacementGroup:
    """Part of a TPU slice reserved as a slice of its own (Ray's
    ``ray.util.tpu.SubslicePlacementGroup``): the hosts of one tile of the
    slice's host grid, one bundle per host (its chips and a CPU) in
    worker-id order. Made by ``subslice_placement_group``."""

    def __init__(self, info, parent_topology, name=""):
        self._info = info
        self._parent_topology = parent_topology
        self._placement_group = PlacementGroup(
            info["id"], [dict(info["bundle_resources"])] * len(
                info["worker_ids"]), name, info["bundle_label_selector"])

    @property
    def placement_group(self):
        return self._placement_group

    @property
    def parent_topology(self):
        return self._parent_topology

    @property
    def subslice_topology(self):
        return self._info["topology"]

    @property
    def subslice_index(self):
        return self._info["subslice_index"]

    @property
    def slice_name(self):
        return self._info["slice_name"]

    @property
    def worker_ids(self):
        """The whole slice's workers this sub-slice holds (Shoal's)."""
        return list(self._info["worker_ids"])

    @property
    def num_hosts(self):
        return len(self._info["worker_ids"])

    @property
    def chips_per_host(self):
        return self._info["chips_per_host"]

    @property
    def bundle_resources(self):
        return dict(self._info["bundle_resources"])

    @property
    def head_placement_groups(self):
        return []

    @property
    def bundle_label_selector(self):
        return [dict(s) for s in self._info["bundle_label_selector"]]

    def release_head_pgs(self):
        """Nothing to release (see SlicePlacementGroup)."""

    def shutdown(self):
        """Gives the sub-slice back. Idempotent."""
        group, self._placement_group = self._placement_group, None
        if group is not None:
            try:
                _shoal.remove_placement_group(group.id, group.bundle_count)
            except _shoal.ShoalError:
                pass


def subslice_placement_group(subslice_topology, accelerator_version,
                             chips_per_vm=None, resources_per_bundle=None,
                             strategy="STRICT_SPREAD", name="", lifetime=None,
                             head_reservation_timeout_s=None,
                             subslice_index=None):
    """Reserves an idle ``subslice_topology`` part ("2x2x2") of a whole
    slice of ``accelerator_version``: the tile ``subslice_index`` of the
    slice's host grid, or the first idle one. A sub-slice being reserved
    counts as busy, so two calls get two sub-slices. Raises ValueError for a
    topology the generation cannot have and RuntimeError when no slice can
    be cut so or every such sub-slice is busy.

    Where Shoal differs from Ray: sub-slices come from the slice's host grid
    and worker ids (x first), not from chips' coordinates read through
    libtpu; bundles are whole hosts (``resources_per_bundle`` and
    ``strategy`` other than the defaults are refused)."""
    del head_reservation_timeout_s
    from shoal import _require_init
    _require_init()
    if resources_per_bundle is not None or strategy != "STRICT_SPREAD":
        raise ValueError("a sub-slice's bundles are whole hosts, one per "
                         "host (STRICT_SPREAD); leave resources_per_bundle "
                         "and strategy out")
    if lifetime not in (None, "detached", "non_detached"):
        raise ValueError('lifetime must be "detached" or "non_detached"')
    version = get_tpu_version_from_type(accelerator_version)
    topology = subslice_topology.strip().lower()
    _, _, chips_per_host, _ = _shape(topology, version)
    if chips_per_vm is not None and chips_per_vm != chips_per_host:
        raise ValueError(f"chips_per_vm={chips_per_vm}: hosts have "
                         f"{chips_per_host} chips in Shoal")
    try:
        info = _shoal.reserve_subslice(
            topology, version,
            -1 if subslice_index is None else int(subslice_index),
            name or "", lifetime == "detached")
    except _shoal.InfeasibleError as e:
        raise RuntimeError(str(e)) from None
    parent = next((n["Labels"].get("ray.io/tpu-topology") for n in
                   get_tpu_nodes_for_slice(info["slice_name"])), None)
    return SubslicePlacementGroup(info, parent, name or "")
