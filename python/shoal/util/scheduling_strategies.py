"""Ray's scheduling strategies that Shoal honours."""


class PlacementGroupSchedulingStrategy:
    """Runs a task or actor in a bundle of a placement group."""

    def __init__(self, placement_group, placement_group_bundle_index=-1,
                 placement_group_capture_child_tasks=None):
        del placement_group_capture_child_tasks
        self.placement_group = placement_group
        self.placement_group_bundle_index = placement_group_bundle_index
