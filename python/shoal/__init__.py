"""Shoal from Python: Ray's API over Shoal's C++ runtime.

    import shoal
    shoal.init()                      # or shoal.init(address="host:6379")

    @shoal.remote(resources={"TPU": 4})
    def chips():
        return shoal.get_runtime_context().get_accelerator_ids()["TPU"]

    print(shoal.get([chips.remote() for _ in range(2)]))

    @shoal.remote
    class Counter:
        def __init__(self):
            self.n = 0
        def add(self, x):
            self.n += x
            return self.n

    counter = Counter.remote()
    print(shoal.get(counter.add.remote(1)))

    ref = shoal.put({"weights": numpy.zeros(1 << 20)})
    value = shoal.get(ref)            # arrays map the store: no copy

Tasks run in Python workers (``python -m shoal.worker``) that node agents
start with this driver's interpreter and PYTHONPATH; see
docs/design/python.md.
"""

import atexit
import os
import shutil
import sys
import threading
import time
import warnings
from _thread import get_ident as _get_ident

from shoal import _errors, _handles, _output, _remote, _shoal
from shoal import exceptions
from shoal._remote import (ActorClass, ActorHandle, CppFunction,
                           RemoteFunction, cpp_function, get_actor, kill,
                           method, remote)
from shoal._serialization import (ResolvedRef, dumps_put, register_ref_type,
                                  stored_value)
from shoal._serialization import loads as _loads
from shoal._ids import ActorID, JobID, NodeID, PlacementGroupID, TaskID
from shoal._shoal import ObjectRef
from shoal.exceptions import (ActorDiedError, GetTimeoutError,
                              InfeasibleError, ObjectLostError, ShoalError,
                              TaskError, WorkerDiedError)

__all__ = [
    "ActorClass",
    "ActorDiedError",
    "ActorHandle",
    "ActorID",
    "CppFunction",
    "GetTimeoutError",
    "InfeasibleError",
    "JobID",
    "NodeID",
    "ObjectLostError",
    "ObjectID",
    "ObjectRef",
    "PlacementGroupID",
    "RemoteFunction",
    "ShoalError",
    "TaskError",
    "TaskID",
    "WorkerDiedError",
    "available_resources",
    "cancel",
    "cluster_resources",
    "cpp_function",
    "exceptions",
    "get",
    "get_actor",
    "get_gpu_ids",
    "get_runtime_context",
    "init",
    "is_initialized",
    "kill",
    "method",
    "nodes",
    "put",
    "remote",
    "shutdown",
    "wait",
]

_atexit_registered = False
register_ref_type(ObjectRef)


def _in_worker():
    return os.environ.get("SHOAL_ROLE") == "worker"


def _cluster_program():
    """The `shoal` CLI, which a local cluster runs as its head and agent."""
    explicit = os.environ.get("SHOAL_CLI")
    if explicit:
        return explicit
    try:
        from shoal._build import SHOAL_CLI  # written by the build
    except ImportError:
        SHOAL_CLI = ""
    if SHOAL_CLI and os.path.exists(SHOAL_CLI):
        return SHOAL_CLI
    found = shutil.which("shoal")
    if found:
        return found
    raise ShoalError(
        "cannot find the shoal command to start a local cluster: put it on "
        "PATH, set SHOAL_CLI, or give init() the address of a running cluster"
    )


