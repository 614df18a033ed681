"""Shoal from Python: Ray's API over Shoal's C++ runtime.

This release has the driver side of objects: ``init``, ``shutdown``,
``put``, ``get``, ``wait`` and the cluster's resources. Remote functions and
actors come next (docs/design/python.md).

    import shoal
    shoal.init()                      # or shoal.init(address="host:6379")
    ref = shoal.put({"weights": numpy.zeros(1 << 20)})
    value = shoal.get(ref)            # arrays map the store: no copy
"""

import atexit
import os
import shutil

from shoal import _shoal
from shoal._serialization import dumps, loads
from shoal._shoal import GetTimeoutError, ObjectLostError, ObjectRef, ShoalError

__all__ = [
    "GetTimeoutError",
    "ObjectLostError",
    "ObjectRef",
    "ShoalError",
    "available_resources",
    "cluster_resources",
    "get",
    "init",
    "is_initialized",
    "nodes",
    "put",
    "shutdown",
    "wait",
]

_atexit_registered = False


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


def init(address=None, *, num_cpus=None, resources=None, _token=None,
         _temp_dir=None):
    """Joins a cluster, found by the same rule as ``shoal::Init()`` in C++.

    ``address``, else ``SHOAL_ADDRESS``, else the cluster ``shoal start``
    started from this host's temp dir, else a new local cluster of this
    process's own (stopped by ``shutdown()`` or at exit), as ``ray.init()``
    does. ``num_cpus`` and ``resources`` size that local cluster.
    """
    global _atexit_registered
    if _shoal.is_initialized():
        return
    program = ""
    if not address and not os.environ.get("SHOAL_ADDRESS"):
        program = _cluster_program()
    _shoal.init(address or "", _token or "", _temp_dir or "",
                -1.0 if num_cpus is None else float(num_cpus),
                dict(resources or {}), program)
    if not _atexit_registered:
        atexit.register(shutdown)
        _atexit_registered = True


def shutdown():
    """Leaves the cluster; stops the local cluster ``init()`` started."""
    _shoal.shutdown()


def is_initialized():
    return _shoal.is_initialized()


def _require_init():
    if not _shoal.is_initialized():
        raise ShoalError("shoal is not initialized: call shoal.init() first")


def put(value):
    """Stores ``value`` and returns its ObjectRef.

    It is pickled (protocol 5); large buffers (numpy arrays, bytes) are laid
    out after the pickle stream, so that ``get`` maps them in place.
    """
    if isinstance(value, ObjectRef):
        raise TypeError("put() of an ObjectRef: pass the ref itself instead")
    _require_init()
    pieces, size = dumps(value)
    return _shoal.put_pieces(pieces, size)


def _ref_list(caller, refs):
    try:
        refs = list(refs)
    except TypeError:
        refs = [refs]
    for r in refs:
        if not isinstance(r, ObjectRef):
            raise TypeError(f"{caller}() takes an ObjectRef or a list of "
                            f"them, not {type(r).__name__}")
    return refs


def _timeout_ms(timeout):
    if timeout is None:
        return -1
    if timeout < 0:
        raise ValueError("timeout must be None or 0 or more seconds")
    return int(timeout * 1000)


def get(refs, *, timeout=None):
    """The value of a ref, or the values of a list of refs, in order.

    Large numpy arrays come back as read-only views of the object store;
    the object stays in the store while any of them lives. Raises
    GetTimeoutError after ``timeout`` seconds.
    """
    single = isinstance(refs, ObjectRef)
    ref_list = [refs] if single else _ref_list("get", refs)
    _require_init()
    values = [loads(b) for b in _shoal.get(ref_list, _timeout_ms(timeout))]
    return values[0] if single else values


def wait(refs, *, num_returns=1, timeout=None):
    """(ready, not_ready): the first ``num_returns`` refs that are ready,
    within ``timeout`` seconds, and the rest, each in the given order."""
    refs = _ref_list("wait", refs)
    _require_init()
    if num_returns < 0 or num_returns > len(refs):
        raise ValueError(
            f"num_returns must be between 0 and the {len(refs)} refs given")
    ready_at = set(
        sorted(_shoal.wait(refs, num_returns, _timeout_ms(timeout)))
        [:num_returns])
    ready = [r for i, r in enumerate(refs) if i in ready_at]
    not_ready = [r for i, r in enumerate(refs) if i not in ready_at]
    return ready, not_ready


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
