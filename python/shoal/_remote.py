"""Remote functions and actors: ``@shoal.remote`` and what it makes.

A function or class is cloudpickled once and stored in the head's
key-value store under ``pyfn/<job>/<sha256>/<module>/<qualname>``; a task
names only that key, and each worker fetches it once (shoal._worker). Task
lists show the qualified name, the key's last part.

A call's arguments travel as one "frame", the pickled ``(args, kwargs)``,
followed by every ObjectRef found in it, which the runtime resolves before
the task runs (on any node). A top-level ref argument reads back as its
value, as in Ray; one inside a value reads back as a ResolvedRef. A small
frame travels inside the task; a large one (big arrays) goes through the
object store.
"""

import asyncio
import functools
import hashlib
import inspect
import io
import os
import pickle
import uuid
import warnings
import zipfile

from shoal import _errors, _handles, _options, _shoal
from shoal._ids import ActorID
from shoal._serialization import (ResolvedRef, as_inline, lift_bytes,
                                  dumps_capturing_refs, inline_plain,
                                  is_scalar, loads_with_refs, pickle_by_value)
from shoal._shoal import ObjectRef

_TASK_OPTIONS = {
    "num_cpus", "num_gpus", "resources", "max_retries", "memory",
    "accelerator_type", "placement_group", "placement_group_bundle_index",
    "placement_group_capture_child_tasks",
    "scheduling_strategy", "num_returns", "name", "runtime_env",
    "retry_exceptions", "max_calls", "label_selector", "_metadata",
}
_ACTOR_OPTIONS = {
    "num_cpus", "num_gpus", "resources", "memory", "accelerator_type",
    "name", "namespace", "lifetime", "max_restarts", "max_task_retries",
    "max_concurrency", "placement_group", "placement_group_bundle_index",
    "placement_group_capture_child_tasks",
    "scheduling_strategy", "get_if_exists", "runtime_env", "label_selector",
    "_metadata",
}


def encode_call(args, kwargs, settings=None, passes=None):
    """The task arguments _shoal.submit takes for ``f(*args, **kwargs)``:
    the pickled frame, then each ObjectRef in it, which the runtime
    resolves before the task runs. A top-level ref argument reads back as
    its value, as in Ray; a ref inside a value (a list of refs) reads back
    as a ResolvedRef that shoal.get() takes. ``settings`` (a dict, see
    _call_settings) say how the worker runs the call. ``passes`` (a list)
    gets the ids of the actors this process owns whose handles the
    arguments hold (_handles.track); without it they count as passed on
    for good."""
    if not kwargs and all(map(is_scalar, args)):
        # Nothing to lift or capture: the common small call.
        call = (((list(args), {}), ([], []), settings) if settings else
                ((list(args), {}), ([], [])))
        inline = inline_plain(call)
        if inline is not None:
            return [inline]
    # Large bytes go out of band; only the arguments can hold them.
    frame = lift_bytes((list(args), dict(kwargs)), depth=2)
    ref_types = (ObjectRef, ResolvedRef)
    positions = ([i for i, a in enumerate(args) if isinstance(a, ref_types)],
                 [k for k, v in kwargs.items() if isinstance(v, ref_types)])
    call = (frame, positions, settings) if settings else (frame, positions)
    if passes is None:
        pieces, size, refs = dumps_capturing_refs(call, lift=False)
    else:
        with _handles.passes() as ids:
            pieces, size, refs = dumps_capturing_refs(call, lift=False)
        passes.extend(ids)
    inline = as_inline(pieces, size)
    first = inline if inline is not None else _shoal.put_pieces(pieces, size)
    return [first] + refs


def decode_call(args, with_settings=False):
    """(args, kwargs) from what a worker received for encode_call's list:
    the frame, then each ref's stored value; with ``with_settings``,
    (args, kwargs, settings), settings {} when the call has none."""
    call = loads_with_refs(args[0], args[1:])
    (call_args, kwargs), (ref_args, ref_kwargs) = call[0], call[1]
    for i in ref_args:
        call_args[i] = call_args[i].value()
    for k in ref_kwargs:
        kwargs[k] = kwargs[k].value()
    if with_settings:
        return call_args, kwargs, (call[2] if len(call) > 2 else {})
    return call_args, kwargs


def _signature(target, skip_self=False):
    """``target``'s signature, to check calls against at ``.remote()`` as
    Ray does; None when it has none Python can read (builtins)."""
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    if skip_self:
        params = list(sig.parameters.values())[1:]
        sig = sig.replace(parameters=params)
    return sig


_PLAIN_KINDS = (inspect.Parameter.POSITIONAL_ONLY,
                inspect.Parameter.POSITIONAL_OR_KEYWORD)
_arity = {}  # id(signature) -> (signature, its arity or None)


def _plain_arity(sig):
    """How many arguments ``sig`` takes when it is only positional
    parameters without defaults (then a call by position needs no bind());
    else None."""
    known = _arity.get(id(sig))
    if known is None or known[0] is not sig:
        params = sig.parameters.values()
        n = len(params) if all(
            p.kind in _PLAIN_KINDS and p.default is p.empty
            for p in params) else None
        known = _arity[id(sig)] = (sig, n)
    return known[1]


def _check_call(sig, args, kwargs, what):
    """A TypeError now, in the caller, for arguments ``what`` cannot
    take, instead of a failed task later."""
    if sig is None:
        return
    if not kwargs and _plain_arity(sig) == len(args):
        return
    try:
        sig.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{what}: {e}") from None


