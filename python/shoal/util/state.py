"""Ray's state API (``ray.util.state``): what the cluster holds now, as the
head reports it.

    from shoal.util.state import list_actors, list_tasks, summarize_tasks
    list_actors(filters=[("state", "=", "ALIVE")])
    list_tasks(filters=[("name", "!=", "f")], limit=10, detail=True)
    summarize_tasks()["cluster"]["summary"]["f"]["state_counts"]

Each record carries Ray's field names and reads both as a dict
(``a["state"]``) and as attributes (``a.state``). Shoal fills every field it
knows whether or not ``detail`` is given; a field it does not keep is None.
Filters are ``(key, "=" or "!=", value)``: strings compare without regard
to case, other values after conversion to the field's type, as in Ray.
"""

import base64
import json
import warnings

from shoal import _shoal

__all__ = [
    "RayStateApiException",
    "StateRecord",
    "get_actor",
    "get_job",
    "get_node",
    "get_placement_group",
    "get_task",
    "get_worker",
    "list_actors",
    "list_jobs",
    "list_nodes",
    "list_objects",
    "list_placement_groups",
    "list_tasks",
    "list_workers",
    "summarize_actors",
    "summarize_tasks",
]

DEFAULT_LIMIT = 100
DEFAULT_RPC_TIMEOUT = 30

# Shoal's actor states, by Ray's names.
_ACTOR_STATES = {"PENDING": "PENDING_CREATION", "ALIVE": "ALIVE",
                 "RESTARTING": "RESTARTING", "DEAD": "DEAD"}
_PG_STATES = {"PENDING": "PENDING", "CREATED": "CREATED",
              "FAILED": "REMOVED", "REMOVED": "REMOVED"}
_RESOURCE_UNIT = 10000  # the head's fixed-point resource quantities


class RayStateApiException(Exception):
    """The head could not answer all of a state query (Ray's name)."""


class StateRecord(dict):
    """One record of a state listing: a dict whose keys also read as
    attributes (``record.state`` is ``record["state"]``)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(
                f"a state record has no field {name!r} (it has: "
                f"{', '.join(self)})") from None

    def asdict(self):
        return dict(self)


# ---------------------------------------------------------------------------
# Reading the head's replies.


def _timeout_ms(timeout):
    if timeout is None:
        timeout = DEFAULT_RPC_TIMEOUT
    if timeout <= 0:
        raise ValueError("timeout must be a positive number of seconds")
    return int(timeout * 1000)


def _connected():
    from shoal import _require_init
    _require_init()


def _resources(resource_map):
    """A ResourceMap's amounts as {name: float}, without the placement
    groups' per-bundle resources."""
    amounts = (resource_map or {}).get("amounts", {})
    return {name: int(v) / _RESOURCE_UNIT for name, v in sorted(
        amounts.items()) if "_group_" not in name}


def _int(value):
    return int(value) if value not in (None, "") else 0


def _none_if_empty(value):
    return value if value else None


def _cluster_status(timeout):
    _connected()
    return json.loads(_shoal.state_cluster_status(_timeout_ms(timeout)))


def _split_name(qualified):
    """(namespace, name) of a named actor: the head keeps Python actors'
    names as "<namespace>/<name>" (shoal._remote)."""
    namespace, sep, name = qualified.partition("/")
    return (namespace, name) if sep else ("", qualified)


def _actor_record(a, nodes_by_id):
    spec = a.get("spec", {})
    namespace, name = _split_name(spec.get("name", ""))
    node_id = a.get("node_id") or None
    state = _ACTOR_STATES.get(a.get("state", "PENDING"), "PENDING_CREATION")
    pid = _int(a.get("pid"))
    return StateRecord(
        actor_id=spec.get("actor_id", ""),
        class_name=spec.get("class_name", ""),
        state=state,
        job_id=spec.get("job_id", ""),
        name=name,
        node_id=node_id,
        pid=pid if pid > 0 else None,
        ray_namespace=namespace,
        serialized_runtime_env=None,
        required_resources=_resources(spec.get("shape")),
        death_cause=_none_if_empty(a.get("death_cause")),
        is_detached=bool(spec.get("detached")),
        placement_group_id=_none_if_empty(spec.get("placement_group_id")),
        repr_name="",
        num_restarts=int(a.get("num_restarts", 0)),
        num_restarts_due_to_lineage_reconstruction=0,
        worker_id=_none_if_empty(a.get("worker_id")),
        address=_none_if_empty(a.get("address")),
        node_ip=_node_ip(nodes_by_id.get(node_id)),
        max_restarts=int(spec.get("max_restarts", 0)),
    )


