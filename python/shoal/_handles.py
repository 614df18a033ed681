"""When a non-detached actor ends: once its last handle anywhere is gone.

The process that created the actor (its owner) counts the handles it
holds. A handle passed in a call's arguments (a task's, an actor
method's, an actor's constructor's) is counted as held by that call until
the call ends: the owner watches the call's result. A process that got a
handle in its arguments and still holds it when the call ends (stored in
an actor, a global, a closure) says so in the head's key-value store
(``pykept/<actor id>``) before it answers the call, so the owner, which
reads the key only after the call's answer, sees it in time. Then, and
whenever a handle is passed some other way (in a result, a put value, by
a process that does not own the actor), the actor may be held anywhere and
ends with its job or its owner instead, as before.

So ``f.remote(actor)`` followed by ``del actor`` ends the actor once the
task is done, as in Ray, at the cost of one key read when the owner's last
handle goes, and one key write per actor in a process that keeps a handle
it was passed.
"""

import threading
import time

from shoal import _shoal

_lock = threading.Condition()
_owned = {}  # actor id -> _Owned, for actors this process created
_held = {}  # actor id -> handles held here of tracked actors owned elsewhere
_flagged = set()  # actors this process said it keeps (pykept/<id>)
_calls = []  # [result ref, [actor ids]] of calls that carry handles
_to_check = []  # (actor id, entry): last handle gone after a pass
_passing = threading.local()
_watcher = None
# Calls looked at per poll, oldest first: a driver that passes one handle
# to thousands of tasks pays for a bounded wait every 50 ms, not one over
# all of them (a later call's result is let go once the window reaches it).
_POLL_WINDOW = 1024


class _Owned:
    __slots__ = ("class_name", "handles", "in_calls", "escaped", "passed",
                 "checking")

    def __init__(self, class_name):
        self.class_name = class_name
        self.handles = 0  # handles this process holds
        self.in_calls = 0  # calls not yet ended that were passed a handle
        self.escaped = False  # passed some way nobody can follow
        self.passed = False  # ever passed to a call
        self.checking = False  # the watcher reads pykept/<id> for it


def _kept_key(actor_id):
    return f"pykept/{actor_id}"


def created(actor_id, class_name):
    """This process created non-detached ``actor_id``."""
    with _lock:
        _owned[str(actor_id)] = _Owned(class_name)


def counted(actor_id, delta, tracked):
    """A handle of ``actor_id`` was made (+1) or dropped (-1) here;
    ``tracked``: its owner follows its handles."""
    actor_id = str(actor_id)
    end = None
    with _lock:
        entry = _owned.get(actor_id)
        if entry is None:
            if tracked:
                n = _held.get(actor_id, 0) + delta
                if n > 0:
                    _held[actor_id] = n
                else:
                    _held.pop(actor_id, None)
            return
        entry.handles += delta
        end = _decide(actor_id, entry)
    if end is not None:
        _end(actor_id, end)


def _decide(actor_id, entry):
    """The class name of ``actor_id`` when it should end now; else None
    (queues the key check when a pass makes one needed). Holds _lock."""
    if entry.handles > 0 or entry.in_calls > 0 or entry.escaped:
        return None
    if entry.passed:
        if not entry.checking:
            entry.checking = True
            _to_check.append((actor_id, entry))
            _start_watcher()
        return None
    del _owned[actor_id]
    return entry.class_name


class passes:
    """``with passes() as ids:`` pickling in the block counts each handle
    of an actor this process owns into ``ids`` (a call's arguments) rather
    than as passed on for good."""

    def __enter__(self):
        self.ids = []
        _passing.ids = self.ids
        return self.ids

    def __exit__(self, *exc):
        _passing.ids = None