def _check_options(options, allowed, what, table=_options.TASK_OPTIONS,
                   in_options=False):
    """Ray's checks of each option's type and value (shoal._options), then
    Shoal's: options Ray has that Shoal does not honour yet are refused
    rather than ignored."""
    _options.validate(options, table, what, in_options)
    unsupported = sorted(set(options) - set(allowed))
    if unsupported:
        raise ValueError(f"{what} cannot take {', '.join(unsupported)} in "
                         f"Shoal yet (it takes: {', '.join(sorted(allowed))})")
    _check_runtime_env(options.get("runtime_env"))
    if "num_returns" in options:
        _check_num_returns(options["num_returns"])
    retry = options.get("retry_exceptions")
    if retry is not None and not isinstance(retry, bool):
        if not all(isinstance(t, type) and issubclass(t, BaseException)
                   for t in retry):
            raise TypeError("retry_exceptions must be True, False or a list "
                            "of exception types, not {!r}".format(retry))


def _check_type(options, name, types):
    """Ray's TypeError for an option of the wrong type."""
    value = options.get(name)
    if value is not None and (not isinstance(value, types)
                              or isinstance(value, bool)):
        raise TypeError(f"The type of keyword '{name}' must be {types}, but "
                        f"received type {type(value)}")


def _check_num_returns(n):
    _check_type({"num_returns": n}, "num_returns", (int, str, type(None)))
    if n in ("dynamic", "streaming"):
        raise ValueError(f'num_returns="{n}" (generator tasks) is not '
                         "supported: return a list, or give num_returns the "
                         "number of values the function returns")
    if n is not None and (isinstance(n, str) or n < 0):
        raise ValueError("The keyword 'num_returns' only accepts None, a "
                         'non-negative integer, or "dynamic"')


# runtime_env fields a worker honours, and those it cannot (it runs the
# driver's interpreter: no per-task packages).
_RUNTIME_ENV_FIELDS = {"env_vars", "working_dir", "py_modules", "excludes",
                       "config"}
_RUNTIME_ENV_REFUSED = {"pip", "conda", "uv", "container", "image_uri"}


def _check_runtime_env(env):
    if not env:
        return
    if not isinstance(env, dict):
        raise TypeError("runtime_env must be a dict such as "
                        "{'env_vars': {'NAME': 'value'}}")
    refused = sorted(set(env) & _RUNTIME_ENV_REFUSED)
    if refused:
        raise ValueError(
            f"runtime_env {', '.join(refused)} is not supported: workers run "
            "the driver's interpreter, so install the packages on every "
            "node (env_vars, working_dir and py_modules are supported)")
    unknown = sorted(set(env) - _RUNTIME_ENV_FIELDS)
    if unknown:
        raise ValueError(f"unknown runtime_env field(s): {', '.join(unknown)}"
                         f" (known: env_vars, working_dir, py_modules)")
    env_vars = env.get("env_vars") or {}
    if not isinstance(env_vars, dict) or not all(
            isinstance(k, str) and isinstance(v, str)
            for k, v in env_vars.items()):
        raise TypeError("runtime_env env_vars must be a dict of str to str")
    working_dir = env.get("working_dir")
    if working_dir is not None and not (isinstance(working_dir, str)
                                        and os.path.isdir(working_dir)):
        raise ValueError(f"runtime_env working_dir must be a local folder; "
                         f"{working_dir!r} is not one (remote URIs are not "
                         "supported)")
    for module in env.get("py_modules") or []:
        if not os.path.isdir(_module_folder(module)):
            raise ValueError(f"runtime_env py_modules takes local folders or "
                             f"imported packages; {module!r} is neither")


def _module_folder(module):
    """The folder of a py_modules entry: a path, or a package's folder."""
    if isinstance(module, str):
        return module
    path = getattr(module, "__file__", None) or ""
    return os.path.dirname(path) if path.endswith("__init__.py") else ""


_packages = {}  # (folder, job) -> key of its zipped copy in the KV store


def _package(folder):
    """The KV key of a zip of ``folder``, stored once per job, which
    workers on every node unpack (shoal._worker)."""
    folder = os.path.abspath(folder)
    job = _shoal.job_id()
    key = _packages.get((folder, job))
    if key is None:
        data = io.BytesIO()
        with zipfile.ZipFile(data, "w", zipfile.ZIP_DEFLATED) as z:
            for root, dirs, files in os.walk(folder):
                dirs[:] = sorted(d for d in dirs
                                 if d not in ("__pycache__", ".git"))
                for f in sorted(files):
                    path = os.path.join(root, f)
                    z.write(path, os.path.relpath(path, folder))
        blob = data.getvalue()
        digest = hashlib.sha256(blob).hexdigest()[:32]
        key = f"pyenv/{job}/{digest}/{os.path.basename(folder)}"
        _shoal.kv_put(key, blob, False)
        _packages[(folder, job)] = key
    return key


# The runtime_env a task or actor gets when it gives none of its own, in
# the form of runtime_env_settings: the job's (init(runtime_env=...)) in a
# driver, the running call's in a worker, as Ray's children inherit their
# parent's.
inherited_env = {}


