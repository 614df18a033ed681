"""Ray's ``ray.util`` names: placement groups and the TPU helpers."""

from shoal.util.placement_group import (PlacementGroup, get_placement_group,
                                        placement_group,
                                        remove_placement_group)

__all__ = [
    "PlacementGroup",
    "get_placement_group",
    "placement_group",
    "remove_placement_group",
]
