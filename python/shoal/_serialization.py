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
"""

import pickle
import struct

_MAGIC = b"SHP1"
_HEAD = struct.Struct("<4sIQ")
_ENTRY = struct.Struct("<QQ")
_ALIGN = 4096
# Buffers below this stay inside the pickle stream.
INLINE_THRESHOLD = 100 * 1024


def _align(n):
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def dumps(value):
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

    stream = pickle.dumps(value, protocol=5, buffer_callback=out_of_band)
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