def runtime_env_settings(env):
    """The worker's form of ``env`` over the inherited one: env_vars merged
    (the task's win), working_dir and py_modules packaged into the head's
    KV store and named by their keys."""
    settings = dict(inherited_env)
    env = env or {}
    if env.get("env_vars"):
        settings["env"] = {**settings.get("env", {}), **env["env_vars"]}
    if env.get("working_dir"):
        settings["working_dir"] = _package(env["working_dir"])
    if env.get("py_modules"):
        settings["py_modules"] = [_package(_module_folder(m))
                                  for m in env["py_modules"]]
    return settings


def _call_settings(options, cpus):
    """What the worker applies around a task's call, or to an actor's
    process (shoal._worker): runtime_env env_vars, OMP_NUM_THREADS for the
    task's CPUs (unless env_vars or the node's environment set it), the
    packaged working_dir and py_modules, the exceptions to retry on, and
    max_calls (the worker ends after that many calls of the function)."""
    settings = runtime_env_settings(options.get("runtime_env"))
    settings["omp"] = str(max(1, int(cpus or 0)))
    if options.get("max_calls"):
        settings["max_calls"] = int(options["max_calls"])
    retry = options.get("retry_exceptions")
    if retry:
        retries = options.get("max_retries")
        retries = 3 if retries is None else int(retries)
        settings["retry"] = (True if retry is True else tuple(retry),
                             retries)
    return settings


def _resources(options, default_cpus):
    """The resource map of a task or actor's options."""
    out = dict(options.get("resources") or {})
    cpus = options.get("num_cpus")
    cpus = default_cpus if cpus is None else cpus
    if cpus is not None:
        out["CPU"] = float(cpus)
    if options.get("num_gpus"):
        out["GPU"] = float(options["num_gpus"])
    if options.get("memory"):
        out["memory"] = float(options["memory"])
    if options.get("accelerator_type"):
        out[f"accelerator_type:{options['accelerator_type']}"] = 0.001
    return out


def _chosen_group(options):
    """(group, bundle index, capture) that ``options`` choose: from
    placement_group= or scheduling_strategy=PlacementGroupSchedulingStrategy,
    else, as Ray does, the group of the task or actor this code runs in
    when that one captures its children (placement_group_capture_child_tasks)
    and these options leave the choice open. ``capture``: whether the
    chosen one captures its own children (its option, else inherited)."""
    strategy = options.get("scheduling_strategy")
    capture = options.get("placement_group_capture_child_tasks")
    if strategy is not None and hasattr(strategy, "placement_group"):
        if strategy.placement_group_capture_child_tasks is not None:
            capture = strategy.placement_group_capture_child_tasks
        group = strategy.placement_group
        index = strategy.placement_group_bundle_index
    else:
        if strategy not in (None, "DEFAULT", "SPREAD") and \
                not hasattr(strategy, "node_id"):
            raise ValueError(f"scheduling_strategy {strategy!r} is not "
                             "supported (DEFAULT, SPREAD, a "
                             "PlacementGroupSchedulingStrategy or a "
                             "NodeAffinitySchedulingStrategy)")
        group = options.get("placement_group", "default")
        index = options.get("placement_group_bundle_index", -1)
        if group == "default" and strategy is None:
            from shoal import _worker
            current = _worker.current_placement()
            if capture is None and current is not None:
                capture = current[3]
            if capture and current is not None:
                from shoal.util.placement_group import PlacementGroup
                group = PlacementGroup(current[0], current[1], current[2])
                index = -1
    if group is None or group == "default":
        return None, index, False
    return group, index, bool(capture)


def _placement(options, request=None, what="", chosen=None):
    """(group id, bundle index) of ``chosen`` (else what ``options``
    choose: _chosen_group); a ValueError when ``request`` fits no bundle it
    may use."""
    group, index, _ = chosen or _chosen_group(options)
    if group is None:
        if index not in (None, -1):
            raise ValueError("If placement group is not set, the value of "
                             "bundle index must be -1: give the placement "
                             "group too, or no bundle index")
        return "", -1
    if index is None or index < 0:
        index = -1  # any bundle with room
    elif group.bundle_count and index >= group.bundle_count:
        # Ray's words ("bundle index N is invalid"), and the valid ones.
        raise ValueError(
            f"placement group bundle index {index} is invalid: the "
            f"placement group has {group.bundle_count} bundles (valid "
            f"indexes: 0-{group.bundle_count - 1}, or -1 for any)")
    if request is not None:
        from shoal.util.placement_group import check_request_fits
        check_request_fits(group, index, request, what)
    return group.id, index


def _placement_setting(chosen):
    """What the worker keeps of the group a call runs in
    (get_current_placement_group): (id, bundles, name, capture)."""
    group, _, capture = chosen
    if group is None:
        return None
    return (group.id, [dict(b) for b in group.bundle_specs], group.name,
            capture)


_NODE_ID_LABEL = "ray.io/node-id"


def _selector(options):
    """(label selector, soft) for _shoal: the nodes a task or actor may run
    on, from label_selector= and NodeAffinitySchedulingStrategy (a selector
    on the node's id label; soft: there if it can, else anywhere)."""
    selector = dict(options.get("label_selector") or {})
    for key, value in selector.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError("label_selector maps label names to strings "
                            f"(\"v\", \"!v\", \"in(a,b)\"), not {key!r}: "
                            f"{value!r}")
    strategy = options.get("scheduling_strategy")
    if not hasattr(strategy, "node_id"):
        return selector, False
    node_id = strategy.node_id
    if hasattr(node_id, "hex"):
        node_id = node_id.hex()
    if not isinstance(node_id, str) or not node_id:
        raise ValueError("NodeAffinitySchedulingStrategy needs a node id "
                         "(shoal.get_runtime_context().get_node_id(), or "
                         "NodeID in shoal.nodes())")
    if _NODE_ID_LABEL in selector:
        raise ValueError("label_selector and NodeAffinitySchedulingStrategy "
                         "both name the node: give one of them")
    selector[_NODE_ID_LABEL] = node_id
    return selector, bool(strategy.soft)