def _node_ip(node):
    if not node:
        return None
    if node.get("node_ip"):
        return node["node_ip"]
    return node.get("address", "").rsplit(":", 1)[0] or None


def _node_record(n):
    alive = bool(n.get("alive"))
    start = _int(n.get("start_time_ms"))
    return StateRecord(
        node_id=n.get("node_id", ""),
        node_ip=_node_ip(n),
        is_head_node=bool(n.get("is_head_node")),
        state="ALIVE" if alive else "DEAD",
        state_message=None if alive else _none_if_empty(
            n.get("death_reason")),
        node_name=n.get("hostname") or _node_ip(n),
        resources_total=_resources(n.get("total")),
        resources_available=_resources(n.get("available")),
        labels=dict(n.get("labels", {})),
        start_time_ms=start or None,
        end_time_ms=None,
    )


def _placement_group_record(pg):
    spec = pg.get("spec", {})
    nodes = pg.get("bundle_nodes", [])
    bundles = []
    for i, shape in enumerate(spec.get("bundles", [])):
        bundles.append({
            "bundle_id": f"{pg.get('pg_id', '')}:{i}",
            "node_id": (nodes[i] or None) if i < len(nodes) else None,
            "unit_resources": _resources(shape),
        })
    return StateRecord(
        placement_group_id=pg.get("pg_id", ""),
        name=spec.get("name", ""),
        creator_job_id=pg.get("job_id", ""),
        state=_PG_STATES.get(pg.get("state", "PENDING"), "PENDING"),
        bundles=bundles,
        is_detached=bool(spec.get("detached")),
        strategy=spec.get("strategy", "PACK"),
        error=_none_if_empty(pg.get("error")),
        stats=None,
    )


def placement_group_table(placement_group_id=None,
                          timeout=DEFAULT_RPC_TIMEOUT):
    """Ray's ``placement_group_table``: the group's placement_group_id,
    name, bundles ({index: resources}), bundles_to_node_id, strategy and
    state ({} when the head knows no such group); without an id, every
    pending or created group's, by id."""
    _connected()
    if placement_group_id is None:
        groups = _cluster_status(timeout).get("placement_groups", [])
    else:
        found = _shoal.state_get_placement_group(str(placement_group_id),
                                                 _timeout_ms(timeout))
        if found is None:
            return {}
        groups = [json.loads(found)]
    rows = {}
    for pg in groups:
        record = _placement_group_record(pg)
        rows[record.placement_group_id] = {
            "placement_group_id": record.placement_group_id,
            "name": record.name,
            "bundles": {i: b["unit_resources"]
                        for i, b in enumerate(record.bundles)},
            "bundles_to_node_id": {i: b["node_id"] or ""
                                   for i, b in enumerate(record.bundles)},
            "strategy": record.strategy,
            "state": record.state,
            "is_detached": record.is_detached,
            "stats": None,
        }
    if placement_group_id is None:
        return rows
    return next(iter(rows.values()))


_TASK_STATE_INDEX = {"PENDING_NODE_ASSIGNMENT": 2, "SUBMITTED_TO_WORKER": 3,
                     "RUNNING": 4, "FINISHED": 5, "FAILED": 6}


