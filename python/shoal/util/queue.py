"""Ray's ``ray.util.queue``: a first-in, first-out queue that tasks and
actors share, kept in an actor of its own.

    q = Queue(maxsize=10)
    q.put(1)                         # blocks while full (timeout=...)
    consumer.remote(q)               # the queue may be passed to tasks
    q.get(timeout=5)                 # raises Empty when nothing came
    q.shutdown()

``put`` and ``get`` block (``block=True``) up to ``timeout`` seconds and
raise ``Full`` / ``Empty``; the ``_nowait`` forms raise at once.
"""

import asyncio
import collections.abc
import functools
import queue as _stdlib_queue
import threading
import time

__all__ = ["Empty", "Full", "Queue"]

# How many calls the queue's actor serves at once: blocked get()s and
# put()s each hold one until they return.
_DEFAULT_CONCURRENCY = 100


class Empty(_stdlib_queue.Empty):
    """get() found nothing in the queue (in time)."""


class Full(_stdlib_queue.Full):
    """put() found the queue full (until its timeout)."""


class _QueueActor:
    """The queue itself, in an actor whose calls run on several threads:
    a blocked get() leaves the other calls free to run."""

    def __init__(self, maxsize):
        self.maxsize = maxsize
        self.items = collections.deque()
        self.changed = threading.Condition()

    def qsize(self):
        return len(self.items)

    def empty(self):
        return not self.items

    def full(self):
        return 0 < self.maxsize <= len(self.items)

    def _wait(self, ready, timeout):
        """Waits on the condition (held) until ready(); False on time out."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not ready():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self.changed.wait(left)
        return True

    def put(self, item, timeout=None):
        with self.changed:
            if not self._wait(lambda: not self.full(), timeout):
                raise Full
            self.items.append(item)
            self.changed.notify_all()

    def get(self, timeout=None):
        with self.changed:
            if not self._wait(lambda: bool(self.items), timeout):
                raise Empty
            item = self.items.popleft()
            self.changed.notify_all()
            return item

    def put_nowait(self, item):
        self.put(item, timeout=0)

    def put_nowait_batch(self, items):
        with self.changed:
            if self.maxsize > 0 and len(items) + len(self.items) > self.maxsize:
                raise Full(f"Cannot add {len(items)} items to queue of size "
                           f"{len(self.items)} and maxsize {self.maxsize}.")
            self.items.extend(items)
            self.changed.notify_all()

    def get_nowait(self):
        return self.get(timeout=0)

    def get_nowait_batch(self, num_items):
        with self.changed:
            if num_items > len(self.items):
                raise Empty(f"Cannot get {num_items} items from queue of "
                            f"size {len(self.items)}.")
            out = [self.items.popleft() for _ in range(num_items)]
            self.changed.notify_all()
            return out


def _call(ref):
    """The result of a queue call; Empty and Full raised as themselves (not
    as a remote task's error that is also one)."""
    import shoal
    try:
        return shoal.get(ref)
    except (Empty, Full) as e:
        cause = getattr(e, "cause", None)
        if isinstance(cause, (Empty, Full)):
            raise type(cause)(*cause.args) from None
        raise


class Queue:
    """A queue shared by tasks and actors (Ray's ``ray.util.queue.Queue``).
    ``maxsize`` <= 0: unbounded. ``actor_options`` are the options of the
    queue's actor (num_cpus, name, max_concurrency...)."""

    def __init__(self, maxsize=0, hidden=False, actor_options=None):
        import shoal
        del hidden
        options = {"num_cpus": 0, "max_concurrency": _DEFAULT_CONCURRENCY}
        options.update(actor_options or {})
        self.maxsize = maxsize
        self.actor = shoal.remote(_QueueActor).options(**options).remote(
            maxsize)

    def __len__(self):
        return self.size()

    def size(self):
        """How many items the queue holds."""
        return _call(self.actor.qsize.remote())

    def qsize(self):
        return self.size()

    def empty(self):
        return _call(self.actor.empty.remote())

    def full(self):
        return _call(self.actor.full.remote())

    def put(self, item, block=True, timeout=None):
        """Adds ``item``; while the queue is full, waits (``block``) up to
        ``timeout`` seconds (None: as long as it takes), then raises
        Full."""
        if not block:
            return _call(self.actor.put_nowait.remote(item))
        if timeout is not None and timeout < 0:
            raise ValueError("'timeout' must be a non-negative number")
        return _call(self.actor.put.remote(item, timeout))

    def get(self, block=True, timeout=None):
        """Takes the oldest item; while the queue is empty, waits
        (``block``) up to ``timeout`` seconds, then raises Empty."""
        if not block:
            return _call(self.actor.get_nowait.remote())
        if timeout is not None and timeout < 0:
            raise ValueError("'timeout' must be a non-negative number")
        return _call(self.actor.get.remote(timeout))

    async def put_async(self, item, block=True, timeout=None):
        """put() without blocking the event loop."""
        return await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(self.put, item, block, timeout))

    async def get_async(self, block=True, timeout=None):
        """get() without blocking the event loop."""
        return await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(self.get, block, timeout))

    def put_nowait(self, item):
        """put() that raises Full at once when the queue is full."""
        return self.put(item, block=False)

    def put_nowait_batch(self, items):
        """Adds all of ``items`` at once, or none (Full) when they do not
        fit."""
        if not isinstance(items, collections.abc.Iterable):
            raise TypeError("Argument 'items' must be an Iterable")
        return _call(self.actor.put_nowait_batch.remote(list(items)))

    def get_nowait(self):
        """get() that raises Empty at once when the queue is empty."""
        return self.get(block=False)

    def get_nowait_batch(self, num_items):
        """Takes ``num_items`` items at once, or none (Empty) when the
        queue holds fewer."""
        if not isinstance(num_items, int):
            raise TypeError("Argument 'num_items' must be an int")
        if num_items < 0:
            raise ValueError("'num_items' must be nonnegative")
        return _call(self.actor.get_nowait_batch.remote(num_items))

    def shutdown(self, force=False, grace_period_s=5):
        """Ends the queue's actor; its items are lost."""
        import shoal
        del force, grace_period_s
        if self.actor is not None:
            shoal.kill(self.actor, no_restart=True)
        self.actor = None
