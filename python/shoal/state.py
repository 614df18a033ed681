"""Ray's older state names (``ray.state``), which user code still calls:
``actors()``, ``nodes()``, ``cluster_resources()``,
``available_resources()`` and ``available_resources_per_node()``.

Newer code should use ``shoal.util.state`` (``list_actors`` and friends).
"""

import json

from shoal import _shoal

__all__ = [
    "actors",
    "available_resources",
    "available_resources_per_node",
    "cluster_resources",
    "nodes",
    "total_resources_per_node",
]

_ACTOR_STATES = {"PENDING": "PENDING_CREATION", "ALIVE": "ALIVE",
                 "RESTARTING": "RESTARTING", "DEAD": "DEAD"}


def _status():
    from shoal import _require_init
    from shoal.util.state import DEFAULT_RPC_TIMEOUT
    _require_init()
    return json.loads(_shoal.state_cluster_status(DEFAULT_RPC_TIMEOUT * 1000))


def _actor_info(actor, nodes_by_id):
    from shoal.util.state import _node_ip
    spec = actor.get("spec", {})
    node_id = actor.get("node_id", "")
    address = actor.get("address", "")
    port = address.rsplit(":", 1)[1] if ":" in address else "0"
    ip = (address.rsplit(":", 1)[0] if address
          else _node_ip(nodes_by_id.get(node_id)) or "")
    # The owner as the head names it: host:port, or a description.
    owner = spec.get("owner", "")
    owner_host, _, owner_port = owner.rpartition(":")
    if not owner_port.isdigit() or " " in owner:
        owner_host, owner_port = "", "0"
    pid = int(actor.get("pid") or 0)
    return {
        "ActorID": spec.get("actor_id", ""),
        "ActorClassName": spec.get("class_name", ""),
        "IsDetached": bool(spec.get("detached")),
        "Name": spec.get("name", "").partition("/")[2] or spec.get(
            "name", ""),
        "JobID": spec.get("job_id", ""),
        "Address": {
            "IPAddress": ip,
            "Port": int(port) if port.isdigit() else 0,
            "NodeID": node_id,
        },
        "OwnerAddress": {
            "IPAddress": owner_host,
            "Port": int(owner_port),
            "NodeID": "",
        },
        "State": _ACTOR_STATES.get(actor.get("state", "PENDING"),
                                   "PENDING_CREATION"),
        "NumRestarts": int(actor.get("num_restarts", 0)),
        "Timestamp": 0,
        "StartTime": 0,
        "EndTime": 0,
        "DeathCause": actor.get("death_cause", ""),
        "Pid": pid,
        "WorkerID": actor.get("worker_id", ""),
    }


def actors(actor_id=None):
    """Every actor the head knows, dead ones too, as a dict by actor id
    (Ray's keys: "ActorID", "ActorClassName", "State", "Address" {"NodeID",
    "IPAddress", "Port"}, "Name", "JobID", "NumRestarts", "Pid"...); with
    ``actor_id``, that actor's dict alone ({} when it is unknown)."""
    status = _status()
    nodes_by_id = {n["node_id"]: n for n in status.get("nodes", [])}
    infos = {}
    for actor in status.get("actors", []):
        info = _actor_info(actor, nodes_by_id)
        infos[info["ActorID"]] = info
    if actor_id is not None:
        if hasattr(actor_id, "hex") and not isinstance(actor_id, str):
            actor_id = actor_id.hex()
        return infos.get(actor_id, {})
    return infos


def nodes():
    """One dict per node, with Ray's keys (NodeID, Alive, Resources...),
    as ``shoal.nodes()``."""
    import shoal
    return shoal.nodes()


def cluster_resources():
    """The resources of the cluster's alive nodes, summed."""
    import shoal
    return shoal.cluster_resources()


def available_resources():
    """What the cluster's alive nodes have free now, summed."""
    import shoal
    return shoal.available_resources()


def _per_node(key):
    return {n["NodeID"]: dict(n[key]) for n in nodes() if n["Alive"]}


def available_resources_per_node():
    """{node id: {resource: amount free}} of each alive node."""
    return _per_node("Available")


def total_resources_per_node():
    """{node id: {resource: total amount}} of each alive node."""
    return _per_node("Resources")
