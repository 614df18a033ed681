"""How Python values are stored: pickle protocol 5 with large buffers laid
out after the pickle stream, each at a page (4 KiB) boundary, so that a
value read back from the object store maps them in place (numpy arrays
become read-only views of the store). Page alignment also keeps the copy
into the store at memcpy speed: a destination a few cache lines off the
source's page offset runs about 4x slower (4K aliasing).

Layout (little-endian):
    b"SHP1"  u32 number of buffers  u64 pickle length
    per buffer: u64 offset  u64 length   (offsets from the start)
    pickle stream, then the buffers

Values are pickled by the C pickler when that is enough, and by cloudpickle
when it is not: functions, lambdas and classes defined in ``__main__`` or
inside functions travel by value, as Ray's do. torch CPU tensors travel as
their numpy view (out of band, one copy into the store); they come back as
a tensor of their own memory (a tensor cannot be read-only). Large ``bytes``
near the top of a value go out of band too, and come back as ``bytes``.
"""

import contextlib
import copyreg
import io
import pickle
import struct
import sys
import threading

import cloudpickle

_MAGIC = b"SHP1"
_HEAD = struct.Struct("<4sIQ")
_ENTRY = struct.Struct("<QQ")
_ALIGN = 4096
# Buffers below this stay inside the pickle stream.
INLINE_THRESHOLD = 100 * 1024


def _align(n):
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


# ---- torch tensors ----

_torch_table = None


def _tensor_from_array(array, dtype_name, shape):
    """A tensor of its own memory holding ``array`` (a view of the store)."""
    import numpy
    import torch
    dtype = getattr(torch, dtype_name)
    tensor = torch.from_numpy(numpy.array(array, copy=True))
    if tensor.dtype != dtype:  # travelled as same-size integers
        tensor = tensor.view(dtype)
    return tensor.reshape(shape)


def _reduce_tensor(tensor):
    import torch
    if (tensor.device.type != "cpu" or tensor.requires_grad
            or tensor.layout != torch.strided or tensor.is_quantized):
        return tensor.__reduce_ex__(5)  # torch's own way, copied in band
    flat = tensor.detach().contiguous().reshape(-1)
    dtype_name = str(tensor.dtype).replace("torch.", "")
    try:
        array = flat.numpy()
    except TypeError:  # bfloat16 and other types numpy lacks
        same_size = {1: torch.int8, 2: torch.int16, 4: torch.int32,
                     8: torch.int64}[tensor.element_size()]
        array = flat.view(same_size).numpy()
    return _tensor_from_array, (array, dtype_name, tuple(tensor.shape))


def _dispatch_table():
    """The reducers for the types this module pickles its own way, once
    their modules are loaded (torch is never imported here)."""
    global _torch_table
    if _torch_table is None and "torch" in sys.modules:
        import torch
        _torch_table = {torch.Tensor: _reduce_tensor,
                        torch.nn.Parameter: _reduce_tensor}
    return _torch_table


class _TablePickler(pickle.Pickler):
    pass


class _TableCloudPickler(cloudpickle.CloudPickler):
    pass


# ---- ObjectRefs inside values ----
#
# A ref inside a call's arguments (a list of refs, say) is captured while
# the call is pickled: it becomes one more argument of the task, which the
# runtime resolves before the task runs, and reads back in the worker as a
# ResolvedRef holding that value, which get() and wait() take like a ref.
#
# A ref inside a task's result (a task that returns [f.remote()]) is lent,
# not waited for: the result carries its id and its owner's address, the
# owner keeps the object for the reader, and the caller reads the ref back
# as a ref it borrows (its get asks the owner). A ResolvedRef (a value that
# came with its ref) carries its value again. A worker that ends after the
# call (its function's max_calls) cannot lend: its refs wait and carry
# their values. Inside a put value, a ref that
# is ready carries its value; a pending one is its id, readable by the
# process that owns the object.

_capture = threading.local()

# How dumps() treats a ref outside a call's arguments.
_EMBED_LENT = "lent"     # lent by its owner (a task's result)
_EMBED_WAITING = "wait"  # its value, once ready (a result whose worker ends)
_EMBED_READY = "ready"   # its value if ready now, else its id (a put value)