class _Shipped:
    """A function or class, pickled once and stored in the head's KV store
    once per job."""

    def __init__(self, obj, prefix):
        self._obj = obj
        self._prefix = prefix
        self._blob = None
        self._keys = {}  # (cluster generation, job id) -> key

    def __getstate__(self):
        return {"_obj": self._obj, "_prefix": self._prefix}

    def __setstate__(self, state):
        self.__init__(state["_obj"], state["_prefix"])

    def key(self):
        if self._blob is None:
            blob = pickle_by_value(self._obj)
            _check_size(self._obj, self._prefix, len(blob))
            self._blob = blob
        job = _shoal.job_id()
        key = self._keys.get((_cluster_generation, job))
        if key is None:
            digest = hashlib.sha256(self._blob).hexdigest()[:32]
            # The qualified name last: it is the name tasks are shown by.
            key = (f"{self._prefix}/{job}/{digest}/{self._obj.__module__}/"
                   f"{self._obj.__qualname__}")
            _shoal.kv_put(key, self._blob, False)
            self._keys[(_cluster_generation, job)] = key
        return key


# Counts the clusters this process joined: a new cluster's job may have
# the id an earlier one's had, but its store has none of what was shipped.
_cluster_generation = 0


def joined_cluster():
    """init() joined a cluster: functions and classes are shipped anew."""
    global _cluster_generation
    _cluster_generation += 1


# A function or class that pickles to more than this much is refused;
# above the warning size, the driver warns (Ray's thresholds).
FUNCTION_SIZE_WARN_THRESHOLD = 10**7
FUNCTION_SIZE_ERROR_THRESHOLD = 10**8


def _check_size(obj, prefix, size):
    """Refuses a function or class too large to ship, and warns (on the
    driver's error stream too) about a large one: it most likely captured
    a large object by accident."""
    if size <= FUNCTION_SIZE_WARN_THRESHOLD:
        return
    what = (f"actor {obj.__name__}" if prefix == "pyactor"
            else f"remote function {obj.__module__}.{obj.__qualname__}")
    mib = size / 2**20
    tip = ("Check that its definition is not implicitly capturing a large "
           "array or other object in scope. Tip: use put() to put large "
           "objects in the object store.")
    if size > FUNCTION_SIZE_ERROR_THRESHOLD:
        raise ValueError(
            f"The {what} is too large ({mib:.0f} MiB > "
            f"FUNCTION_SIZE_ERROR_THRESHOLD="
            f"{FUNCTION_SIZE_ERROR_THRESHOLD / 2**20:.0f} MiB). {tip}")
    message = (f"The {what} is very large ({mib:.0f} MiB). {tip}")
    warnings.warn(message, UserWarning, stacklevel=4)
    _errors.publish("pickling_large_object", "Warning: " + message)


_require = None


def _require_init():
    global _require
    if _require is None:
        from shoal import _require_init as require
        _require = require
    _require()


class _Remote:
    """What @shoal.remote makes: ``.remote(*args, **kwargs)`` runs it with
    its options, ``.options(...)`` with some changed for one call. A
    subclass says which options it takes (_ALLOWED, _WHAT) and how it runs
    (_run)."""

    _ALLOWED = frozenset()
    _WHAT = ""
    _TABLE = _options.TASK_OPTIONS

    def __init__(self, options):
        _check_options(options, self._ALLOWED, self._WHAT, self._TABLE)
        self._options = options

    def remote(self, *args, **kwargs):
        return self._run(self._options, args, kwargs)

    def options(self, **options):
        _check_options(options, self._ALLOWED, self._WHAT, self._TABLE,
                       in_options=True)
        return _WithOptions(self, {**self._options, **options})

    def _remote(self, args=None, kwargs=None, **options):
        """Ray's ``f._remote(args, kwargs, **options)``: ``.options(
        **options).remote(*args, **kwargs)``."""
        target = self.options(**options) if options else self
        return target.remote(*(args or ()), **(kwargs or {}))


class _WithOptions:
    """``x.options(...)``: ``.remote()`` runs x with those options."""

    def __init__(self, target, options):
        self._target = target
        self._options = options

    def remote(self, *args, **kwargs):
        return self._target._run(self._options, args, kwargs)


