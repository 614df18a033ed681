"""``shoal.cloudpickle``: the pickler Shoal sends functions and classes
with (Ray's ``ray.cloudpickle``), for programs that pickle the same way."""

from cloudpickle import *  # noqa: F401,F403
from cloudpickle import dump, dumps, load, loads  # noqa: F401