def pickled(actor_id, tracked):
    """A handle of ``actor_id`` is being pickled here."""
    actor_id = str(actor_id)
    ids = getattr(_passing, "ids", None)
    with _lock:
        entry = _owned.get(actor_id)
        if entry is not None:
            if ids is not None:
                ids.append(actor_id)
            else:
                entry.escaped = True
            return
        if not tracked or actor_id in _flagged:
            return
        _flagged.add(actor_id)
    # Passed on by a process that does not own it: anyone may hold it now.
    _shoal.kv_put(_kept_key(actor_id), b"1", True)


def track(ref, ids):
    """The call whose result is ``ref`` was passed handles of ``ids``
    (passes()): they count as held until it ends."""
    if not ids or ref is None:
        return
    with _lock:
        kept = []
        for actor_id in ids:
            entry = _owned.get(actor_id)
            if entry is not None:
                entry.in_calls += 1
                entry.passed = True
                kept.append(actor_id)
        if kept:
            _calls.append([ref, kept])
            _start_watcher()


def note_kept():
    """A worker's call ended: any tracked handle this process still holds
    is kept past it. Says so before the call is answered."""
    if not _held:
        return
    with _lock:
        new = [a for a in _held if a not in _flagged]
        _flagged.update(new)
    for actor_id in new:
        _shoal.kv_put(_kept_key(actor_id), b"1", True)


def forget():
    """shutdown(): the session's handles and calls mean nothing now."""
    with _lock:
        _owned.clear()
        _held.clear()
        _flagged.clear()
        _calls.clear()
        _to_check.clear()


def _end(actor_id, class_name):
    try:
        if not _shoal.is_initialized():
            return
        from shoal._remote import encode_call
        _shoal.submit_actor_task(actor_id, f"{class_name}.__ray_terminate__",
                                 encode_call((), {}))
    except Exception:  # noqa: BLE001 - the actor then ends with its job
        pass


def _start_watcher():
    """Holds _lock."""
    global _watcher
    if _watcher is None:
        _watcher = threading.Thread(target=_watch, name="shoal-handles",
                                    daemon=True)
        _watcher.start()
    _lock.notify_all()


def _watch():
    while True:
        with _lock:
            while not _calls and not _to_check:
                _lock.wait()
            checks = list(_to_check)
            _to_check.clear()
            calls = _calls[:_POLL_WINDOW]
        for actor_id, entry in checks:
            _check(actor_id, entry)
        if calls:
            _poll(calls)
            time.sleep(0.05)


def _poll(calls):
    """Ends the passes of the calls among ``calls`` that ended."""
    try:
        if not _shoal.is_initialized():
            raise RuntimeError("not connected")
        # A zero timeout: only asks; a worker lends no CPU for it.
        done = [calls[i] for i in
                _shoal.wait([c[0] for c in calls], len(calls), 0, False)]
    except Exception:  # noqa: BLE001 - left the cluster: forget them
        with _lock:
            _forget_calls(calls)
        return
    ends = []
    with _lock:
        _forget_calls(done)
        for call in done:
            for actor_id in call[1]:
                entry = _owned.get(actor_id)
                if entry is None:
                    continue
                entry.in_calls -= 1
                end = _decide(actor_id, entry)
                if end is not None:
                    ends.append((actor_id, end))
    for actor_id, class_name in ends:
        _end(actor_id, class_name)


def _forget_calls(calls):
    """Takes ``calls`` out of _calls, in one pass. Holds _lock."""
    if calls:
        gone = {id(c) for c in calls}
        _calls[:] = [c for c in _calls if id(c) not in gone]


def _check(actor_id, entry):
    """``actor_id``'s last handle here went after it was passed to calls,
    which all ended: it ends unless one of them kept it."""
    try:
        kept = _shoal.kv_get(_kept_key(actor_id)) is not None
    except Exception:  # noqa: BLE001 - left the cluster
        kept = True
    with _lock:
        entry.checking = False
        if _owned.get(actor_id) is not entry:
            return
        if kept:
            entry.escaped = True  # it ends with its job
            return
        entry.passed = False  # nothing passed is out there now
        end = _decide(actor_id, entry)
    if end is not None:
        _end(actor_id, end)
