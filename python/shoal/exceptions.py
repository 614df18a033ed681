"""The errors shoal raises, with Ray's names beside Shoal's own.

    ShoalError (RayError)       every error below derives from it
    TaskError (RayTaskError)    a remote function or actor method raised;
                                also an instance of the exception it raised
    WorkerDiedError             the worker running a task died on every try;
      WorkerCrashedError        what get() raises for it (Ray's name)
    RayActorError               the actor cannot run the call:
      ActorDiedError            it is dead: killed, exited, its process or
                                node died, or its constructor raised (the
                                message says which; ``actor_id`` names it)
      ActorUnavailableError     it is restarting or cannot be reached now
    InfeasibleError             no node can ever hold the request
    GetTimeoutError             get() ran out of time (also a TimeoutError)
    ObjectLostError             every copy of an object was lost and it
                                could not be rebuilt
      OwnerDiedError, ObjectFetchTimedOutError, ObjectReconstructionFailedError
    AsyncioActorExit            what exit_actor() raises in an async actor

Ray's other names are here for code that catches them; Shoal does not raise
them (it has no task cancellation, memory monitor or runtime_env):
TaskCancelledError, OutOfMemoryError, NodeDiedError, RuntimeEnvSetupError,
LocalRayletDiedError, ObjectStoreFullError, RaySystemError,
TaskUnschedulableError, ActorUnschedulableError.
"""

import logging
import pickle
import re
import sys

from shoal import _shoal
from shoal._shoal import GetTimeoutError, InfeasibleError, ShoalError

__all__ = [
    "ActorDiedError",
    "AsyncioActorExit",
    "ActorUnavailableError",
    "ActorUnschedulableError",
    "CrossLanguageError",
    "GetTimeoutError",
    "InfeasibleError",
    "LocalRayletDiedError",
    "NodeDiedError",
    "ObjectFetchTimedOutError",
    "ObjectLostError",
    "ObjectReconstructionFailedError",
    "ObjectStoreFullError",
    "OutOfMemoryError",
    "OwnerDiedError",
    "RayActorError",
    "RayError",
    "RaySystemError",
    "RayTaskError",
    "RuntimeEnvSetupError",
    "ShoalError",
    "TaskCancelledError",
    "TaskError",
    "TaskUnschedulableError",
    "WorkerCrashedError",
    "WorkerDiedError",
]

_log = logging.getLogger(__name__)

RayError = ShoalError
WorkerDiedError = _shoal.WorkerDiedError


class WorkerCrashedError(WorkerDiedError):
    """The worker running a task died (its process exited or was killed)
    on its last try. The message names the worker's pid, node and exit
    code; its log is the session folder's logs/worker-*.log."""


class RayActorError(ShoalError):
    """An actor could not run a call; ``actor_id`` names it (or is None)
    and ``error_msg`` says why."""

    def __init__(self, message="The actor died unexpectedly before "
                 "finishing this task.", actor_id=None):
        self.error_msg = message
        self.actor_id = actor_id
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (self.error_msg, self.actor_id))


class ActorDiedError(RayActorError, _shoal.ActorDiedError):
    """The actor is dead and every call to it fails: it was killed
    (``kill``), exited, its process or node died with no restart left, or
    its constructor raised (then the message holds the remote traceback).
    Also Shoal's native ActorDiedError."""

    @property
    def preempted(self):
        return False


class ActorUnavailableError(RayActorError):
    """The actor cannot take calls now (restarting, or unreachable); a
    later call may succeed."""


class ObjectLostError(_shoal.ObjectLostError):
    """Every copy of an object was lost and it could not be rebuilt from
    the task that made it (a put object, or its retries are used up)."""

    def __init__(self, message="", object_ref_hex=""):
        self.object_ref_hex = object_ref_hex
        super().__init__(message)


class OwnerDiedError(ObjectLostError):
    """The process that owned the object (made or put it) died."""


class ObjectFetchTimedOutError(ObjectLostError):
    """Fetching the object from the nodes that hold it took too long."""


