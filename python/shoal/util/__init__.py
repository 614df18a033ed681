"""Ray's ``ray.util`` names: placement groups, the TPU helpers, ActorPool,
the shared Queue (``shoal.util.queue``), the state API
(``shoal.util.state``) and ``get_node_ip_address``."""

import os

from shoal.util.actor_pool import ActorPool
from shoal.util.placement_group import (PlacementGroup,
                                        get_current_placement_group,
                                        get_placement_group, placement_group,
                                        placement_group_table,
                                        remove_placement_group)

__all__ = [
    "ActorPool",
    "PlacementGroup",
    "get_current_placement_group",
    "get_node_ip_address",
    "get_placement_group",
    "placement_group",
    "placement_group_table",
    "remove_placement_group",
]


def get_node_ip_address():
    """The IP address of the node this code runs on: a worker's node's; a
    driver's, that of the node of its host it joined through, else this
    host's primary address."""
    from shoal import _in_worker, _shoal
    if _in_worker() and os.environ.get("SHOAL_NODE_IP"):
        return os.environ["SHOAL_NODE_IP"]
    if _shoal.is_initialized():
        from shoal import _driver_node
        address = _driver_node()["NodeManagerAddress"]
        if address and _shoal.is_local_address(address):
            return address
    return _shoal.primary_ip_address()


from shoal.util import queue, state  # noqa: E402,F401  (Ray's submodules)
