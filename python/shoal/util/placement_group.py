"""Placement groups: bundles of resources reserved together, or not at all
(two-phase, on the head), as ``ray.util.placement_group`` makes them.

    pg = placement_group([{"CPU": 1, "TPU": 4}] * 2, strategy="STRICT_SPREAD")
    shoal.get(pg.ready())             # or pg.wait(timeout_seconds=10)
    f.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        pg, placement_group_bundle_index=1)).remote()
    remove_placement_group(pg)
"""

from shoal import _shoal
from shoal._ids import PlacementGroupID

_ready_task = None  # the remote function behind PlacementGroup.ready()


def _wait_placed(group):
    """The group, once placed (what ``ready()`` resolves to, as in Ray)."""
    _shoal.wait_placement_group(group.id, group.bundle_count, -1)
    return group


class PlacementGroup:
    def __init__(self, group_id, bundle_specs, name="",
                 bundle_label_selector=None):
        self.id = PlacementGroupID(group_id)
        self.bundle_specs = [dict(b) for b in bundle_specs]
        self.name = name
        self.bundle_label_selector = [
            dict(s) for s in bundle_label_selector or []]

    @property
    def bundle_count(self):
        return len(self.bundle_specs)

    def wait(self, timeout_seconds=30):
        """True once every bundle is reserved, False if the time runs out
        first; raises InfeasibleError when the group can never be placed."""
        timeout_ms = -1 if timeout_seconds is None else int(
            timeout_seconds * 1000)
        return _shoal.wait_placement_group(self.id, self.bundle_count,
                                           timeout_ms)

    def ready(self):
        """An ObjectRef of the group itself, ready once the group is
        placed (Ray's ``shoal.get(pg.ready())``): a task of no resources
        waits for it."""
        global _ready_task
        if _ready_task is None:
            import shoal
            _ready_task = shoal.remote(num_cpus=0)(_wait_placed)
        return _ready_task.remote(self)

    def bundle_nodes(self):
        """The node id of each bundle (empty until placed)."""
        return _shoal.placement_group_nodes(self.id, self.bundle_count)

    def __eq__(self, other):
        return isinstance(other, PlacementGroup) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __reduce__(self):
        return PlacementGroup, (self.id, self.bundle_specs, self.name,
                                self.bundle_label_selector)

    def __repr__(self):
        return f"PlacementGroup({self.id}, {self.bundle_count} bundles)"


def _check_bundles(bundles):
    if not isinstance(bundles, (list, tuple)) or not bundles:
        raise ValueError("bundles must be a non-empty list of resource "
                         "dicts, e.g. [{'CPU': 1}]")
    for i, bundle in enumerate(bundles):
        if not isinstance(bundle, dict) or not any(
                isinstance(v, (int, float)) and v > 0
                for v in bundle.values()):
            raise ValueError(
                f"bundle {i} ({bundle!r}): Bundles cannot be an empty "
                "dictionary or resources with only 0 values; give each "
                "bundle a resource, e.g. {'CPU': 1}")
        for name, value in bundle.items():
            if name == "bundle":
                raise ValueError(
                    "'bundle' is a name Shoal keeps for the resources of "
                    "placement groups; give the resource another name")
            if not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"bundle {i}: {name} must be a number of "
                                 f"0 or more, not {value!r}")


def _check_selectors(selectors, bundle_count):
    if not selectors:
        return []
    if not isinstance(selectors, (list, tuple)) or len(
            selectors) != bundle_count:
        raise ValueError(
            f"bundle_label_selector must be a list of {bundle_count} dicts, "
            f"one per bundle (an empty dict for any node), not {selectors!r}")
    out = []
    for i, selector in enumerate(selectors):
        selector = selector or {}
        if not isinstance(selector, dict) or not all(
                isinstance(k, str) and isinstance(v, str)
                for k, v in selector.items()):
            raise ValueError(f"bundle_label_selector[{i}] must be a dict of "
                             f"str to str, not {selector!r}")
        out.append(dict(selector))
    return out


def check_request_fits(group, index, request, what):
    """Raises ValueError when ``request`` (a resource dict) fits no bundle
    of ``group`` it may use (bundle ``index``, or any with -1): it could
    never run, so it is refused at submission, as in Ray."""
    specs = group.bundle_specs
    if not specs or not all(specs):
        return  # a group found by name: its bundles are not known here
    candidates = [specs[index]] if 0 <= index < len(specs) else specs
    needed = {k: v for k, v in request.items() if v > 0}
    for bundle in candidates:
        if all(bundle.get(k, 0) >= v for k, v in needed.items()):
            return
    raise ValueError(
        f"Cannot schedule {what} with the placement group because the "
        f"resource request {needed} cannot fit into any bundles for the "
        f"placement group, {candidates}.")


def placement_group(bundles, strategy="PACK", name="", lifetime=None,
                    bundle_label_selector=None):
    """Reserves ``bundles`` (a list of resource dicts) with ``strategy``
    (PACK, SPREAD, STRICT_PACK, STRICT_SPREAD). It is removed with its job
    unless ``lifetime="detached"``. ``bundle_label_selector`` (one dict per
    bundle, Ray's syntax: "v", "!v", "in(a,b)", "!in(a,b)") limits each
    bundle to the nodes with those labels."""
    from shoal import _require_init
    _require_init()
    _check_bundles(bundles)
    if lifetime not in (None, "detached", "non_detached"):
        raise ValueError('lifetime must be "detached" or "non_detached"')
    selectors = _check_selectors(bundle_label_selector, len(bundles))
    group_id, group_name, _ = _shoal.create_placement_group(
        [{k: float(v) for k, v in b.items()} for b in bundles], strategy,
        name or "", lifetime == "detached", selectors)
    return PlacementGroup(group_id, bundles, group_name, selectors)


def remove_placement_group(group):
    """Gives the group's reservations back; tasks in it fail."""
    _shoal.remove_placement_group(group.id, group.bundle_count)


def placement_group_table(placement_group=None):
    """The head's record of ``placement_group`` (its state: PENDING,
    CREATED or REMOVED; its bundles and their nodes), or of every group
    when None, as Ray's ``placement_group_table``."""
    from shoal.util import state
    return state.placement_group_table(
        None if placement_group is None else placement_group.id)


def get_current_placement_group():
    """The placement group the calling task or actor runs in; None in a
    driver, or in a task or actor that runs in none."""
    from shoal import _worker
    placement = _worker.current_placement()
    if placement is None:
        return None
    group_id, bundles, name, _ = placement
    return PlacementGroup(group_id, bundles, name)


def get_placement_group(name):
    """The group named ``name``; ValueError when there is none."""
    from shoal import _require_init
    _require_init()
    found = _shoal.get_placement_group(name)
    if found is None:
        raise ValueError(f"no placement group is named {name!r}")
    group_id, bundle_count = found
    return PlacementGroup(group_id, [{}] * bundle_count, name)