def _reduce_ref(ref):
    captured = getattr(_capture, "refs", None)
    if captured is not None:
        captured.append(ref)
        return _resolved_ref, (len(captured) - 1,)
    embed = getattr(_capture, "embed", None)
    if embed == _EMBED_LENT:
        from shoal import _shoal
        return _borrowed_ref, (ref.hex(), _shoal.lend(ref))
    if embed is not None:
        embedded = _embedded(ref, embed == _EMBED_WAITING)
        if embedded is not None:
            return embedded
    return _ref_from_id, (ref.hex(),)


def _borrowed_ref(object_id, owner):
    from shoal import _shoal
    return _shoal.borrow(object_id, owner)


def _embedded(ref, wait):
    """The reduction of ``ref`` that carries its object's stored bytes (or
    its error), or None when it is not ready and ``wait`` is False (the
    worker's CPU is lent while it waits, as in any get)."""
    from shoal import _shoal
    if not wait and not _shoal.wait([ref], 1, 0, False):
        return None
    try:
        stored = _shoal.get([ref], -1, False)[0]
    except _shoal.RemoteError as e:
        return _failed_ref, (ref.hex(), tuple(e.args))
    return _carried_ref, (_carried_bytes(stored), ref.hex())


def _carried_bytes(stored):
    """Stored bytes in the form a pickler lays out of band when large."""
    if isinstance(stored, tuple):
        return stored  # a C++ program's value: ("msgpack", bytes)
    return pickle.PickleBuffer(stored)


def _carried_ref(data, object_id):
    return ResolvedRef(data, object_id)


def _failed_ref(object_id, error_args):
    return ResolvedRef(None, object_id, error_args)


def _ref_from_id(object_id):
    from shoal import _shoal
    return _shoal.ref_from_id(object_id)


class ResolvedRef:
    """A ref whose value came with it: one inside a task's arguments,
    resolved before the task ran, or one inside a put value.
    ``shoal.get`` gives its value (or raises its task's error),
    ``shoal.wait`` finds it ready, and passing it on to another task or
    returning it passes the value again."""
    __slots__ = ("_data", "_id", "_error")

    def __init__(self, data, object_id="", error=None):
        self._data = data
        self._id = object_id
        self._error = error

    def hex(self):
        return self._id

    def value(self):
        if self._error is not None:
            from shoal import exceptions
            raise exceptions.task_error(*self._error)
        return stored_value(self._data)

    def __reduce__(self):
        captured = getattr(_capture, "refs", None)
        if captured is None:
            if self._error is not None:
                return _failed_ref, (self._id, self._error)
            return _carried_ref, (_carried_bytes(self._data), self._id)
        from shoal import _shoal
        if self._error is not None:
            self.value()  # raises: a failed argument fails the call here
        captured.append(_shoal.put_pieces([(0, self._data)], len(self._data)))
        return _resolved_ref, (len(captured) - 1,)

    def __eq__(self, other):
        return isinstance(other, ResolvedRef) and self._id != "" and \
            self._id == other._id

    def __hash__(self):
        return hash(self._id)

    def __await__(self):
        # ``await ref`` in an async actor, as for any ObjectRef: its value
        # is here already.
        return self.value()
        yield  # noqa: unreachable - makes this a generator

    def __repr__(self):
        return f"ResolvedRef({self._id})"


def _resolved_ref(index):
    values = getattr(_capture, "values", None)
    if values is None:
        raise ValueError("an ObjectRef captured in a task's arguments is "
                         "read back only inside that task")
    return ResolvedRef(values[index])


@contextlib.contextmanager
def _capturing(field, value):
    """Sets ``_capture.<field>`` to ``value`` while the block runs."""
    setattr(_capture, field, value)
    try:
        yield value
    finally:
        setattr(_capture, field, None)


def dumps_capturing_refs(value, lift=True):
    """dumps(value), with the refs inside it captured: (pieces, size,
    refs)."""
    with _capturing("refs", []) as refs:
        pieces, size = dumps(value, lift)
    return pieces, size, refs


def _dumps_embedding(value, embed):
    # Not _capturing: a generator context per task's result or put costs
    # more than the pickling of a small one.
    _capture.embed = embed
    try:
        return dumps(value)
    finally:
        _capture.embed = None