def _task_record(t):
    times = [int(x) for x in t.get("state_times_ms", [])]

    def at(state):
        i = _TASK_STATE_INDEX[state]
        return times[i] if i < len(times) and times[i] else None

    ends = [x for x in (at("FINISHED"), at("FAILED")) if x]
    actor_id = t.get("actor_id") or None
    name = t.get("name", "")
    events = [{"state": s, "created_ms": at(s)}
              for s in _TASK_STATE_INDEX if at(s)]
    created = next((x for x in times if x), None)
    return StateRecord(
        task_id=t.get("task_id", ""),
        attempt_number=int(t.get("attempt", 0)),
        name=name,
        state=t.get("state", "STATE_UNKNOWN"),
        job_id=t.get("job_id", ""),
        actor_id=actor_id,
        type="ACTOR_TASK" if actor_id else "NORMAL_TASK",
        func_or_class_name=name,
        parent_task_id=None,
        node_id=t.get("node_id") or None,
        worker_id=t.get("worker_id") or None,
        worker_pid=None,
        error_type=t.get("error_type") or None,
        error_message=t.get("error") or None,
        language="PYTHON",
        required_resources=None,
        runtime_env_info=None,
        placement_group_id=None,
        events=events,
        profiling_data=None,
        creation_time_ms=created,
        start_time_ms=at("RUNNING"),
        end_time_ms=max(ends) if ends else None,
    )


_JOB_STATES = {"PENDING": "PENDING", "RUNNING": "RUNNING",
               "SUCCEEDED": "SUCCEEDED", "FAILED": "FAILED",
               "STOPPED": "STOPPED"}


def _job_record(j):
    spec = j.get("spec", {})
    entrypoint = spec.get("entrypoint", "")
    try:
        entrypoint = base64.b64decode(entrypoint).decode("utf-8", "replace")
    except ValueError:
        pass
    return StateRecord(
        job_id=None,
        submission_id=spec.get("submission_id", ""),
        type="SUBMISSION",
        status=_JOB_STATES.get(j.get("state", "PENDING"), "PENDING"),
        entrypoint=entrypoint,
        message=j.get("message", ""),
        error_type=None,
        start_time=_int(j.get("start_time_ms")) or None,
        end_time=_int(j.get("end_time_ms")) or None,
        metadata=dict(spec.get("metadata", {})),
        runtime_env=json.loads(spec["runtime_env_json"])
        if spec.get("runtime_env_json") else None,
        driver_info=None,
        driver_node_id=j.get("node_id") or None,
        driver_exit_code=j.get("exit_code") if j.get("state") in (
            "SUCCEEDED", "FAILED") else None,
    )


def _id_text(encoded):
    """An id the head sends as bytes (base64 in JSON): itself when it is
    printable text, else its hex."""
    try:
        raw = base64.b64decode(encoded)
    except ValueError:
        return encoded
    text = raw.decode("ascii", "replace")
    return text if text.isprintable() and "\ufffd" not in text else raw.hex()


def _object_record(o, nodes_by_id):
    object_id = _id_text(o.get("object_id", ""))
    node_id = o.get("node_id") or None
    return StateRecord(
        object_id=object_id,
        object_size=_int(o.get("size")),
        task_status="FINISHED" if o.get("state") == "SEALED" else
        o.get("state", ""),
        reference_type="PINNED_IN_MEMORY" if _int(o.get("pins"))
        else "LOCAL_REFERENCE",
        call_site=None,
        type="WORKER",
        pid=None,
        ip=_node_ip(nodes_by_id.get(node_id)),
        node_id=node_id,
        state=o.get("state", ""),
        copy=o.get("copy", ""),
        owner=o.get("owner", ""),
    )


def _worker_record(lease, nodes_by_id):
    pid = _int(lease.get("worker_pid"))
    node_id = lease.get("node_id") or None
    return StateRecord(
        worker_id=lease.get("worker_id", ""),
        is_alive=True,
        worker_type="WORKER",
        exit_type=None,
        node_id=node_id,
        ip=_node_ip(nodes_by_id.get(node_id)),
        pid=pid or None,
        exit_detail=None,
        job_id=lease.get("job_id", ""),
        actor_id=lease.get("actor_id") or None,
        resources=_resources(lease.get("shape")),
    )


# ---------------------------------------------------------------------------
# Filters and limits, as Ray applies them.


def _convert(value, like):
    """The filter value `value` in the type of the field value `like`."""
    if isinstance(like, bool):
        if isinstance(value, str):
            if value.lower() in ("true", "1"):
                return True
            if value.lower() in ("false", "0"):
                return False
            raise ValueError(f"filter value {value!r} is not a boolean")
        return bool(value)
    if isinstance(like, int) and isinstance(value, str):
        return int(value)
    if isinstance(like, float) and isinstance(value, str):
        return float(value)
    return value


