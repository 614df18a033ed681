"""The driver's error stream: the failures of its job that nobody may be
waiting for.

The driver owns its tasks, so their outcomes reach the head's task table
(the task events every owner reports). ``ErrorStream`` follows that table
for the driver's job: every task that ended FAILED since it last looked
becomes at most one message, as a dict with Ray's keys (``type``,
``error_message``, ``job_id``, ``timestamp``) and Ray's type names:

    task          a task or actor method raised, or an actor's constructor
                  did (once per actor)
    worker_died   the worker running a task, or an actor's process, died
                  unexpectedly (once per worker or actor; an actor that was
                  killed or exited on purpose is not an error)
    infeasible_task  no node can ever hold what a task or an actor asks
                  for (once per task or actor, when its calls fail: Shoal
                  fails it after a grace period for a node to join, where
                  Ray warns while it waits)

The driver publishes warnings of its own there too (``pickling_large_object``
for a function or class that pickles to more than 10 MB), and the native
runtime's (``excess_queueing_warning``: more than 5,000 calls, then 10,000
and so on, outstanding to one actor), which it logged as they came.

Subscribers (``shoal.test_utils.init_error_pubsub``) read the messages
published after they subscribed. The driver itself prints a line for each
``worker_died`` message, and the "Unhandled error" line for a failed task
whose ObjectRef was dropped without get() ever being called on it (the
native module keeps that account for the results of the user's .remote()
calls, not the runtime's own, and hands over the ids dropped unread;
SHOAL_IGNORE_UNHANDLED_ERRORS=1 turns the line off).

Memory is bounded: the stream remembers the last ``_REMEMBER`` task ids it
saw and the last ``_REMEMBER`` dropped or failed refs; a subscriber keeps
at most ``_REMEMBER`` unread messages (the oldest go first).
"""

import collections
import os
import re
import sys
import threading
import time
import weakref

from shoal import _shoal

TASK_PUSH_ERROR = "task"
WORKER_DIED_PUSH_ERROR = "worker_died"
INFEASIBLE_TASK_ERROR = "infeasible_task"

_POLL_S = 0.5  # how often the driver looks at the head's task table
_REMEMBER = 10000
_LIST_LIMIT = 1000

_WORKER_DIED_TEXT = (
    "A worker died or was killed while executing a task by an unexpected "
    "system error. To troubleshoot the problem, check the logs for the dead "
    "worker (`shoal logs worker ID`, or the session folder's "
    "logs/worker-*.log). ")