def _worker_command(code_search_path=()):
    """(argv, env) that nodes run as this job's workers: this interpreter,
    with a PYTHONPATH that finds this package, the driver's script
    directory and working directory, what the driver added to its path
    and the job's ``code_search_path`` (the same files must be there on
    every node, as Ray requires)."""
    argv = [sys.executable, "-m", "shoal.worker"]
    if _in_worker():  # the job's command, as the agent started this worker
        return argv, {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    paths = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    script = sys.argv[0] if sys.argv and sys.argv[0] else ""
    if script and os.path.exists(script):
        paths.append(os.path.dirname(os.path.abspath(script)))
    paths.append(os.getcwd())
    # What the driver added to its path (PYTHONPATH, a test runner's
    # rootdir, sys.path.insert), not the interpreter's own directories.
    own = {os.path.abspath(p) for p in (sys.prefix, sys.base_prefix)}
    paths += [p for p in sys.path if p and os.path.isdir(p) and not any(
        os.path.abspath(p).startswith(o + os.sep) for o in own)]
    paths += list(code_search_path)
    unique = []
    for p in paths:
        p = os.path.abspath(p)
        if p not in unique:
            unique.append(p)
    return argv, {"PYTHONPATH": os.pathsep.join(unique)}


# What init() takes besides its named options, as Ray's does: options of
# Ray's own processes, taken and ignored (Shoal has no such process or
# setting), and _temp_dir.
_INIT_PRIVATE = {
    "_enable_object_reconstruction", "_redis_max_memory",
    "_plasma_directory", "_node_ip_address", "_driver_object_store_memory",
    "_memory", "_redis_password", "_temp_dir", "_metrics_export_port",
    "_system_config", "_tracing_startup_hook", "_node_name",
    "_ray_debugger_external", "_token", "_cpp_program",
}


class InitContext(dict):
    """What ``init()`` returns, as Ray's RayContext: the address info
    (``["address"]``, ``["node_id"]``, ``["session_dir"]``...) as a dict,
    and a context manager that calls ``shutdown()`` at its end."""

    @property
    def address_info(self):
        return dict(self)

    @property
    def dashboard_url(self):
        return self.get("webui_url", "")

    def disconnect(self):
        shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shutdown()


# Where the dashboard is, as programs are told (get_dashboard_url(), init's
# "webui_url"), whatever the head says: for a dashboard behind a proxy.
DASHBOARD_URL_OVERRIDE = "SHOAL_OVERRIDE_DASHBOARD_URL"


def _dashboard_url():
    """host:port of the cluster's dashboard ("" when it serves none)."""
    override = os.environ.get(DASHBOARD_URL_OVERRIDE)
    if override:
        return override
    return _shoal.dashboard_address()


def _connected_context():
    info = _shoal.connection_info()
    info["webui_url"] = _dashboard_url()
    return InitContext(info)


def init(address=None, *, num_cpus=None, num_gpus=None, resources=None,
         labels=None, object_store_memory=None, local_mode=False,
         ignore_reinit_error=False, include_dashboard=None,
         dashboard_host=None, dashboard_port=None, job_config=None,
         configure_logging=True, logging_level=None, logging_format=None,
         logging_config=None, log_to_driver=None, namespace=None,
         runtime_env=None, cpp_program=None, **kwargs):
    """Joins a cluster, found by the same rule as ``shoal::Init()`` in C++.

    ``address``, else ``SHOAL_ADDRESS``, else the cluster ``shoal start``
    started from this host's temp dir, else a new local cluster of this
    process's own (stopped by ``shutdown()`` or at exit), as ``ray.init()``
    does. ``num_cpus``, ``num_gpus`` and ``resources`` size that local
    cluster; giving them when joining a running cluster is an error, as in
    Ray. ``address="auto"`` joins a running cluster and never starts one.
    ``cpp_program`` names a program built with Shoal whose registered C++
    functions ``shoal.cpp_function(name)`` calls (Ray's cross-language
    calls): it is uploaded and runs as those tasks' workers.

    Calling it again while joined is an error unless
    ``ignore_reinit_error=True`` (then it returns the same context).
    A local cluster serves a dashboard (REST API and /metrics) on
    ``dashboard_port`` (8265, else any free port), unless
    ``include_dashboard=False``; ``get_dashboard_url()`` says where. Ray's
    logging options are taken; ``local_mode`` runs tasks in workers all
    the same (Ray deprecated it).
    """
    global _atexit_registered
    unknown = sorted(set(kwargs) - _INIT_PRIVATE)
    if unknown:
        raise RuntimeError(f"Unknown keyword argument(s): "
                           f"{', '.join(unknown)}")
    del (labels, local_mode, dashboard_host, configure_logging,
         logging_level, logging_format, logging_config, object_store_memory)
    if job_config is not None:
        runtime_env = runtime_env or job_config.runtime_env
        namespace = namespace or job_config.ray_namespace
    _remote._check_runtime_env(runtime_env)
    if _shoal.is_initialized():
        if ignore_reinit_error:
            return _connected_context()
        raise RuntimeError(
            "Maybe you called init twice by accident? This error can be "
            "suppressed by passing in 'ignore_reinit_error=True' or by "
            "calling 'shutdown()' prior to 'init()'.")
    if address == "local":  # a new local cluster, whatever is running
        address = None
        os.environ.pop("SHOAL_ADDRESS", None)
    if address == "auto":
        address = None
        must_exist = True
    else:
        must_exist = False
    joining = bool(address or os.environ.get("SHOAL_ADDRESS")
                   or _in_worker() or must_exist)
    if joining and (num_cpus is not None or num_gpus is not None):
        raise ValueError("When connecting to an existing cluster, num_cpus "
                         "and num_gpus must not be provided.")
    if joining and kwargs.get("_system_config"):
        raise ValueError("When connecting to an existing cluster, "
                         "_system_config must not be provided.")
    resources = dict(resources or {})
    for name in ("CPU", "GPU"):
        if name in resources:
            raise ValueError(f"Use the '{name.lower()}s' argument instead of "
                             f"passing {name} in resources.")
    if num_gpus is not None:
        resources["GPU"] = float(num_gpus)
    program = "" if joining else _cluster_program()
    argv, env = _worker_command(
        job_config.code_search_path if job_config is not None else ())
    _shoal.init(address or "", kwargs.get("_token") or "",
                kwargs.get("_temp_dir") or "",
                -1.0 if num_cpus is None else float(num_cpus),
                resources, program, argv, env,
                cpp_program or kwargs.get("_cpp_program") or "",
                # A local cluster's dashboard, as Ray's init() starts one:
                # on 8265 (else any free port) unless told otherwise.
                -1 if include_dashboard is False else int(
                    dashboard_port if dashboard_port is not None else 8265),
                # A driver of another version than the cluster's is
                # refused (RuntimeError), as Ray's is.
                __version__)
    _remote.set_job_namespace(namespace, _in_worker())
    _remote.joined_cluster()
    if not _in_worker():
        _errors.start(_shoal.job_id())
        if log_to_driver is not False:
            _output.start(_shoal.job_id())
    if runtime_env and not _in_worker():
        # Every task and actor of the job runs in it unless it gives its
        # own (env_vars are merged).
        _remote.inherited_env = {}
        _remote.inherited_env = _remote.runtime_env_settings(runtime_env)
    if not _atexit_registered:
        atexit.register(shutdown)
        _atexit_registered = True
    return _connected_context()



def shutdown():
    """Leaves the cluster; stops the local cluster ``init()`` started."""
    _output.stop()
    _errors.stop()
    _shoal.shutdown()
    _handles.forget()
    if not _in_worker():
        _remote.inherited_env = {}


def is_initialized():
    return _shoal.is_initialized()


def _require_init():
    """Joins a cluster on first use, as Ray's auto-init does: a worker the
    cluster it runs in, a driver the one init() would find or start
    (unless SHOAL_AUTO_INIT=0)."""
    if _shoal.is_initialized():
        return
    if _in_worker():
        init()  # a task that submits tasks joins the cluster it runs in
        return
    if os.environ.get("SHOAL_AUTO_INIT", "1").lower() in ("0", "false",
                                                           "no"):
        raise ShoalError("shoal is not initialized: call shoal.init() first "
                         "(SHOAL_AUTO_INIT=0 turns off joining on first use)")
    init()


def put(value):
    """Stores ``value`` and returns its ObjectRef.

    It is pickled (protocol 5); large buffers (numpy arrays, bytes) are laid
    out after the pickle stream, so that ``get`` maps them in place.
    """
    if isinstance(value, ObjectRef):
        raise TypeError("put() of an ObjectRef: pass the ref itself instead")
    _require_init()
    pieces, size = dumps_put(value)
    return _shoal.put_pieces(pieces, size)


_REF_TYPES = (ObjectRef, ResolvedRef)


def _ref_list(caller, refs):
    try:
        refs = list(refs)
    except TypeError:
        refs = [refs]
    for r in refs:
        if not isinstance(r, _REF_TYPES):
            raise TypeError(f"{caller}() takes an ObjectRef or a list of "
                            f"them, not {type(r).__name__}")
    return refs


def _timeout_ms(timeout):
    if timeout is None:
        return -1
    if timeout < 0:
        raise ValueError("timeout must be None or 0 or more seconds")
    return int(timeout * 1000)


_main_thread_ident = threading.main_thread().ident


def _note_main_thread():
    global _main_thread_ident
    _main_thread_ident = threading.main_thread().ident


os.register_at_fork(after_in_child=_note_main_thread)


def _interruptible():
    """Whether a blocking get or wait runs the signal handlers while it
    waits (Ctrl-C, SIGALRM): in the main thread, where Python runs them.
    (A thread id, not threading.current_thread(): a get's own cost counts
    when its caches are cold, right after a large put.)"""
    return _get_ident() == _main_thread_ident


def get(refs, *, timeout=None):
    """The value of a ref, or the values of a list of refs, in order.

    Large numpy arrays come back as read-only views of the object store;
    the object stays in the store while any of them lives. A task that
    raised raises here as TaskError, which is also an instance of the
    exception it raised, with the remote traceback. Raises GetTimeoutError
    after ``timeout`` seconds; ``timeout=0`` waits without end, as in Ray
    (with a warning). Signal handlers run while it waits (Ctrl-C raises
    KeyboardInterrupt).
    """
    if type(refs) is ObjectRef and timeout is None:
        # One ref without a timeout, the commonest get, on a short path: its
        # Python steps are most of a large object's get, which maps it.
        if not _shoal.is_initialized():
            _require_init()
        try:
            stored = _shoal.get([refs], -1, _interruptible(), True)[0]
        except (_shoal.RemoteError, ShoalError) as e:
            _raise_get_error(e, [refs])
        return _loads(stored) if type(stored) is not tuple else \
            stored_value(stored)
    single = isinstance(refs, _REF_TYPES)
    ref_list = [refs] if single else _ref_list("get", refs)
    if timeout == 0:
        warnings.warn(
            "Please use timeout=None if you expect get() to block. get() "
            "with timeout=0 waits for the objects as Ray's does today; Ray "
            "means to make it raise GetTimeoutError for objects that are "
            "not ready, so pass a small positive timeout to poll.",
            UserWarning, stacklevel=2)
        timeout = None
    _require_init()
    # Refs resolved in a task's arguments are rare: most lists hold none.
    remote = [r for r in ref_list if not isinstance(r, ResolvedRef)]
    try:
        stored = iter(_shoal.get(remote, _timeout_ms(timeout),
                                 _interruptible(), True))
    except (_shoal.RemoteError, ShoalError) as e:
        _raise_get_error(e, remote)
    if len(remote) == len(ref_list):
        values = [_loads(s) if type(s) is not tuple else stored_value(s)
                  for s in stored]
    else:
        values = [stored_value(next(stored)) if isinstance(r, ObjectRef)
                  else r.value()
                  for r in ref_list]
    return values[0] if single else values


def _raise_get_error(e, asked):
    """Raises Ray's error for ``e``, which _shoal.get raised for the refs
    ``asked``."""
    if isinstance(e, _shoal.RemoteError):
        raise exceptions.task_error(*e.args) from None
    error = exceptions.from_native(e, {r.hex() for r in asked})
    if error is e:
        raise e
    raise error from None


def wait(refs, *, num_returns=1, timeout=None, fetch_local=True):
    """(ready, not_ready): the first ``num_returns`` refs that are ready,
    within ``timeout`` seconds, and the rest, each in the given order.

    With ``fetch_local`` (the default), a ref counts as ready once its
    object is also on this node (pulled here if need be), so that get()
    of it does not wait; with False, as soon as it is ready anywhere.
    """
    if isinstance(refs, _REF_TYPES):
        raise TypeError("wait() expected a list of ObjectRefs, got a single "
                        "ObjectRef: pass [ref]")
    refs = _ref_list("wait", refs)
    ids = [r.hex() for r in refs if isinstance(r, ObjectRef)]
    if len(set(ids)) != len(ids):
        raise ValueError("Wait requires a list of unique object refs.")
    if not refs:
        return [], []
    _require_init()
    deadline = None if timeout is None else time.monotonic() + timeout
    if num_returns < 0 or num_returns > len(refs):
        raise ValueError(
            f"num_returns must be between 0 and the {len(refs)} refs given")
    # A resolved ref (one passed inside a task's arguments) is ready.
    resolved = [i for i, r in enumerate(refs) if isinstance(r, ResolvedRef)]
    remote = [i for i, r in enumerate(refs) if isinstance(r, ObjectRef)]
    wanted = max(0, min(len(remote), num_returns - len(resolved)))
    found = _shoal.wait([refs[i] for i in remote], wanted,
                        _timeout_ms(timeout),
                        _interruptible()) if remote else []
    # The runtime's clock may wake it a hair before the caller's: a wait
    # that found too few returns only once the whole timeout has passed.
    while remote and len(found) < wanted and deadline is not None:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        found = _shoal.wait([refs[i] for i in remote], wanted,
                            max(1, int(left * 1000) + 1), _interruptible())
    ready_at = set(sorted(resolved + [remote[i] for i in found])
                   [:num_returns])
    ready = [r for i, r in enumerate(refs) if i in ready_at]
    not_ready = [r for i, r in enumerate(refs) if i not in ready_at]
    if fetch_local:
        local = _fetch([r for r in ready if isinstance(r, ObjectRef)],
                       deadline)
        ready_at = {i for i in ready_at
                    if not isinstance(refs[i], ObjectRef) or refs[i] in local}
        ready = [r for i, r in enumerate(refs) if i in ready_at]
        not_ready = [r for i, r in enumerate(refs) if i not in ready_at]
    return ready, not_ready


def _fetch(refs, deadline):
    """The ``refs`` (ready ones) whose objects are on this node by
    ``deadline`` (None: no limit): a get maps each one here, pulling it
    first when another node holds it. A failed object counts: get()
    raises its error."""
    local = []
    for ref in refs:
        left = -1 if deadline is None else max(
            0, int((deadline - time.monotonic()) * 1000))
        try:
            _shoal.get([ref], left)
        except GetTimeoutError:
            continue
        except ShoalError:
            pass
        local.append(ref)
    return local


def cancel(ref, *, force=False, recursive=True):
    """Ray's ``cancel()``: stops the task that makes ``ref``, whose
    ``get`` then raises TaskCancelledError (its dependents' too).

    A task still waiting for its arguments or a worker fails at once. A
    running one is interrupted: KeyboardInterrupt is raised in it (a
    blocking ``get`` in it returns within 0.1 s; a ``time.sleep`` ends
    first), or, with ``force``, its worker process is ended. A task that
    already finished keeps its result. An actor call can be cancelled only
    while it waits for its arguments. With ``recursive`` (the default), the
    tasks the cancelled task submitted are cancelled too, with the same
    ``force``, and theirs in turn; without it they run on.
    """
    if not isinstance(ref, ObjectRef):
        raise TypeError(f"cancel() takes the ObjectRef of a task's result, "
                        f"not {type(ref).__name__}")
    _require_init()
    _shoal.cancel(ref, bool(force), bool(recursive))


def cluster_resources():
    """The resources of the cluster's alive nodes, summed."""
    _require_init()
    return _shoal.cluster_resources()


def available_resources():
    """What the cluster's alive nodes have free now, summed."""
    _require_init()
    return _shoal.available_resources()


def nodes():
    """One dict per node, with Ray's keys (NodeID, Alive, Resources, ...)."""
    _require_init()
    return _shoal.nodes()


class RuntimeContext:
    """Where the calling code runs: ``shoal.get_runtime_context()``.

    In a driver: its job, and the node of its host (None for the task,
    actor and resources). In an actor: the actor's id, name, resources and
    placement group, as the head holds them. Tasks' own ids and resources
    are not known to their workers (ask for them in an actor instead)."""

    def get_job_id(self):
        """The job's id (a worker's: its driver's)."""
        _require_init()
        return _shoal.job_id()

    def get_dashboard_url(self):
        """host:port of the cluster's dashboard ("" when it serves none;
        SHOAL_OVERRIDE_DASHBOARD_URL, when set, instead)."""
        _require_init()
        return _dashboard_url()

    def get_node_id(self):
        """The node this code runs on. A driver's is the node of its own
        host it joined through (the head's when its host has none)."""
        node = _shoal.current_node_id()
        if node:
            return node
        _require_init()
        return _driver_node()["NodeID"]

    def get_task_id(self):
        """The id of the task or actor call this code runs in (as
        shoal.util.state.list_tasks() gives it); None in a driver, and in a
        thread the task made."""
        task = _current_task()
        return task[0] if task is not None and task[0] else None

    def get_task_name(self):
        """The running task's name: its ``options(name=)``, else its
        function's name; "Class.method" for an actor's call. None in a
        driver."""
        task = _current_task()
        return None if task is None else task[1]

    def get_task_function_name(self):
        """The running task's function as "module.function" (an actor's
        method as "module.Class.method"); None in a driver."""
        task = _current_task()
        return None if task is None else task[2]

    def get_worker_id(self):
        """This worker's id ("" in a driver)."""
        return os.environ.get("SHOAL_WORKER_ID", "")

    def get_actor_id(self):
        """The actor this process holds (its constructor included), or
        None."""
        actor_id = _shoal.current_actor_id()
        if not actor_id and _in_worker():
            from shoal._worker import current_runtime
            runtime = current_runtime()
            if runtime is not None and runtime.constructing():
                actor_id = _shoal.process_actor_id()
        return actor_id or None

    def get_actor_name(self):
        """The name of the actor this process holds ("" when unnamed), or
        None outside an actor."""
        actor = self._actor()
        return None if actor is None else actor["name"]

    @property
    def current_actor(self):
        """A handle to the actor this process holds (error outside one)."""
        actor = self._actor()
        if actor is None:
            raise RuntimeError("current_actor is only available in an actor")
        return ActorHandle(actor["actor_id"], actor["class_name"], None)

    def _actor(self):
        actor_id = self.get_actor_id()
        if actor_id is None:
            return None
        from shoal.util.state import get_actor as state_actor
        return state_actor(actor_id)

    def get_assigned_resources(self):
        """The resources the current task or actor holds ({"CPU": 1.0,
        ...}; in a placement group, by the group's resource names, as in
        Ray); {} in a driver."""
        if not _in_worker():
            return {}
        from shoal._worker import held_resources
        held = held_resources()
        if held is None:
            actor = self._actor()
            return dict(actor["required_resources"]) if actor else {}
        return dict(held)

    def get_placement_group_id(self):
        """The placement group of the current task or actor, or None (also
        in a driver)."""
        if not _in_worker():
            return None
        from shoal._worker import held_resources
        held = held_resources()
        if held is None:
            actor = self._actor()
            return actor["placement_group_id"] if actor else None
        for name in held:  # "CPU_group_<pg>", "CPU_group_<i>_<pg>"
            if "_group_" in name:
                return name.rsplit("_", 1)[1]
        return None

    @property
    def was_current_actor_reconstructed(self):
        """True in an actor that was restarted after its process died."""
        actor = self._actor()
        return actor is not None and actor["num_restarts"] > 0

    def get_accelerator_ids(self):
        """The devices this process was given, by kind: {"TPU": ["0",
        "1"], "GPU": []}, as Ray's get_accelerator_ids() reports them."""
        held = _shoal.assigned_devices()
        out = {"TPU": [], "GPU": []}
        if held["kind"]:
            out[held["kind"]] = [str(i) for i in held["ids"]]
        return out

    def get_assigned_devices(self):
        """The devices this process holds: kind, ids, accelerator type,
        TPU slice name and worker id."""
        return _shoal.assigned_devices()

    def get_runtime_env_string(self):
        """Shoal runs workers with the driver's environment: "{}"."""
        return "{}"

    @property
    def namespace(self):
        """The namespace of this job's named actors."""
        return _remote.job_namespace()

    def get(self):
        """Ray's older summary, with Ray's id objects: job_id, node_id,
        namespace, and task_id and actor_id where there is one."""
        out = {"job_id": JobID(self.get_job_id()),
               "node_id": NodeID(self.get_node_id()),
               "namespace": self.namespace}
        task_id = self.get_task_id()
        if task_id is not None:
            out["task_id"] = TaskID(task_id)
        actor_id = self.get_actor_id()
        if actor_id is not None:
            out["actor_id"] = ActorID(actor_id)
        return out



def _deprecated_id(kind, method):
    """Ray's older property of RuntimeContext: the value of ``method`` as an
    id object of ``kind``, with a DeprecationWarning."""
    def read(self):
        warnings.warn(f"Use {method}() instead", DeprecationWarning,
                      stacklevel=2)
        return kind(getattr(self, method)() or "")
    return property(read)


RuntimeContext.job_id = _deprecated_id(JobID, "get_job_id")
RuntimeContext.node_id = _deprecated_id(NodeID, "get_node_id")
RuntimeContext.task_id = _deprecated_id(TaskID, "get_task_id")
RuntimeContext.actor_id = _deprecated_id(ActorID, "get_actor_id")
RuntimeContext.current_placement_group_id = _deprecated_id(
    PlacementGroupID, "get_placement_group_id")


def _current_task():
    """(task id, name, function name) of the task running here, or None
    (a driver)."""
    if not _in_worker():
        return None
    from shoal._worker import current_task
    return current_task()


_driver_node_cache = {}


def _driver_node():
    """The node a driver counts as its own (its NodeInfo dict): the node
    of its host (same host id, else one of this host's addresses), else
    the head's node."""
    info = _shoal.connection_info()
    key = (info["address"], info["job_id"])
    found = _driver_node_cache.get(key)
    if found is not None:
        return found
    import json
    status = json.loads(_shoal.state_cluster_status(30000))
    alive = [n for n in status.get("nodes", []) if n.get("alive")]
    host = _shoal.host_id()
    ours = [n for n in alive if host and n.get("host_id") == host]
    if not ours:
        ours = [n for n in alive if n.get("node_ip")
                and _shoal.is_local_address(n["node_ip"])]
    ours.sort(key=lambda n: not n.get("is_head_node"))
    if not ours:
        ours = [n for n in alive if n.get("is_head_node")] or alive
    if not ours:
        raise ShoalError("the cluster has no alive node: start one with "
                         "`shoal start`")
    node = ours[0]
    found = {"NodeID": node["node_id"],
             "NodeManagerAddress": node.get("node_ip") or node.get(
                 "address", "").rsplit(":", 1)[0]}
    _driver_node_cache.clear()
    _driver_node_cache[key] = found
    return found


def get_runtime_context():
    """Where the calling code runs (joins a cluster first, as any call
    that needs one does)."""
    _require_init()
    return RuntimeContext()


def get_gpu_ids():
    """The GPUs this worker was given (their ids on its host), as Ray's
    get_gpu_ids(); [] in a driver or a task without GPUs."""
    held = _shoal.assigned_devices()
    return list(held["ids"]) if held["kind"] == "GPU" else []


# Ray's older name for an ObjectRef.
ObjectID = ObjectRef

__version__ = _shoal.version()

# `shoal.util.placement_group(...)` without importing shoal.util first, as
# `ray.util` is there after `import ray`.
from shoal import util  # noqa: E402  (needs the names above)
from shoal import state  # noqa: E402  (Ray's older ray.state names)
from shoal import actor  # noqa: E402,F401  (shoal.actor.exit_actor)
from shoal import job_config  # noqa: E402,F401  (Ray's ray.job_config)


def __getattr__(name):
    # `shoal.worker` (Ray's `ray.worker`) on first use: importing it here
    # would run it twice in a worker, started as `python -m shoal.worker`.
    if name == "worker":
        import importlib
        return importlib.import_module("shoal.worker")
    raise AttributeError(f"module 'shoal' has no attribute {name!r}")