def _matches(record, key, predicate, value):
    field = record.get(key)
    if isinstance(value, str) and isinstance(field, str):
        equal = field.lower() == value.lower()
    elif field is None:
        equal = value is None or (isinstance(value, str) and value == "")
    else:
        try:
            equal = field == _convert(value, field)
        except (TypeError, ValueError):
            equal = False
    return equal if predicate == "=" else not equal


def _check_filters(filters, columns, what):
    out = []
    for f in filters or []:
        if not isinstance(f, (tuple, list)) or len(f) != 3:
            raise ValueError(
                f"a filter is (key, predicate, value), e.g. "
                f"('state', '=', 'ALIVE'); got {f!r}")
        key, predicate, value = f
        key = str(key).lower()
        if predicate not in ("=", "!="):
            raise ValueError(
                f"Unsupported filter predicate {predicate} is given. "
                f"Available predicates: ['=', '!='].")
        if columns is not None and key not in columns:
            raise ValueError(
                f"{key} is not a valid column of {what}: filter by one of "
                f"{', '.join(sorted(columns))}")
        out.append((key, predicate, value))
    return out


# The fields of each kind of record (those a filter may name).
_COLUMNS = {}


def _columns(what, sample):
    if what not in _COLUMNS:
        _COLUMNS[what] = set(sample)
    return _COLUMNS[what]


def _select(records, filters, limit, what, sample):
    filters = _check_filters(filters, _columns(what, sample), what)
    kept = [r for r in records
            if all(_matches(r, *f) for f in filters)]
    if limit is not None:
        if limit < 0:
            raise ValueError("limit must be 0 or more")
        if len(kept) > limit:
            warnings.warn(
                f"{len(kept)} {what} match; only the first {limit} are "
                f"returned: pass a larger limit to see more", stacklevel=3)
        kept = kept[:limit]
    return kept


# Samples of each record (its field names, for filter checks).
_SAMPLES = {
    "actors": lambda: _actor_record({}, {}),
    "nodes": lambda: _node_record({}),
    "placement groups": lambda: _placement_group_record({}),
    "tasks": lambda: _task_record({}),
    "jobs": lambda: _job_record({}),
    "objects": lambda: _object_record({}, {}),
    "workers": lambda: _worker_record({}, {}),
}


def _list(what, records, filters, limit):
    return _select(records, filters, limit, what, _SAMPLES[what]())


# ---------------------------------------------------------------------------
# Ray's listing functions.


def list_actors(address=None, filters=None, limit=DEFAULT_LIMIT,
                timeout=DEFAULT_RPC_TIMEOUT, detail=False,
                raise_on_missing_output=True, _explain=False):
    """Every actor the head knows, dead ones included: actor_id,
    class_name, state (PENDING_CREATION, ALIVE, RESTARTING, DEAD), name,
    node_id, pid, num_restarts, death_cause..."""
    del address, detail, raise_on_missing_output, _explain
    status = _cluster_status(timeout)
    nodes = {n["node_id"]: n for n in status.get("nodes", [])}
    records = [_actor_record(a, nodes) for a in status.get("actors", [])]
    return _list("actors", records, filters, limit)


def list_nodes(address=None, filters=None, limit=DEFAULT_LIMIT,
               timeout=DEFAULT_RPC_TIMEOUT, detail=False,
               raise_on_missing_output=True, _explain=False):
    """The cluster's nodes, dead ones included: node_id, node_ip,
    is_head_node, state (ALIVE or DEAD), resources_total, labels..."""
    del address, detail, raise_on_missing_output, _explain
    status = _cluster_status(timeout)
    records = [_node_record(n) for n in status.get("nodes", [])]
    return _list("nodes", records, filters, limit)


def list_placement_groups(address=None, filters=None, limit=DEFAULT_LIMIT,
                          timeout=DEFAULT_RPC_TIMEOUT, detail=False,
                          raise_on_missing_output=True, _explain=False):
    """Placement groups pending or created: placement_group_id, name,
    state, bundles (bundle_id, node_id, unit_resources), is_detached..."""
    del address, detail, raise_on_missing_output, _explain
    status = _cluster_status(timeout)
    records = [_placement_group_record(pg)
               for pg in status.get("placement_groups", [])]
    return _list("placement groups", records, filters, limit)


