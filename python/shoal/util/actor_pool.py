"""Ray's ``ActorPool``: work spread over a fixed set of actors.

    pool = ActorPool([Worker.remote() for _ in range(4)])
    results = list(pool.map(lambda a, v: a.double.remote(v), range(10)))

Each value goes to an idle actor; when none is idle it waits until one
returns. ``map`` gives results in submission order, ``map_unordered`` as
they finish.
"""

__all__ = ["ActorPool"]


def _refs(future):
    return list(future) if isinstance(future, (list, tuple)) else [future]


def _key(future):
    return tuple(future) if isinstance(future, list) else future


class ActorPool:
    """Schedules calls over ``actors``; not thread-safe (use it from one
    thread, as Ray's)."""

    def __init__(self, actors):
        self._idle_actors = list(actors)
        self._future_to_actor = {}   # future -> (task index, actor)
        self._index_to_future = {}   # task index -> future
        self._next_task_index = 0
        self._next_return_index = 0
        self._pending_submits = []   # (fn, value) waiting for an actor

    def map(self, fn, values):
        """Applies ``fn(actor, value)`` (which returns an ObjectRef) to each
        value; yields the results in the order of ``values``. Results of
        earlier submissions not yet taken are dropped first."""
        self._drop_pending(self.get_next)
        for v in values:
            self.submit(fn, v)

        def results():
            while self.has_next():
                yield self.get_next()

        return results()

    def map_unordered(self, fn, values):
        """As ``map``, but yields each result as soon as it is ready."""
        self._drop_pending(self.get_next_unordered)
        for v in values:
            self.submit(fn, v)

        def results():
            while self.has_next():
                yield self.get_next_unordered()

        return results()

    def _drop_pending(self, take):
        while self.has_next():
            try:
                take(timeout=0, ignore_if_timedout=True)
            except TimeoutError:
                pass

    def submit(self, fn, value):
        """Runs ``fn(actor, value)`` on an idle actor, or queues it until
        one is free. ``fn`` returns an ObjectRef (or a list of them)."""
        if self._idle_actors:
            actor = self._idle_actors.pop()
            future = fn(actor, value)
            self._future_to_actor[_key(future)] = (self._next_task_index,
                                                   actor)
            self._index_to_future[self._next_task_index] = future
            self._next_task_index += 1
        else:
            self._pending_submits.append((fn, value))

    def has_next(self):
        """True while some submitted call's result has not been taken."""
        return bool(self._future_to_actor)

    def get_next(self, timeout=None, ignore_if_timedout=False):
        """The next result in submission order. Raises StopIteration when
        none is pending, and TimeoutError when it is not ready within
        ``timeout`` seconds (with ``ignore_if_timedout``, that result is
        dropped and its actor given back first)."""
        import shoal
        if not self.has_next():
            raise StopIteration("No more results to get")
        if self._next_return_index >= self._next_task_index:
            raise ValueError("It is not allowed to call get_next() after "
                             "get_next_unordered().")
        future = self._index_to_future[self._next_return_index]
        timed_out = False
        if timeout is not None:
            refs = _refs(future)
            ready, _ = shoal.wait(refs, num_returns=len(refs),
                                  timeout=timeout)
            if len(ready) < len(refs):
                if not ignore_if_timedout:
                    raise TimeoutError("Timed out waiting for result")
                timed_out = True
        del self._index_to_future[self._next_return_index]
        self._next_return_index += 1
        _, actor = self._future_to_actor.pop(_key(future))
        self._return_actor(actor)
        if timed_out:
            raise TimeoutError(f"Timed out waiting for result. The task "
                               f"{future} has been ignored.")
        return shoal.get(future)

    def get_next_unordered(self, timeout=None, ignore_if_timedout=False):
        """Whichever pending result is ready first. Raises StopIteration
        when none is pending, TimeoutError when none is ready within
        ``timeout`` seconds (with ``ignore_if_timedout``, the oldest one is
        dropped first). After it, get_next() may no longer be called."""
        import shoal
        if not self.has_next():
            raise StopIteration("No more results to get")
        by_ref = {}
        for key in self._future_to_actor:
            for ref in _refs(key):
                by_ref[ref] = key
        ready, _ = shoal.wait(list(by_ref), num_returns=1, timeout=timeout)
        timed_out = False
        if ready:
            key = by_ref[ready[0]]
        elif not ignore_if_timedout:
            raise TimeoutError("Timed out waiting for result")
        else:
            timed_out = True
            key = min(self._future_to_actor,
                      key=lambda k: self._future_to_actor[k][0])
        index, actor = self._future_to_actor.pop(key)
        future = self._index_to_future.pop(index)
        self._return_actor(actor)
        self._next_return_index = max(self._next_return_index, index + 1)
        if timed_out:
            raise TimeoutError(f"Timed out waiting for result. The task "
                               f"{future} has been ignored.")
        return shoal.get(future)

    def _return_actor(self, actor):
        self._idle_actors.append(actor)
        if self._pending_submits:
            self.submit(*self._pending_submits.pop(0))

    def has_free(self):
        """True when an actor is idle and no call waits for one."""
        return bool(self._idle_actors) and not self._pending_submits

    def pop_idle(self):
        """Takes an idle actor out of the pool, or None when none is
        free."""
        if self.has_free():
            return self._idle_actors.pop()
        return None

    def push(self, actor):
        """Adds ``actor`` to the pool (it takes a waiting call at once);
        ValueError when it is in the pool already."""
        busy = [a for _, a in self._future_to_actor.values()]
        if actor in self._idle_actors or actor in busy:
            raise ValueError("Actor already belongs to current ActorPool")
        self._return_actor(actor)