class ErrorMessage(dict):
    """One error of the stream: a dict with Ray's keys, also readable as
    attributes (``message.error_message``)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class Subscriber:
    """The messages published since it subscribed, in order, bounded."""

    def __init__(self, stream):
        self._stream = stream
        self._messages = collections.deque(maxlen=_REMEMBER)
        self._ready = threading.Condition()

    def _publish(self, message):
        with self._ready:
            self._messages.append(message)
            self._ready.notify_all()

    def get(self, num, error_type=None, timeout=20):
        """Up to ``num`` messages (of ``error_type`` when given; others are
        passed over), waiting up to ``timeout`` seconds for them."""
        deadline = time.monotonic() + timeout
        found = []
        while len(found) < num:
            with self._ready:
                while self._messages and len(found) < num:
                    message = self._messages.popleft()
                    if error_type is None or message["type"] == error_type:
                        found.append(message)
                if len(found) >= num:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._ready.wait(min(left, _POLL_S))
            self._stream.poll()
        return found

    def close(self):
        self._stream.unsubscribe(self)


class ErrorStream:
    """Follows the head's task table for one job (see the module's text).
    Thread-safe; ``start`` runs it on a daemon thread of its own."""

    def __init__(self, job_id):
        self._job_id = job_id
        self._lock = threading.RLock()
        self._poll_lock = threading.Lock()
        self._seen = collections.OrderedDict()  # task ids looked at
        self._reported = collections.OrderedDict()  # workers, actors
        self._subscribers = weakref.WeakSet()
        # Results dropped unread whose task has not (yet) been seen failing,
        # and failed results not (yet) seen dropped unread.
        self._dropped_unread = collections.OrderedDict()
        self._failed_unread = collections.OrderedDict()
        self._stop = threading.Event()
        self._thread = None

    # ---- subscribers ----

    def subscribe(self):
        self.poll()  # what failed before now is not theirs
        subscriber = Subscriber(self)
        with self._lock:
            self._subscribers.add(subscriber)
        return subscriber

    def unsubscribe(self, subscriber):
        with self._lock:
            self._subscribers.discard(subscriber)

    # ---- refs nobody reads ----

    def _take_dropped(self):
        """Takes the results dropped unread since the last look; prints the
        line for those whose task was already seen failing."""
        unhandled = []
        with self._lock:
            for ref_id in _shoal.take_unread_dropped():
                message = self._failed_unread.pop(ref_id, None)
                if message is None:
                    _remember(self._dropped_unread, ref_id, True)
                else:
                    unhandled.append(message)
        for message in unhandled:
            _print_unhandled(message)

    # ---- following the head ----

    def start(self):
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="shoal-error-stream")
        self._thread.start()

    def stop(self):
        """Stops following; one last look first, so that what failed just
        before shutdown is still reported."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.poll()

    def _run(self):
        while not self._stop.wait(_POLL_S):
            self.poll()

    def poll(self):
        """Reads the failures of the job the head has and publishes the new
        ones. Never raises: a head that cannot answer is asked again."""
        if not self._poll_lock.acquire(blocking=False):
            return  # another thread is looking right now
        try:
            try:
                failed = _shoal.list_tasks(
                    [f"job_id={self._job_id}", "state=FAILED"], _LIST_LIMIT)
            except Exception:  # noqa: BLE001 - shut down, or head away
                return
            self._take_dropped()
            for error_type, text in _shoal.take_warnings():
                self.publish(error_type, text)  # the runtime logged it
            failed.sort(key=lambda t: t["time_ms"])
            for task in failed:
                self._take(task)
        finally:
            self._poll_lock.release()

    def _take(self, task):
        key = (task["task_id"], task["attempt"])
        with self._lock:
            if key in self._seen:
                return
            _remember(self._seen, key, True)
        message = self._message(task)
        unhandled = None
        with self._lock:
            ref_id = task["task_id"]
            if self._dropped_unread.pop(ref_id, None):
                unhandled = task["error"]
            else:  # read later, or dropped unread later
                _remember(self._failed_unread, ref_id, task["error"])
            subscribers = list(self._subscribers)
        if unhandled is not None:
            _print_unhandled(unhandled)
        if message is None:
            return
        if message["type"] == WORKER_DIED_PUSH_ERROR:
            print(f"(shoal) {message['error_message']}", file=sys.stderr,
                  flush=True)
        for subscriber in subscribers:
            subscriber._publish(message)

    def publish(self, error_type, text):
        """Publishes a message the driver itself made (a warning)."""
        message = ErrorMessage(type=error_type, error_message=text,
                               job_id=self._job_id, timestamp=time.time())
        with self._lock:
            subscribers = list(self._subscribers)
        for subscriber in subscribers:
            subscriber._publish(message)

    def _message(self, task):
        """The message a failed task makes, or None (already reported, or
        not an error: an actor killed on purpose)."""
        error, kind = task["error"], task["error_type"]
        if kind == "TASK_EXECUTION_EXCEPTION":
            return self._new(TASK_PUSH_ERROR, error, task)
        if kind == "WORKER_DIED":
            who = task["worker_id"] or task["task_id"]
            if not self._first(("worker", who)):
                return None
            return self._new(WORKER_DIED_PUSH_ERROR,
                             _WORKER_DIED_TEXT + error, task)
        if kind == "INFEASIBLE":
            if not self._first(("infeasible",
                                task["actor_id"] or task["task_id"])):
                return None
            return self._new(INFEASIBLE_TASK_ERROR, error, task)
        if kind == "ACTOR_DIED":
            actor = task["actor_id"]
            if "the constructor raised" in error:
                if self._first(("actor", actor)):
                    return self._new(TASK_PUSH_ERROR, error, task)
            elif "its process died" in error or "its node died" in error:
                if self._first(("actor", actor)):
                    return self._new(WORKER_DIED_PUSH_ERROR,
                                     _WORKER_DIED_TEXT + error, task)
        return None

    def _first(self, who):
        with self._lock:
            if who in self._reported:
                return False
            _remember(self._reported, who, True)
            return True

    def _new(self, error_type, text, task):
        return ErrorMessage(type=error_type, error_message=readable(text),
                            job_id=self._job_id,
                            timestamp=task["time_ms"] / 1000.0)


def _remember(table, key, value):
    table[key] = value
    while len(table) > _REMEMBER:
        table.popitem(last=False)


_FUNCTION_KEY = re.compile(r"pyfn/[^/\s]+/[0-9a-f]+/(\S+)/(\S+)")


def readable(text):
    """``text`` with each function key (pyfn/<job>/<digest>/<module>/
    <qualname>) written as module.qualname."""
    return _FUNCTION_KEY.sub(r"\1.\2", text)


def _print_unhandled(text):
    if os.environ.get("SHOAL_IGNORE_UNHANDLED_ERRORS", "").lower() in (
            "1", "true", "yes"):
        return
    print("Unhandled error (suppress with "
          f"'SHOAL_IGNORE_UNHANDLED_ERRORS=1'): {readable(text).rstrip()}",
          file=sys.stderr, flush=True)


_stream = None


def start(job_id):
    """Starts the driver's error stream (init() calls it)."""
    global _stream
    stop()
    _stream = ErrorStream(job_id)
    _shoal.watch_unread_results(True)
    _stream.start()


def stop():
    """Stops it (shutdown() calls it first)."""
    global _stream
    if _stream is not None:
        _stream.stop()
        _shoal.watch_unread_results(False)
        _stream = None


def stream():
    """The driver's error stream; ShoalError when it has none (not joined,
    or a worker)."""
    if _stream is None:
        raise _shoal.ShoalError(
            "this process has no error stream: call shoal.init() in a "
            "driver first (workers have none)")
    return _stream


def publish(error_type, text):
    """Publishes a message of the driver's own on its error stream (none in
    a worker)."""
    if _stream is not None:
        _stream.publish(error_type, text)