def list_tasks(address=None, filters=None, limit=DEFAULT_LIMIT,
               timeout=DEFAULT_RPC_TIMEOUT, detail=False,
               raise_on_missing_output=True, _explain=False):
    """The latest task attempts the head keeps, newest first: task_id,
    attempt_number, name, state (PENDING_ARGS_AVAIL, ..., RUNNING, FINISHED,
    FAILED), type, job_id, actor_id, node_id, worker_id, error_type..."""
    del address, detail, _explain
    _connected()
    filters = _check_filters(filters, _columns(
        "tasks", _SAMPLES["tasks"]()), "tasks")
    # The head keeps a bounded number of records per job; ask for all of
    # them when this side filters.
    asked = 100000 if filters else max(1, limit if limit is not None
                                       else DEFAULT_LIMIT) + 1
    reply = json.loads(_shoal.state_list_tasks([], asked, False,
                                               _timeout_ms(timeout)))
    dropped = _int(reply.get("dropped")) + _int(reply.get("reporter_dropped"))
    if dropped and raise_on_missing_output:
        warnings.warn(
            f"{dropped} task records were dropped by the head or their "
            f"reporters (it keeps the latest tasks of each job): the list "
            f"may miss older tasks", stacklevel=2)
    records = [_task_record(t) for t in reply.get("tasks", [])]
    return _list("tasks", records, filters, limit)


def list_jobs(address=None, filters=None, limit=DEFAULT_LIMIT,
              timeout=DEFAULT_RPC_TIMEOUT, detail=False,
              raise_on_missing_output=True, _explain=False):
    """Jobs submitted to the cluster (``shoal job submit``): submission_id,
    status, entrypoint, message, start_time, end_time..."""
    del address, detail, raise_on_missing_output, _explain
    _connected()
    reply = json.loads(_shoal.state_list_jobs(_timeout_ms(timeout)))
    records = [_job_record(j) for j in reply.get("jobs", [])]
    return _list("jobs", records, filters, limit)


def list_objects(address=None, filters=None, limit=DEFAULT_LIMIT,
                 timeout=DEFAULT_RPC_TIMEOUT, detail=False,
                 raise_on_missing_output=True, _explain=False):
    """Objects in the nodes' stores (small values live in their owner and
    are not listed): object_id, object_size, node_id, ip, reference_type...
    Raises RayStateApiException when a node could not answer, unless
    ``raise_on_missing_output=False``."""
    del address, detail, _explain
    status = _cluster_status(timeout)
    nodes = {n["node_id"]: n for n in status.get("nodes", [])}
    asked = 100000 if filters or limit is None else max(1, limit)
    reply = json.loads(_shoal.state_list_objects(asked, _timeout_ms(timeout)))
    errors = reply.get("errors", [])
    if errors and raise_on_missing_output:
        raise RayStateApiException(
            "some nodes could not list their objects: " + "; ".join(errors)
            + " (pass raise_on_missing_output=False to list the others)")
    records = [_object_record(o, nodes) for o in reply.get("objects", [])]
    return _list("objects", records, filters, limit)


def list_workers(address=None, filters=None, limit=DEFAULT_LIMIT,
                 timeout=DEFAULT_RPC_TIMEOUT, detail=False,
                 raise_on_missing_output=True, _explain=False):
    """The workers that hold a lease now (running a task or an actor), as
    the nodes last reported them to the head; idle pooled workers are not
    listed. worker_id, node_id, ip, pid, job_id, actor_id, resources."""
    del address, detail, raise_on_missing_output, _explain
    status = _cluster_status(timeout)
    nodes = {n["node_id"]: n for n in status.get("nodes", [])}
    records = [_worker_record(lease, nodes)
               for lease in status.get("leases", []) if lease.get("worker_id")]
    return _list("workers", records, filters, limit)


# ---------------------------------------------------------------------------
# One record by id.


def _one(records, key, value):
    for r in records:
        if r[key] == value:
            return r
    return None


