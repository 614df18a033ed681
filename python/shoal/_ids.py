"""Ray's id types (``JobID``, ``NodeID``, ``TaskID``, ``ActorID``,
``PlacementGroupID``): what ``get_runtime_context().get()``, its older
properties and actor handles give. Each is one of Shoal's id strings (it
compares, hashes and pickles as that string), with Ray's ``hex()``,
``binary()`` and ``is_nil()``."""


class BaseID(str):
    __slots__ = ()

    @classmethod
    def from_hex(cls, hex_id):
        return cls(hex_id)

    @classmethod
    def nil(cls):
        return cls("")

    def hex(self):
        return str(self)

    def binary(self):
        return str(self).encode()

    def is_nil(self):
        return not self

    def __repr__(self):
        return f"{type(self).__name__}({str(self)})"


class JobID(BaseID):
    __slots__ = ()


class NodeID(BaseID):
    __slots__ = ()


class TaskID(BaseID):
    __slots__ = ()


class ActorID(BaseID):
    __slots__ = ()


class PlacementGroupID(BaseID):
    __slots__ = ()