class ObjectReconstructionFailedError(ObjectLostError):
    """The object was lost and running its task again failed."""


class TaskCancelledError(_shoal.TaskCancelledError):
    """The task was cancelled (``cancel()``) before it finished. Also
    Shoal's native TaskCancelledError."""


class OutOfMemoryError(ShoalError):
    """The worker was killed because its node ran out of memory."""


class NodeDiedError(ShoalError):
    """The node running the task died."""


class RuntimeEnvSetupError(ShoalError):
    """The task's or actor's runtime environment could not be set up."""


class LocalRayletDiedError(ShoalError):
    """This process's node agent died."""


class ObjectStoreFullError(ShoalError):
    """The object store is full even after spilling."""


class RaySystemError(ShoalError):
    """The runtime itself failed."""


class CrossLanguageError(ShoalError):
    """A call between Python and C++ failed."""


class TaskUnschedulableError(InfeasibleError):
    """No node can ever run the task."""


class ActorUnschedulableError(InfeasibleError):
    """No node can ever hold the actor."""


_ACTOR_ID = re.compile(r"\bactor ([0-9a-f]{8,})")
# "call Counter.incr (3fa2b1c4d5e6-7) failed: ...", "task f (...) failed".
_FAILED_TASK = re.compile(r"^(?:call|task) \S+ \(([0-9a-f]+-[0-9]+)\) failed")


def from_native(error, asked=()):
    """The error to raise for ``error``, one _shoal raised while getting
    the refs whose ids are ``asked``: Ray's class for it (still an instance
    of the native class), with the same text. When the task that failed is
    not one of those (it made an argument of theirs), a TaskError that is
    also an instance of that error, as Ray raises for a failed dependency."""
    ray_error = _ray_class(error)
    failed = _FAILED_TASK.match(str(error))
    if failed is None or failed.group(1) in asked or isinstance(
            ray_error, GetTimeoutError):
        return ray_error
    return TaskError(f"a task that takes the result of {failed.group(1)}",
                     str(error), ray_error,
                     type(ray_error).__name__).as_instanceof_cause()


def _ray_class(error):
    message = str(error)
    if isinstance(error, _shoal.ActorDiedError) and not isinstance(
            error, RayActorError):
        found = _ACTOR_ID.search(message)
        return ActorDiedError(message, found.group(1) if found else None)
    if isinstance(error, WorkerDiedError) and not isinstance(
            error, WorkerCrashedError):
        return WorkerCrashedError(message)
    if isinstance(error, _shoal.ObjectLostError) and not isinstance(
            error, ObjectLostError):
        return ObjectLostError(message)
    if isinstance(error, _shoal.TaskCancelledError) and not isinstance(
            error, TaskCancelledError):
        return TaskCancelledError(message)
    return error


class AsyncioActorExit(ShoalError):
    """Raised by ``shoal.actor.exit_actor()`` in an async actor's method:
    it unwinds the coroutine, and the actor ends once the call returns
    (catching it does not keep the actor alive)."""


