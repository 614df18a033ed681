"""The cluster's key-value store for programs (Ray's
``ray.experimental.internal_kv``): small byte values under byte keys, kept
by the head (in its storage, so a restarted head has them) and seen by
every driver and worker of the cluster.

Keys live in namespaces (``namespace=``; ``None`` is the default one),
which never see each other nor Shoal's own keys. A ``str`` key, value or
namespace is its UTF-8 bytes; values are bytes or str, as Ray takes them.
"""

import shoal
from shoal import _shoal

__all__ = [
    "_internal_kv_del",
    "_internal_kv_exists",
    "_internal_kv_get",
    "_internal_kv_initialized",
    "_internal_kv_list",
    "_internal_kv_put",
]


def _internal_kv_initialized():
    """Whether this process can reach the store: a driver after init(), or
    any worker."""
    return shoal.is_initialized() or shoal._in_worker()


def _as_bytes(what, value):
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"the key-value store's {what} must be bytes or str, "
                    f"not {type(value).__name__}: encode it first (str(x) "
                    f"or pickle.dumps(x))")


def _space(namespace):
    """The namespace as the store takes it (b"" is the default one)."""
    if not _internal_kv_initialized():
        raise RuntimeError("the cluster's key-value store is reached through "
                           "a cluster: call shoal.init() first")
    ns = b"" if namespace is None else _as_bytes("namespace", namespace)
    if b"\0" in ns:
        raise ValueError(f"the key-value namespace {ns!r} holds a NUL byte; "
                         f"name it with printable text")
    shoal._require_init()
    return ns


def _internal_kv_get(key, *, namespace=None):
    """The value under ``key`` (bytes), or None when it has none."""
    ns = _space(namespace)
    return _shoal.kv_get(_as_bytes("key", key), ns)


def _internal_kv_exists(key, *, namespace=None):
    return _internal_kv_get(key, namespace=namespace) is not None


def _internal_kv_put(key, value, overwrite=True, *, namespace=None):
    """Stores ``value`` under ``key``; a key that has a value keeps it
    unless ``overwrite``. Returns whether the key already had a value (as
    Ray's does)."""
    if not isinstance(overwrite, bool):
        raise TypeError("overwrite must be True or False")
    ns = _space(namespace)
    added = _shoal.kv_put(_as_bytes("key", key), _as_bytes("value", value),
                          overwrite, ns)
    return not added


def _internal_kv_del(key, *, del_by_prefix=False, namespace=None):
    """Deletes ``key`` (or, with ``del_by_prefix``, every key that starts
    with it); returns how many keys went."""
    ns = _space(namespace)
    return _shoal.kv_del(_as_bytes("key", key), bool(del_by_prefix), ns)


def _internal_kv_list(prefix, *, namespace=None):
    """Every key (bytes) that starts with ``prefix``, ordered."""
    ns = _space(namespace)
    return _shoal.kv_keys(_as_bytes("prefix", prefix), ns)
