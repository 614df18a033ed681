"""``import ray`` as Shoal: the alias the harness (ray_harness.py) installs
in the test process, and ``ray/__init__.py`` here in the processes a test
starts (a driver script run with ``python``).

``ray.X`` is ``shoal.X`` (the same module object) where Shoal has it; the
few Ray-internal names Ray's test files import at their top get plumbing
values (constants, the Ray Client switches, the mode of Ray's
``global_worker``), so that a file whose tests need nothing more is
collected; a test that reaches further into Ray's internals fails on them
and is counted.
"""

import contextlib
import importlib
import importlib.abc
import importlib.util
import sys
import types

import shoal
import shoal.state
import shoal.test_utils

# ---------------------------------------------------------------------------
# Ray-internal names the files import at their top.


def _module(name, **attributes):
    module = types.ModuleType(name)
    module.__path__ = []  # a package: its submodules may be imported
    module.__dict__.update(attributes)
    return module


def _not_in_shoal(what):
    def missing(*args, **kwargs):
        raise NotImplementedError(f"{what} is Ray-internal; Shoal has none")
    return missing


_CONSTANTS = dict(
    KV_NAMESPACE_FUNCTION_TABLE=b"fun",
    TASK_PUSH_ERROR="task",
    WORKER_CRASH_PUSH_ERROR="worker_crash",
    WORKER_DIED_PUSH_ERROR="worker_died",
    PUT_RECONSTRUCTION_PUSH_ERROR="put_reconstruction",
    PICKLING_LARGE_OBJECT_PUSH_ERROR="pickling_large_object",
    EXCESS_QUEUEING_WARNING="excess_queueing_warning",
    DASHBOARD_AGENT_DIED_ERROR="dashboard_agent_died",
    FUNCTION_SIZE_WARN_THRESHOLD=10**7,
    INFEASIBLE_TASK_ERROR="infeasible_task",
    RAY_OVERRIDE_DASHBOARD_URL=shoal.DASHBOARD_URL_OVERRIDE,
)


def _create_remote_signal_actor(ray):
    return shoal.test_utils.SignalActor


class _GlobalWorker:
    """The attributes of Ray's ``global_worker`` that tests read to learn
    where they run, from Shoal's public API: ``mode`` (a driver's, or a
    worker's), ``worker_id`` and ``node.unique_id``."""

    @property
    def mode(self):
        return _WORKER_MODE if shoal._in_worker() else _SCRIPT_MODE

    @property
    def worker_id(self):
        return shoal.get_runtime_context().get_worker_id()

    @property
    def node(self):
        return types.SimpleNamespace(
            unique_id=shoal.get_runtime_context().get_node_id())


_SCRIPT_MODE, _WORKER_MODE, _LOCAL_MODE = 0, 1, 2


def _worker_module():
    return _module("ray._private.worker", global_worker=_GlobalWorker(),
                   SCRIPT_MODE=_SCRIPT_MODE, WORKER_MODE=_WORKER_MODE,
                   LOCAL_MODE=_LOCAL_MODE)


# Modules the files import that neither Shoal nor Ray's public API has.
_SHIMS = {
    "ray._private": lambda: _module(
        "ray._private", worker=_worker_module(), state=shoal.state,
        ray_constants=_module("ray._private.ray_constants", **_CONSTANTS)),
    "ray._private.worker": lambda: sys.modules["ray._private"].worker,
    "ray._common": lambda: _module("ray._common"),
    "ray.tests": lambda: _module("ray.tests"),
    "ray._private.ray_constants": lambda: sys.modules[
        "ray._private"].ray_constants,
    "ray.ray_constants": lambda: _module("ray.ray_constants", **_CONSTANTS),
    "ray._private.test_utils": lambda: _module(
        "ray._private.test_utils",
        **{k: getattr(shoal.test_utils, k) for k in shoal.test_utils.__all__},
        client_test_enabled=lambda: False),
    "ray._common.test_utils": lambda: shoal.test_utils,
    "ray.tests.client_test_utils": lambda: _module(
        "ray.tests.client_test_utils",
        create_remote_signal_actor=_create_remote_signal_actor),
    # Ray Client (ray://) is not in Shoal: its switches say so.
    "ray.util.client": lambda: _module("ray.util.client"),
    "ray.util.client.ray_client_helpers": lambda: _module(
        "ray.util.client.ray_client_helpers",
        connect_to_client_or_not=lambda *a, **k: contextlib.nullcontext()),
    "ray._private.utils": lambda: _module(
        "ray._private.utils",
        publish_error_to_driver=_not_in_shoal("publish_error_to_driver")),
    "ray.cloudpickle": lambda: importlib.import_module("cloudpickle"),
    # Which processes are the cluster's (tests look for them by name).
    "ray.autoscaler": lambda: _module("ray.autoscaler"),
    "ray.autoscaler._private": lambda: _module("ray.autoscaler._private"),
    # The key of the autoscaler's last error (Shoal has no autoscaler).
    "ray.autoscaler._private.util": lambda: _module(
        "ray.autoscaler._private.util",
        DEBUG_AUTOSCALING_ERROR="__autoscaling_error"),
    "ray.autoscaler._private.constants": lambda: _module(
        "ray.autoscaler._private.constants",
        RAY_PROCESSES=[["shoal", False]]),
    # The numbers of actor and placement group states (the names
    # shoal.state reports: test_utils.convert_actor_state).
    "ray._private.gcs_utils": lambda: _module(
        "ray._private.gcs_utils",
        ActorTableData=types.SimpleNamespace(
            DEPENDENCIES_UNREADY=0, PENDING_CREATION=1, ALIVE=2,
            RESTARTING=3, DEAD=4),
        PlacementGroupTableData=types.SimpleNamespace(
            PENDING=0, CREATED=1, REMOVED=2, RESCHEDULING=3)),
}


class _RayAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``ray.X`` is ``shoal.X`` (the same module object), else a shim."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "ray" and not fullname.startswith("ray."):
            return None
        if fullname in _SHIMS:
            module = _SHIMS[fullname]()
        else:
            try:
                module = importlib.import_module("shoal" + fullname[3:])
            except ImportError:
                return None
        spec = importlib.util.spec_from_loader(fullname, self)
        spec._shoal_module = module
        return spec

    def create_module(self, spec):
        module = spec._shoal_module
        self._kept_spec = getattr(module, "__spec__", None)
        return module

    def exec_module(self, module):
        # The import machinery set the alias's spec on Shoal's module: give
        # it its own back.
        if self._kept_spec is not None:
            module.__spec__ = self._kept_spec


sys.meta_path.insert(0, _RayAlias())

# Shoal's modules loaded already are Ray's under their names from the start:
# importing one through the alias would bind it on its package, over a name
# the package gives it (``ray.util.placement_group``, the function, would
# become the module; Ray's package keeps the function).
for _name, _module_object in list(sys.modules.items()):
    if _name.startswith("shoal.") and _module_object is not None:
        sys.modules.setdefault("ray" + _name[5:], _module_object)
# `from ray import ray_constants` looks the name up on the package first.
shoal.ray_constants = _SHIMS["ray.ray_constants"]()