# Values that hold no ref, no large buffer and nothing of __main__: the C
# pickler's stream of one is its whole stored form (the fast path of the
# calls that pass and return only these).
_SCALARS = frozenset((int, float, bool, type(None), str, bytes))
_MAX_SCALAR_LEN = 4096


def is_scalar(value):
    """Whether ``value`` is one of _SCALARS, small."""
    kind = type(value)
    return kind in _SCALARS and (kind not in (str, bytes) or
                                 len(value) <= _MAX_SCALAR_LEN)


def _plain_stream(value):
    """The C pickler's stream of a value of scalars (is_scalar) in tuples,
    lists and dicts, which holds no ref and no large buffer: nothing to lift
    or capture. None when it would not do (something that names __main__,
    which dumps() sends by value)."""
    try:
        stream = pickle.dumps(value, protocol=5)
    except (pickle.PicklingError, AttributeError, TypeError):
        return None
    return None if b"__main__" in stream else stream


def dumps_plain(value):
    """dumps() of such a value (_plain_stream), or None."""
    stream = _plain_stream(value)
    if stream is None:
        return None
    head = _HEAD.pack(_MAGIC, 0, len(stream))
    return [(0, head), (len(head), stream)], len(head) + len(stream)


def inline_plain(value):
    """as_inline(*dumps_plain(value)) in one step: the stored form as one
    bytes object, or None when dumps_plain would not do or it is large."""
    stream = _plain_stream(value)
    if stream is None or len(stream) >= INLINE_THRESHOLD - _HEAD.size:
        return None
    return _HEAD.pack(_MAGIC, 0, len(stream)) + stream


def _dumps_stored(value, embed):
    """dumps() of a value to store: a scalar's plain stream, else with the
    refs inside it carrying their values as `embed` says."""
    if is_scalar(value):
        plain = dumps_plain(value)
        if plain is not None:
            return plain
    return _dumps_embedding(value, embed)


def dumps_result(value, lend=True):
    """dumps() of a task's result: the refs inside it are lent, or, without
    ``lend`` (the worker ends after it), carry their values."""
    return _dumps_stored(value, _EMBED_LENT if lend else _EMBED_WAITING)


def dumps_put(value):
    """dumps() of a put value: the refs inside it that are ready carry
    their values."""
    return _dumps_stored(value, _EMBED_READY)


def loads_with_refs(data, values):
    """loads(data) of a value dumped by dumps_capturing_refs, whose refs
    were resolved to ``values`` (their stored bytes, in order)."""
    if not values:
        return loads(data)  # it captured no ref
    with _capturing("values", values):
        return loads(data)


def register_ref_type(ref_type):
    """Makes ObjectRefs of ``ref_type`` picklable as above."""
    copyreg.pickle(ref_type, _reduce_ref)


# ---- bytes ----


class _LargeBytes:
    """A large ``bytes`` value, pickled out of band (the pickler writes
    ``bytes`` into its stream otherwise); read back as ``bytes`` again."""
    __slots__ = ("data",)

    def __init__(self, data):
        self.data = data

    def __reduce__(self):
        return _bytes_of, (pickle.PickleBuffer(self.data),)


def _bytes_of(buffer):
    return bytes(buffer)


_MAX_LIFTED_ITEMS = 64  # longer containers are left as they are


def lift_bytes(value, depth=3):
    """``value`` with each large ``bytes`` in it (itself, or inside the
    tuples, lists and dicts of its first levels) marked to go out of band;
    the value itself when there is none."""
    kind = type(value)
    if kind is bytes:
        return _LargeBytes(value) if len(value) >= INLINE_THRESHOLD else value
    if depth == 0 or kind not in (tuple, list, dict) or \
            len(value) > _MAX_LIFTED_ITEMS:
        return value
    if kind is dict:
        lifted = {k: lift_bytes(v, depth - 1) for k, v in value.items()}
        changed = any(lifted[k] is not v for k, v in value.items())
    else:
        lifted = [lift_bytes(v, depth - 1) for v in value]
        changed = any(a is not b for a, b in zip(lifted, value))
        lifted = kind(lifted)
    return lifted if changed else value


