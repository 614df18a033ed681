"""Ray's scheduling strategies that Shoal honours."""


class PlacementGroupSchedulingStrategy:
    """Runs a task or actor in a bundle of a placement group. With
    ``placement_group_capture_child_tasks``, the tasks and actors it starts
    run in the same group unless they name where to run."""

    def __init__(self, placement_group, placement_group_bundle_index=-1,
                 placement_group_capture_child_tasks=None):
        self.placement_group = placement_group
        self.placement_group_bundle_index = placement_group_bundle_index
        self.placement_group_capture_child_tasks = (
            placement_group_capture_child_tasks)


class NodeAffinitySchedulingStrategy:
    """Runs a task or actor on the node ``node_id`` (a node id, as
    ``get_runtime_context().get_node_id()`` gives it). With ``soft``, there
    if that node is alive, else anywhere it fits; without, it waits for that
    node and fails (InfeasibleError) when no live node has that id."""

    def __init__(self, node_id, soft, _spill_on_unavailable=False,
                 _fail_on_unavailable=False):
        self.node_id = node_id
        self.soft = soft
        self._spill_on_unavailable = _spill_on_unavailable
        self._fail_on_unavailable = _fail_on_unavailable