class RemoteFunction(_Remote):
    """What ``@shoal.remote`` makes of a function: ``.remote(*args,
    **kwargs)`` runs it as a task and returns an ObjectRef;
    ``.options(...)`` changes the options for one call."""

    _ALLOWED = _TASK_OPTIONS
    _WHAT = "a remote function"

    def __init__(self, function, options):
        if inspect.iscoroutinefunction(function):
            # As Ray: a task runs no event loop for it.
            raise ValueError(
                f"'async def' should not be used for remote tasks "
                f"({function.__qualname__}): wrap the coroutine, as in "
                f"`def f(): return asyncio.run(g())`, or make it a method "
                f"of an actor, whose async methods share an event loop")
        super().__init__(options)
        self._function = function
        self._shipped = _Shipped(function, "pyfn")
        self._signature = _signature(function)
        self._prepared = None  # (options, what _prepare made of them)
        functools.update_wrapper(self, function)

    def __call__(self, *args, **kwargs):
        name = self._function.__name__
        raise TypeError(f"remote functions cannot be called directly: "
                        f"instead of {name}(), use {name}.remote()")

    def _prepare(self, options):
        """What every call with ``options`` submits but its arguments:
        made once per options (the function's own, or one .options()) and
        placement group (a caller's group may capture the call)."""
        chosen = _chosen_group(options)
        placement = _placement_setting(chosen)
        if (self._prepared is not None and self._prepared[0] is options
                and self._prepared[1] == placement):
            return self._prepared[2]
        resources = _resources(options, default_cpus=1)
        group, index = _placement(options, resources,
                                  self._function.__qualname__, chosen)
        selector, soft = _selector(options)
        retries = options.get("max_retries")
        settings = _call_settings(options, resources.get("CPU", 0))
        settings["resources"] = _shoal.shape_of(resources, group, index)
        if placement is not None:
            settings["placement"] = placement
        if options.get("name"):  # get_runtime_context().get_task_name()
            settings["name"] = str(options["name"])
        prepared = (settings, resources, 3 if retries is None else
                    int(retries), group, index, selector, soft,
                    bool(options.get("max_calls")))
        self._prepared = (options, placement, prepared)
        return prepared

    def _run(self, options, args, kwargs):
        _check_call(self._signature, args, kwargs,
                    f"{self._function.__qualname__}.remote()")
        _require_init()
        (settings, resources, retries, group, index, selector, soft,
         may_end) = self._prepare(options)
        passes = []
        ref = _shoal.submit(
            self._shipped.key(), encode_call(args, kwargs, settings, passes),
            resources, retries, group, index, label_selector=selector,
            label_selector_soft=soft, worker_may_end=may_end, watch=True)
        _handles.track(ref, passes)
        num_returns = options.get("num_returns")
        return _split_returns(ref, 1 if num_returns is None else num_returns)


def _select_return(values, index, count):
    """Value ``index`` of a task's ``count`` return values."""
    try:
        n = len(values)
    except TypeError:
        n = None
    if n != count:
        got = f"{n} values" if n is not None else (
            f"a {type(values).__name__}, which has no length")
        raise ValueError(
            f"the task was declared with num_returns={count} but returned "
            f"{got}: return a tuple or list of {count} values")
    return values[index]


_select = None


def _split_returns(ref, count):
    """The refs a call declared with ``num_returns=count`` returns: ``ref``
    itself for 1, None for 0 (the task still runs), else one ref per value,
    each made by a small task that takes its value from the call's
    result (and fails with the call's error, or with a ValueError when the
    call returned another number of values)."""
    if count == 1:
        return ref
    if count == 0:
        return None
    global _select
    if _select is None:
        _select = _Shipped(_select_return, "pyfn")
    key = _select.key()
    return [_shoal.submit(key, encode_call((ref, i, count), {}),
                          {"CPU": 0.0}, 3, "", -1)
            for i in range(count)]


class CppFunction(_Remote):
    """A registered C++ function (SHOAL_REMOTE) of the job's C++ program
    (``shoal.init(cpp_program=...)``), called as Ray's cross-language
    calls are: ``shoal.cpp_function("Add").remote(1, 2)``. Arguments travel
    as msgpack (numbers, strings, bytes, lists, dicts) or as ObjectRefs of
    C++ values; the result reads back from msgpack (a C++ pair or vector
    as a list)."""

    _ALLOWED = _TASK_OPTIONS - {"runtime_env", "retry_exceptions"}
    _WHAT = "a C++ function"

    def __init__(self, name, options):
        super().__init__(options)
        self._name = name

    def _run(self, options, args, kwargs):
        if kwargs:
            raise TypeError(f"C++ function {self._name} takes positional "
                            "arguments only")
        _require_init()
        import msgpack
        encoded = []
        for i, arg in enumerate(args):
            if isinstance(arg, ObjectRef):
                encoded.append(arg)
                continue
            try:
                encoded.append(msgpack.packb(arg, use_bin_type=True))
            except TypeError as e:
                raise TypeError(
                    f"argument {i} of C++ function {self._name} has no "
                    f"msgpack form ({e}): pass numbers, strings, bytes, "
                    "lists or dicts") from None
        group, index = _placement(options)
        retries = options.get("max_retries")
        return _shoal.submit(self._name, encoded,
                             _resources(options, default_cpus=1),
                             3 if retries is None else int(retries), group,
                             index, True)


def cpp_function(name, **options):
    """The registered C++ function ``name`` of the job's C++ program."""
    return CppFunction(name, options)


def _method_names(cls):
    return sorted(name for name, _ in inspect.getmembers(
        cls, predicate=lambda m: inspect.isfunction(m) or inspect.ismethod(m))
        if not name.startswith("__"))


def _invocation_decorators(cls):
    """{method: its __ray_invocation_decorator__} of the methods that have
    one: it wraps how a call is made, in the caller."""
    out = {}
    for name in _method_names(cls):
        decorator = getattr(getattr(cls, name), "__ray_invocation_decorator__",
                            None)
        if decorator is not None:
            out[name] = decorator
    return out


# Methods every actor has (shoal._worker answers them): __ray_ready__ is
# True once the actor is made; __ray_terminate__ ends it after the calls
# already running, calling its __ray_shutdown__ and atexit handlers.
_BUILTIN_METHODS = ("__ray_ready__", "__ray_terminate__")


