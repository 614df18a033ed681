"""The shared queue under the name Ray first gave it
(``ray.experimental.queue``): ``shoal.util.queue`` itself."""

from shoal.util.queue import Empty, Full, Queue

__all__ = ["Empty", "Full", "Queue"]