def _pickle(value, buffer_callback, by_value):
    """The pickle stream of ``value``; ``by_value`` uses cloudpickle."""
    table = _dispatch_table()
    if table is None:
        if by_value:
            return cloudpickle.dumps(value, protocol=5,
                                     buffer_callback=buffer_callback)
        return pickle.dumps(value, protocol=5,
                            buffer_callback=buffer_callback)
    out = io.BytesIO()
    if by_value:
        pickler = _TableCloudPickler(out, protocol=5,
                                     buffer_callback=buffer_callback)
        base = cloudpickle.CloudPickler.dispatch_table
    else:
        pickler = _TablePickler(out, protocol=5,
                                buffer_callback=buffer_callback)
        base = copyreg.dispatch_table
    pickler.dispatch_table = {**base, **table}
    pickler.dump(value)
    return out.getvalue()


def pickle_by_value(value):
    """cloudpickle's bytes of ``value`` (a function or class to ship)."""
    return _pickle(value, None, by_value=True)


def dumps(value, lift=True):
    """The stored form of ``value``: (pieces, size), where pieces are
    (offset, buffer) pairs that together make ``size`` bytes (gaps are
    zero). Large buffers are the value's own memory: nothing is copied
    here."""
    buffers = []

    def out_of_band(buf):
        view = buf.raw()
        if view.nbytes < INLINE_THRESHOLD:
            return True  # in band
        buffers.append(view)
        return False

    if lift:  # else the caller lifted what may hold large bytes
        value = lift_bytes(value)
    try:
        stream = _pickle(value, out_of_band, by_value=False)
        # Something of __main__ (a class, a function) is named by reference,
        # which a worker cannot resolve: send it by value instead.
        by_reference_to_main = b"__main__" in stream
    except (pickle.PicklingError, AttributeError, TypeError):
        by_reference_to_main = True  # lambdas, local functions and classes
    if by_reference_to_main:
        buffers.clear()
        if getattr(_capture, "refs", None):
            del _capture.refs[:]  # captured again below
        stream = _pickle(value, out_of_band, by_value=True)
    head = bytearray(_HEAD.size + _ENTRY.size * len(buffers))
    _HEAD.pack_into(head, 0, _MAGIC, len(buffers), len(stream))
    pieces = [(0, head), (len(head), stream)]
    offset = len(head) + len(stream)
    for i, view in enumerate(buffers):
        offset = _align(offset)
        _ENTRY.pack_into(head, _HEAD.size + i * _ENTRY.size, offset,
                         view.nbytes)
        pieces.append((offset, view))
        offset += view.nbytes
    return pieces, offset


def as_inline(pieces, size):
    """The stored form that ``dumps`` gave as one bytes object, when it is
    small and has no out-of-band buffers (it travels inside the task);
    else None (it goes through the object store)."""
    if len(pieces) > 2 or size >= INLINE_THRESHOLD:
        return None
    return bytes(pieces[0][1]) + pieces[1][1]


def loads(data):
    """The value stored as ``data`` (a buffer); its large buffers are
    read-only views of ``data``, which they keep alive. Bytes that Python
    did not store (a C++ program's Buffer) read back as ``bytes``."""
    view = memoryview(data)
    if view.nbytes < _HEAD.size:
        return bytes(view)  # raw bytes a C++ program stored (a Buffer)
    magic, count, length = _HEAD.unpack_from(view, 0)
    if magic != _MAGIC:
        return bytes(view)
    if count == 0:  # a small value: its pickle stream alone
        return pickle.loads(view[_HEAD.size:_HEAD.size + length])
    buffers = []
    for i in range(count):
        at, size = _ENTRY.unpack_from(view, _HEAD.size + i * _ENTRY.size)
        buffers.append(view[at:at + size])
    start = _HEAD.size + _ENTRY.size * count
    return pickle.loads(view[start:start + length], buffers=buffers)


def stored_value(stored):
    """A value from what _shoal gives for an object: a Python value's
    stored bytes, or ("msgpack", bytes) for a C++ program's value."""
    if isinstance(stored, tuple):
        import msgpack
        return msgpack.unpackb(stored[1], raw=False)
    return loads(stored)