def is_async_class(cls):
    """Whether ``cls`` makes an async actor: one with an ``async def``
    method, whose calls run on an event loop of its own, many at a time."""
    for _, member in inspect.getmembers(cls):
        if (inspect.iscoroutinefunction(member)
                or inspect.isasyncgenfunction(member)):
            return True
    return False


# ---- Namespaces ----
#
# Named actors live in a namespace: the job's (init(namespace=...), else an
# anonymous one of its own) unless options(namespace=...) names another.
# The head knows names only: a name is stored there qualified as
# "<namespace>/<name>", and the job's namespace is kept in the head's
# key-value store (pyjob/<job>/namespace) for its workers to read.

_job_namespace = None


def set_job_namespace(namespace, in_worker):
    """Called by init(): a driver's namespace (an anonymous one when None),
    or, in a worker, the namespace of the job it runs for."""
    global _job_namespace
    _job_namespace = None
    if in_worker:
        return  # read on first use (job_namespace)
    if namespace is not None and (not isinstance(namespace, str)
                                  or "/" in namespace):
        raise ValueError(f"namespace must be a non-empty string without "
                         f"'/', not {namespace!r}")
    _job_namespace = namespace or f"anonymous-{uuid.uuid4().hex}"
    _shoal.kv_put(f"pyjob/{_shoal.job_id()}/namespace",
                  _job_namespace.encode(), True)


def job_namespace():
    """The namespace of the job this process runs for."""
    global _job_namespace
    if _job_namespace is None:
        _require_init()
        if _job_namespace is None:
            blob = _shoal.kv_get(f"pyjob/{_shoal.job_id()}/namespace")
            # A job started by a C++ driver has no namespace of its own.
            _job_namespace = blob.decode() if blob else "default"
    return _job_namespace


def _qualified(name, namespace):
    if namespace is None:
        namespace = job_namespace()
    if not isinstance(namespace, str) or not namespace or "/" in namespace:
        raise ValueError(f"namespace must be a non-empty string without "
                         f"'/', not {namespace!r}")
    return f"{namespace}/{name}"


# ---- Handles and the actor's life ----
#
# A non-detached actor ends when its last handle anywhere is gone, as in
# Ray: see shoal._handles.


def _method_signatures(cls):
    """{method: signature without self} of an actor class's methods."""
    out = {}
    for name in _method_names(cls):
        member = inspect.getattr_static(cls, name)
        if isinstance(member, staticmethod):
            out[name] = _signature(member.__func__)
        elif isinstance(member, classmethod):
            out[name] = _signature(member.__func__, skip_self=True)
        else:
            out[name] = _signature(getattr(cls, name), skip_self=True)
    return out


class ActorClass(_Remote):
    """What ``@shoal.remote`` makes of a class: ``.remote(*args, **kwargs)``
    creates an actor (an instance in a worker process of its own) and
    returns its handle; ``.options(...)`` names it, makes it detached,
    restartable, concurrent, or gives it resources.

    The class's own attributes (constants, static and class methods) read
    through it, so methods may use them by the class's name. A class with
    an ``async def`` method makes an async actor: its calls run on one
    event loop, up to max_concurrency (1000 unless given) at a time.
    """

    _ALLOWED = _ACTOR_OPTIONS
    _WHAT = "an actor class"
    _TABLE = _options.ACTOR_OPTIONS

    def __init__(self, cls, options):
        super().__init__(options)
        self._cls = cls
        self._shipped = _Shipped(cls, "pyactor")
        self._methods = _method_names(cls)
        self._signatures = _method_signatures(cls)
        self._async = is_async_class(cls)
        init = inspect.getattr_static(cls, "__init__", None)
        self._init_signature = (_signature(cls.__init__, skip_self=True)
                                if inspect.isfunction(init) else None)
        self.__name__ = cls.__name__
        self.__qualname__ = cls.__qualname__
        self.__module__ = cls.__module__
        self.__doc__ = cls.__doc__

    def __call__(self, *args, **kwargs):
        name = self._cls.__name__
        raise TypeError(f"Actors cannot be instantiated directly: instead "
                        f"of {name}(), use {name}.remote()")

    def __getattr__(self, name):
        # Only reached for what ActorClass itself lacks.
        if name.startswith("__") or name in ("_cls", "_methods"):
            raise AttributeError(name)
        try:
            return getattr(self._cls, name)
        except AttributeError:
            raise AttributeError(
                f"actor class {self._cls.__qualname__} has no attribute "
                f"{name!r}") from None

    def __dir__(self):
        return sorted(set(object.__dir__(self)) | set(self._methods))

    def __mro_entries__(self, bases):
        raise TypeError("Inheriting from actor classes is not currently "
                        "supported: inherit from the plain class and apply "
                        "@shoal.remote to the subclass")

    def _run(self, options, args, kwargs):
        _check_call(self._init_signature, args, kwargs,
                    f"{self._cls.__qualname__}.remote()")
        _require_init()
        name = options.get("name") or ""
        if not isinstance(name, str):
            raise TypeError(f"name must be a string, not {name!r}")
        namespace = options.get("namespace")
        if namespace is not None and not name:
            raise ValueError("namespace= names where a named actor lives: "
                             "give the actor a name= too")
        qualified = _qualified(name, namespace) if name else ""
        if options.get("get_if_exists") and not name:
            raise ValueError("get_if_exists=True needs a name= to look the "
                             "actor up by")
        lifetime = options.get("lifetime")
        if lifetime not in (None, "detached", "non_detached"):
            raise ValueError('lifetime must be "detached" or "non_detached"')
        if options.get("get_if_exists"):
            found = _lookup(qualified)
            if found is not None:
                return found
        resources = _resources(options, default_cpus=None)
        chosen = _chosen_group(options)
        if chosen[0] is not None and options.get("num_cpus") is None:
            # In a group an actor takes a CPU unless it says otherwise, as
            # in Ray (outside one it holds none while it runs).
            resources["CPU"] = 1.0
        group, index = _placement(options, resources,
                                  self._cls.__qualname__, chosen)
        retries = options.get("max_task_retries")
        concurrency = options.get("max_concurrency")
        if concurrency is None:
            concurrency = 1000 if self._async else 1
        if not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"max_concurrency must be an int of 1 or more, "
                             f"not {concurrency!r}")
        settings = _call_settings(options, resources.get("CPU", 0))
        settings["resources"] = _shoal.shape_of(resources, group, index)
        placement = _placement_setting(chosen)
        if placement is not None:
            settings["placement"] = placement
        selector, soft = _selector(options)
        passes = []
        try:
            actor_id = _shoal.create_actor(
                self._shipped.key(), self._cls.__qualname__,
                encode_call(args, kwargs, settings, passes), qualified,
                resources,
                int(options.get("max_restarts") or 0), int(retries or 0),
                concurrency, lifetime == "detached", group, index,
                label_selector=selector, label_selector_soft=soft)
        except _shoal.ShoalError as e:
            if options.get("get_if_exists"):
                # Made meanwhile by another caller: that one is it.
                found = _lookup(qualified)
                if found is not None:
                    return found
            if name and "already" in str(e):
                raise ValueError(
                    f"The name {name} (namespace={qualified.split('/')[0]})"
                    f" is already taken: pick another name, or pass "
                    f"get_if_exists=True to get the live actor") from None
            raise
        if lifetime != "detached":
            _handles.created(actor_id, self._cls.__qualname__)
        if passes:
            # The constructor holds them until it has run.
            _handles.track(_shoal.submit_actor_task(
                actor_id, f"{self._cls.__qualname__}.__ray_ready__",
                encode_call((), {})), passes)
        return ActorHandle(actor_id, self._cls.__qualname__, self._methods,
                           self._signatures, _invocation_decorators(self._cls),
                           _method_num_returns(self._cls),
                           self._shipped.key(), lifetime != "detached")


