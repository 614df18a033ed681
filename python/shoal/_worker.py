"""The Python worker: what ``python -m shoal.worker`` runs.

The node agent starts it for a job (with the devices of its lease in
TPU_VISIBLE_CHIPS, CUDA_VISIBLE_DEVICES and the bounds variables); it
registers with the agent through the C++ worker loop (_shoal.run_worker)
and runs each task, actor and method that loop hands to Runtime, with the
GIL taken for the call. Functions and classes are fetched from the head's
key-value store once per worker.
"""

import os
import pickle
import sys
import traceback

from shoal import _output, _shoal
from shoal._remote import __file__ as _remote_file
from shoal._remote import decode_call
from shoal._serialization import dumps
from shoal.exceptions import error_data


# Frames of these files are the worker's, not the user's: left out of
# tracebacks.
_OWN_FILES = {__file__, _remote_file}


class Runtime:
    """Called by _shoal's worker loop; each method returns ("ok", ...) or
    ("error", text, type name, data) and never raises."""

    def __init__(self):
        self._functions = {}

    def _load(self, key):
        fn = self._functions.get(key)
        if fn is None:
            import shoal
            shoal._require_init()
            blob = _shoal.kv_get(key)
            if blob is None:
                raise LookupError(
                    f"{key} is not in the head's key-value store (was the "
                    "head restarted since the driver stored it?)")
            fn = pickle.loads(blob)
            self._functions[key] = fn
        return fn

    def call(self, key, args):
        try:
            fn = self._load(key)
            call_args, kwargs = decode_call(args)
            result = fn(*call_args, **kwargs)
            pieces, size = dumps(result)
            return ("ok", pieces, size)
        except BaseException as e:  # noqa: BLE001 - reported to the caller
            return _failure(e)

    def construct(self, key, args):
        try:
            cls = self._load(key)
            _output.announce_actor(getattr(cls, "__name__", "Actor"))
            call_args, kwargs = decode_call(args)
            return ("ok", cls(*call_args, **kwargs))
        except BaseException as e:  # noqa: BLE001
            return _failure(e)

    def call_method(self, instance, method, args):
        try:
            call_args, kwargs = decode_call(args)
            # The method's name follows its class's ("Counter.incr").
            name = method.rsplit(".", 1)[-1]
            result = getattr(instance, name)(*call_args, **kwargs)
            pieces, size = dumps(result)
            return ("ok", pieces, size)
        except BaseException as e:  # noqa: BLE001
            return _failure(e)


def _failure(exc):
    if isinstance(exc, SystemExit):
        # exit() in a task ends its worker, as in Ray: the caller sees the
        # worker die (WorkerCrashedError, or the actor's death).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exc.code if isinstance(exc.code, int) else 1)
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in _OWN_FILES:
        tb = tb.tb_next  # the user's frames only
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    return ("error", text, type(exc).__name__, error_data(exc, text))


def main():
    # What tasks print goes to the worker's log (the session folder's
    # logs/worker-*.log) as it is printed: the process ends with _exit.
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)
    _output.announce_worker()
    sys.exit(_shoal.run_worker(Runtime()))