class TaskError(ShoalError):
    """A remote function or actor method raised ``cause``.

    ``shoal.get`` raises it as an instance of the cause's own type too
    (``except ValueError`` catches a remote ValueError), as Ray's
    RayTaskError does. ``str()`` of it shows the remote traceback.
    """

    def __init__(self, function_name, traceback_str, cause=None,
                 cause_type="", node_id=""):
        self.function_name = function_name
        self.traceback_str = traceback_str
        self.cause = cause
        self.cause_type = cause_type
        self.node_id = node_id
        super().__init__(self._message())

    def _message(self):
        where = f" on node {self.node_id}" if self.node_id else ""
        return (f"{self.cause_type or 'an exception'} in {self.function_name}"
                f"{where}:\n{self.traceback_str.rstrip()}")

    def __str__(self):
        return self._message()

    def __reduce__(self):
        # Unpickled as an instance of the cause's class again.
        return (_rebuild_task_error, (self.function_name, self.traceback_str,
                                      self.cause, self.cause_type,
                                      self.node_id))

    def as_instanceof_cause(self):
        """This error as an instance of both TaskError and the cause's
        class, when that class allows it; else itself. A cause that is
        itself a TaskError (a task that did not catch the error of a task
        it waited for) counts as its own cause: ``except ValueError``
        catches a ValueError raised any number of tasks deep."""
        while isinstance(self.cause, TaskError):
            self.cause_type = self.cause.cause_type or self.cause_type
            self.cause = self.cause.cause
        cause = self.cause
        # A task that failed because a task it called failed: the user's
        # exception from the bottom of the chain, so that `except
        # ZeroDivisionError` catches it however deep it was raised.
        while isinstance(cause, TaskError) and cause.cause is not None:
            cause = cause.cause
        if not isinstance(cause, Exception) or isinstance(cause, TaskError):
            return self
        cause_cls = type(cause)
        error = self

        def __init__(self, *args):  # the instance is made below, not here
            pass

        def __getattr__(self, name):
            return getattr(cause, name)

        try:
            # Named as Ray names it (RayTaskError is this class's Ray name),
            # which is what repr() and tracebacks show.
            cls = type(f"RayTaskError({cause_cls.__name__})",
                       (TaskError, cause_cls),
                       {"__init__": __init__, "__getattr__": __getattr__,
                        "__str__": lambda self: error._message(),
                        "__reduce__": lambda self: error.__reduce__(),
                        "__module__": cause_cls.__module__})
            made = cls.__new__(cls)
        except TypeError as e:  # a final class, or a conflicting layout
            _log.warning(
                "User exception type %s in RayTaskError can't be subclassed! "
                "This exception is raised as RayTaskError only. You can use "
                "`ray_task_error.cause` to access the user exception. "
                "Failure in subclassing: %s", cause_cls, e)
            return self
        made.__dict__.update(self.__dict__)
        made.args = (self._message(),)
        return made


TaskError.make_dual_exception_instance = TaskError.as_instanceof_cause


def _rebuild_task_error(function_name, traceback_str, cause, cause_type,
                        node_id):
    return TaskError(function_name, traceback_str, cause, cause_type,
                     node_id).as_instanceof_cause()


def error_data(exc, traceback_str):
    """What a worker sends back for ``exc``: the exception itself when it
    pickles, and always its type's name and the traceback."""
    info = {"type": type(exc).__name__, "traceback": traceback_str}
    try:
        from shoal._serialization import pickle_by_value
        info["exception"] = pickle_by_value(exc)
    except Exception as e:  # noqa: BLE001 - an exception that will not pickle
        info["not_pickled"] = f"{type(e).__name__}: {e}"
    return pickle.dumps(info, protocol=5)


def task_error(function_name, node_id, message, data):
    """The TaskError for a remote failure that _shoal reported."""
    info = {}
    if data:
        try:
            info = pickle.loads(data)
        except Exception:  # noqa: BLE001 - sent by a worker of another build
            info = {}
    cause = None
    why = info.get("not_pickled")
    if "exception" in info:
        try:
            cause = pickle.loads(info["exception"])
        except Exception as e:  # noqa: BLE001 - its class is not importable
            why = f"{type(e).__name__}: {e}"
    if cause is None and why:
        cause = RaySystemError(
            f"The original cause of the RayTaskError "
            f"({info.get('type', 'an exception')}) isn't serializable: {why}. "
            "Overwriting the cause to a RayError.")
    error = TaskError(_readable(function_name),
                      info.get("traceback", message), cause,
                      info.get("type", ""), node_id)
    return error.as_instanceof_cause()


def _readable(function_key):
    """A function's name from its key
    (pyfn/<job>/<digest>/<module>/<qualname>): module.qualname."""
    if not function_key.startswith("pyfn/"):
        return function_key
    return ".".join(function_key.split("/")[3:])


RayTaskError = TaskError