class ActorMethod:
    """``handle.method``: ``.remote(*args, **kwargs)`` calls it; calls made
    through one handle run in the order they were made."""

    def __init__(self, handle, name):
        self._handle = handle
        self._name = name

    def __call__(self, *args, **kwargs):
        raise TypeError(f"actor methods cannot be called directly: instead "
                        f"of {self._name}(), use {self._name}.remote()")

    def remote(self, *args, **kwargs):
        num_returns = self._handle._num_returns.get(self._name, 1)
        decorator = self._handle._decorators.get(self._name)
        if decorator is not None:
            # Ray's __ray_invocation_decorator__: it sees the call's
            # (args, kwargs) and makes it through _submit.
            return decorator(lambda a, k: self._call(a, k, num_returns))(
                list(args), kwargs)
        return self._call(args, kwargs, num_returns)

    def _call(self, args, kwargs, num_returns, name=None):
        _require_init()
        _check_call(self._handle._signature_of(self._name), args, kwargs,
                    f"{self._handle._class_name}.{self._name}.remote()")
        # "Counter.incr": the name task lists and errors show, as Ray's do
        # (the class's own name, not where it was defined); the worker
        # calls the part after the last dot.
        passes = []
        # A name given by options(name=) is the call's in the worker (its
        # process title, get_task_name()).
        ref = _shoal.submit_actor_task(
            self._handle._actor_id, f"{self._handle._short_name}.{self._name}",
            encode_call(args, kwargs, {"name": name} if name else None,
                        passes=passes), watch=True)
        _handles.track(ref, passes)
        return _split_returns(ref, num_returns)

    def _remote(self, args=None, kwargs=None, **options):
        """Ray's ``method._remote(args, kwargs, num_returns=...)``."""
        target = self.options(**options) if options else self
        return target.remote(*(args or ()), **(kwargs or {}))

    def options(self, **options):
        """This method with ``num_returns`` or its ``name`` changed for one
        call."""
        _check_options(options, {"num_returns", "name"}, "an actor method",
                       _options.METHOD_OPTIONS)
        num_returns = options.get("num_returns", self._handle._num_returns.get(
            self._name, 1))
        name = options.get("name")
        method = self

        class _Options:
            def remote(self, *args, **kwargs):
                return method._call(args, kwargs, num_returns, name)

        return _Options()