def get_actor(id, address=None, timeout=DEFAULT_RPC_TIMEOUT,
              _explain=False):
    """The actor ``id``'s record, or None when the head knows no such
    actor."""
    del address, _explain
    _connected()
    found = _shoal.state_get_actor(id, _timeout_ms(timeout))
    if found is None:
        return None
    actor = json.loads(found)
    node_id = actor.get("node_id")
    nodes = {}
    if node_id:
        nodes = {n["node_id"]: n
                 for n in _cluster_status(timeout).get("nodes", [])}
    return _actor_record(actor, nodes)


def get_task(id, address=None, timeout=DEFAULT_RPC_TIMEOUT,
             _explain=False):
    """The latest attempt of task ``id``, or None when the head keeps no
    record of it."""
    del address, _explain
    _connected()
    task_id = id.hex() if hasattr(id, "hex") and not isinstance(
        id, str) else id
    reply = json.loads(_shoal.state_list_tasks(
        [f"task_id={task_id}"], 1000, False, _timeout_ms(timeout)))
    records = [_task_record(t) for t in reply.get("tasks", [])]
    if not records:
        return None
    return max(records, key=lambda r: r["attempt_number"])


def get_node(id, address=None, timeout=DEFAULT_RPC_TIMEOUT,
             _explain=False):
    """Node ``id``'s record, or None."""
    return _one(list_nodes(timeout=timeout, limit=None), "node_id", id)


def get_placement_group(id, address=None, timeout=DEFAULT_RPC_TIMEOUT,
                        _explain=False):
    """Placement group ``id``'s record, or None."""
    return _one(list_placement_groups(timeout=timeout, limit=None),
                "placement_group_id", id)


def get_job(id, address=None, timeout=DEFAULT_RPC_TIMEOUT, _explain=False):
    """The submitted job ``id``'s record, or None."""
    return _one(list_jobs(timeout=timeout, limit=None), "submission_id", id)


def get_worker(id, address=None, timeout=DEFAULT_RPC_TIMEOUT,
               _explain=False):
    """Worker ``id``'s record while it holds a lease, or None."""
    return _one(list_workers(timeout=timeout, limit=None), "worker_id", id)


# ---------------------------------------------------------------------------
# Summaries.


def summarize_tasks(address=None, timeout=DEFAULT_RPC_TIMEOUT,
                    raise_on_missing_output=True, _explain=False):
    """Tasks counted by name and state, as Ray's summary:
    ``{"cluster": {"summary": {name: {"func_or_class_name", "type",
    "state_counts"}}, "total_tasks", "total_actor_tasks",
    "total_actor_scheduled", "summary_by": "func_name"}}``."""
    del address, raise_on_missing_output, _explain
    _connected()
    reply = json.loads(_shoal.state_list_tasks([], 0, True,
                                               _timeout_ms(timeout)))
    summary = {}
    total_tasks = total_actor_tasks = 0
    for s in reply.get("summary", []):
        counts = {k: int(v) for k, v in s.get("state_counts", {}).items()}
        entry = summary.setdefault(s["name"], {
            "func_or_class_name": s["name"], "type": s.get("type", ""),
            "state_counts": {}})
        for state, n in counts.items():
            entry["state_counts"][state] = entry["state_counts"].get(
                state, 0) + n
        n = sum(counts.values())
        if s.get("type") == "ACTOR_TASK":
            total_actor_tasks += n
        else:
            total_tasks += n
    return {"cluster": {
        "summary": summary,
        "total_tasks": total_tasks,
        "total_actor_tasks": total_actor_tasks,
        "total_actor_scheduled": len(_cluster_status(timeout).get(
            "actors", [])),
        "summary_by": "func_name",
    }}


def summarize_actors(address=None, timeout=DEFAULT_RPC_TIMEOUT,
                     raise_on_missing_output=True, _explain=False):
    """Actors counted by class and state: ``{"cluster": {"summary":
    {class_name: {"class_name", "state_counts"}}, "total_actors"}}``."""
    del address, raise_on_missing_output, _explain
    summary = {}
    actors = list_actors(timeout=timeout, limit=None)
    for a in actors:
        entry = summary.setdefault(a["class_name"], {
            "class_name": a["class_name"], "state_counts": {}})
        entry["state_counts"][a["state"]] = entry["state_counts"].get(
            a["state"], 0) + 1
    return {"cluster": {"summary": summary, "total_actors": len(actors)}}
