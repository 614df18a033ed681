"""The errors shoal raises, with Ray's names beside Shoal's own.

    ShoalError                  every error below derives from it
    TaskError (RayTaskError)    a remote function or actor method raised;
                                also an instance of the exception it raised
    WorkerDiedError (WorkerCrashedError)
                                the worker running a task died on every try
    ActorDiedError (RayActorError)
                                the actor is dead: killed, crashed with no
                                restart left, or never placed
    InfeasibleError             no node can ever hold the request
    GetTimeoutError             get() ran out of time
    ObjectLostError             every copy of an object was lost
"""

import logging
import pickle
import sys

from shoal._shoal import (ActorDiedError, GetTimeoutError, InfeasibleError,
                          ObjectLostError, ShoalError, WorkerDiedError)

__all__ = [
    "ActorDiedError",
    "GetTimeoutError",
    "InfeasibleError",
    "ObjectLostError",
    "RayActorError",
    "RayError",
    "RayTaskError",
    "ShoalError",
    "TaskError",
    "WorkerCrashedError",
    "WorkerDiedError",
]


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
        return (TaskError, (self.function_name, self.traceback_str,
                            self.cause, self.cause_type, self.node_id))

    def as_instanceof_cause(self):
        """This error as an instance of both TaskError and the cause's
        class, when that class allows it; else itself."""
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
            cls = type(f"TaskError({cause_cls.__name__})",
                       (TaskError, cause_cls),
                       {"__init__": __init__, "__getattr__": __getattr__,
                        "__str__": lambda self: error._message(),
                        "__reduce__": lambda self: error.__reduce__(),
                        "__module__": cause_cls.__module__})
            made = cls.__new__(cls)
        except TypeError:  # a final class, or a base whose layout conflicts
            logging.getLogger(__name__).warning(
                "User exception type %s in TaskError can't be subclassed! "
                "This exception is raised as RayTaskError only. You can use "
                "`ray_task_error.cause` to access the user exception. "
                "Failure in subclassing: %s", cause_cls, sys.exc_info()[1])
            return self
        made.__dict__.update(self.__dict__)
        made.args = (self._message(),)
        return made


def error_data(exc, traceback_str):
    """What a worker sends back for ``exc``: the exception itself when it
    pickles, and always its type's name and the traceback."""
    info = {"type": type(exc).__name__, "traceback": traceback_str}
    try:
        from shoal._serialization import pickle_by_value
        info["exception"] = pickle_by_value(exc)
    except Exception:  # noqa: BLE001 - an exception that will not pickle
        pass
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
    if "exception" in info:
        try:
            cause = pickle.loads(info["exception"])
        except Exception:  # noqa: BLE001 - its class is not importable here
            cause = None
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


# Ray's names.
RayError = ShoalError
RayTaskError = TaskError
WorkerCrashedError = WorkerDiedError
RayActorError = ActorDiedError