class ActorHandle:
    """A handle to an actor; it may be passed to tasks and other actors.
    ``dir()`` lists the actor's methods."""

    def __init__(self, actor_id, class_name, methods, signatures=None,
                 decorators=None, num_returns=None, class_key="",
                 tracked=False):
        self._actor_id = ActorID(actor_id)
        self._class_name = class_name
        self._short_name = class_name.rsplit(".", 1)[-1]
        self._methods = list(methods) if methods is not None else None
        # Checked at .remote(). Not sent with the handle: a process it is
        # passed to reads them from the class in the head's store
        # (class_key) when it first calls a method.
        self._signatures = signatures
        self._class_key = class_key
        self._decorators = decorators or {}
        # {method: num_returns} of the methods @method declared with one.
        self._num_returns = num_returns or {}
        # Whether its owner follows where its handles go (_handles).
        self._tracked = tracked
        _handles.counted(actor_id, +1, tracked)

    def __del__(self):
        try:
            _handles.counted(self._actor_id, -1, self._tracked)
        except Exception:  # noqa: BLE001 - at interpreter exit
            pass

    def _signature_of(self, method):
        """``method``'s signature, or None when it cannot be known."""
        if self._signatures is None:
            self._signatures = {}
            blob = (_shoal.kv_get(self._class_key)
                    if self._class_key.startswith("pyactor/") else None)
            if blob is not None:
                try:
                    self._signatures = _method_signatures(pickle.loads(blob))
                except Exception:  # noqa: BLE001 - not importable here
                    pass
        return self._signatures.get(method)

    def __getattr__(self, name):
        if name in _BUILTIN_METHODS:
            return ActorMethod(self, name)
        if name.startswith("_"):
            raise AttributeError(name)
        if self._methods is not None and name not in self._methods:
            raise AttributeError(
                f"actor class {self._class_name} has no method {name!r} "
                f"(it has: {', '.join(self._methods)})")
        return ActorMethod(self, name)

    def __dir__(self):
        return sorted({"__init__", "__ray_terminate__",
                       *(self._methods or ())})

    def __reduce__(self):
        _handles.pickled(self._actor_id, self._tracked)
        return ActorHandle, (str(self._actor_id), self._class_name,
                             self._methods, None, None, self._num_returns,
                             self._class_key, self._tracked)

    def __repr__(self):
        return f"Actor({self._class_name}, {self._actor_id})"

    def __eq__(self, other):
        return (isinstance(other, ActorHandle)
                and other._actor_id == self._actor_id)

    def __hash__(self):
        return hash(self._actor_id)


def _lookup(qualified):
    """The handle of the live actor whose head name is ``qualified``, or
    None."""
    found = _shoal.get_actor(qualified)
    if found is None:
        return None
    actor_id, key, class_name = found
    methods, signatures, decorators, num_returns = None, None, None, None
    blob = _shoal.kv_get(key) if key.startswith("pyactor/") else None
    if blob is not None:
        try:
            cls = pickle.loads(blob)
            methods = _method_names(cls)
            signatures = _method_signatures(cls)
            decorators = _invocation_decorators(cls)
            num_returns = _method_num_returns(cls)
        except Exception:  # noqa: BLE001 - its module is not importable here
            methods = None
    return ActorHandle(actor_id, class_name, methods, signatures, decorators,
                       num_returns, key)


def get_actor(name, namespace=None):
    """The handle of the live actor called ``name`` in ``namespace`` (the
    job's own when None); ValueError when there is none (as in Ray)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"get_actor() takes an actor's name, not {name!r}")
    _require_init()
    found = _lookup(_qualified(name, namespace))
    if found is None:
        where = namespace if namespace is not None else job_namespace()
        raise ValueError(f"Failed to look up actor with name '{name}' in "
                         f"namespace '{where}': no live actor has that name "
                         "there (a non-detached actor is seen only by its "
                         "own job's namespace)")
    return found


async def _await_ref(ref):
    loop = asyncio.get_running_loop()
    from shoal import get
    return await loop.run_in_executor(None, get, ref)


def _ref_await(ref):
    return _await_ref(ref).__await__()


if not hasattr(ObjectRef, "__await__"):
    # ``await ref`` in an async actor: its value, read without blocking the
    # actor's event loop.
    ObjectRef.__await__ = _ref_await


def kill(actor, *, no_restart=True):
    """Ends ``actor``'s process; with no_restart=False it may restart
    (within its max_restarts)."""
    if not isinstance(actor, ActorHandle):
        # ValueError, as Ray's kill() raises.
        raise ValueError(f"kill() takes an actor handle, not "
                         f"{type(actor).__name__}: a task is stopped with "
                         f"cancel()")
    _require_init()
    _shoal.kill_actor(actor._actor_id, bool(no_restart))


def remote(*args, **options):
    """``@shoal.remote`` or ``@shoal.remote(num_cpus=..., resources=...)``
    on a function (a remote function) or a class (an actor class)."""
    if len(args) == 1 and not options and callable(args[0]):
        return _make(args[0], {})
    if args or not options:
        raise TypeError("use @shoal.remote (no parentheses) or "
                        "@shoal.remote(option=...) with at least one option")
    return lambda target: _make(target, options)


def _make(target, options):
    if inspect.isclass(target):
        return ActorClass(target, options)
    if callable(target):
        return RemoteFunction(target, options)
    raise TypeError("@shoal.remote takes a function or a class")


def method(**options):
    """Ray's ``@ray.method(num_returns=N)`` on an actor method: its calls
    return N refs (None for 0)."""
    _check_options(options, {"num_returns"}, "an actor method",
                   _options.METHOD_OPTIONS)

    def wrap(fn):
        if "num_returns" in options:
            fn.__shoal_num_returns__ = options["num_returns"]
        return fn

    return wrap


def _method_num_returns(cls):
    """{method: num_returns} of ``cls``'s methods that @method marked."""
    out = {}
    for name in _method_names(cls):
        n = getattr(getattr(cls, name), "__shoal_num_returns__", None)
        if n is not None:
            out[name] = n
    return out
