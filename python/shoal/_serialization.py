"""How Python values are stored: pickle protocol 5 with large buffers laid
out after the pickle stream, each 64-byte aligned, so that a value read back
from the object store maps them in place (numpy arrays become read-only
views of the store).

Layout (little-endian):
    b"SHP1"  u32 number of buffers  u64 pickle length
    per buffer: u64 offset  u64 length   (offsets from the start)
    pickle stream, then the buffers
"""

import pickle
import struct

_MAGIC = b"SHP1"
_HEAD = struct.Struct("<4sIQ")
_ENTRY = struct.Struct("<QQ")
_ALIGN = 64
# Buffers below this stay inside the pickle stream.
INLINE_THRESHOLD = 100 * 1024


def _align(n):
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def dumps(value):
    """The stored form of ``value``, as one bytearray."""
    buffers = []

    def out_of_band(buf):
        view = buf.raw()
        if view.nbytes < INLINE_THRESHOLD:
            return True  # in band
        buffers.append(view)
        return False

    stream = pickle.dumps(value, protocol=5, buffer_callback=out_of_band)
    header = _HEAD.size + _ENTRY.size * len(buffers)
    offset = _align(header + len(stream))
    entries = []
    for view in buffers:
        entries.append((offset, view.nbytes))
        offset = _align(offset + view.nbytes)
    out = bytearray(offset if buffers else header + len(stream))
    _HEAD.pack_into(out, 0, _MAGIC, len(buffers), len(stream))
    for i, entry in enumerate(entries):
        _ENTRY.pack_into(out, _HEAD.size + i * _ENTRY.size, *entry)
    out[header:header + len(stream)] = stream
    for (at, size), view in zip(entries, buffers):
        out[at:at + size] = view
    return out


def loads(data):
    """The value stored as ``data`` (a buffer); its large buffers are
    read-only views of ``data``, which they keep alive."""
    view = memoryview(data)
    magic, count, length = _HEAD.unpack_from(view, 0)
    if magic != _MAGIC:
        raise ValueError(
            "this object was not stored by shoal's Python API (a C++ value "
            "or raw bytes); read it from C++")
    buffers = []
    for i in range(count):
        at, size = _ENTRY.unpack_from(view, _HEAD.size + i * _ENTRY.size)
        buffers.append(view[at:at + size])
    start = _HEAD.size + _ENTRY.size * count
    return pickle.loads(view[start:start + length], buffers=buffers)
