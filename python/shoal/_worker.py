"""The Python worker: what ``python -m shoal.worker`` runs.

The node agent starts it for a job (with the devices of its lease in
TPU_VISIBLE_CHIPS, CUDA_VISIBLE_DEVICES and the bounds variables); it
registers with the agent through the C++ worker loop (_shoal.run_worker)
and runs each task, actor and method that loop hands to Runtime, with the
GIL taken for the call. Functions and classes are fetched from the head's
key-value store once per worker.
"""

import contextlib
import io
import os
import pickle
import shutil
import sys
import tempfile
import traceback
import zipfile

from shoal import _remote, _shoal
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
        settings = {}
        try:
            fn = self._load(key)
            call_args, kwargs, settings = decode_call(args, True)
            with _environment(settings):
                result = _run_retrying(fn, call_args, kwargs,
                                       settings.get("retry"))
            pieces, size = dumps(result)
            return ("ok", pieces, size)
        except BaseException as e:  # noqa: BLE001 - reported to the caller
            return _failure(e)

    def construct(self, key, args):
        try:
            cls = self._load(key)
            call_args, kwargs, settings = decode_call(args, True)
            _apply(settings)  # the actor's process keeps its runtime_env
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


def _run_retrying(fn, args, kwargs, retry):
    """fn(*args, **kwargs), run again when it raises one of the exceptions
    of ``retry`` ((True or exception types, max retries; -1: no limit)),
    as Ray's retry_exceptions does."""
    if not retry:
        return fn(*args, **kwargs)
    types, retries = retry
    if types is True:
        types = (Exception,)
    attempt = 0
    while True:
        try:
            return fn(*args, **kwargs)
        except types:
            if 0 <= retries <= attempt:
                raise
            attempt += 1


_unpacked = {}  # KV key -> folder it was unpacked into


def _unpack(key):
    """The folder holding the package stored under ``key`` (a zipped
    working_dir or py_modules folder), unpacked once per worker into the
    node's session folder, which the node's workers share and which goes
    with the session."""
    folder = _unpacked.get(key)
    if folder is not None:
        return folder
    _, _job, digest, name = key.split("/", 3)
    session = os.environ.get("SHOAL_SESSION_DIR") or os.path.join(
        tempfile.gettempdir(), f"shoal-runtime-env-{os.getuid()}")
    root = os.path.join(session, "runtime_env", digest)
    folder = os.path.join(root, name)
    if not os.path.isdir(folder):
        blob = _shoal.kv_get(key)
        if blob is None:
            raise LookupError(f"{key} is not in the head's key-value store "
                              "(was the head restarted since the driver "
                              "stored it?)")
        os.makedirs(root, exist_ok=True)
        staging = tempfile.mkdtemp(dir=root)
        with zipfile.ZipFile(io.BytesIO(blob)) as z:
            z.extractall(staging)
        try:
            os.rename(staging, folder)
        except OSError:  # another worker unpacked it first
            shutil.rmtree(staging, ignore_errors=True)
    _unpacked[key] = folder
    return folder


def _apply(settings):
    """Sets up a call's runtime_env: its environment variables, its
    working_dir (the working folder, and first on sys.path) and its
    py_modules (importable); OMP_NUM_THREADS is the task's CPUs unless the
    call's env_vars or this node's environment set it. Returns what undoes
    it."""
    env = dict(settings.get("env") or {})
    omp = settings.get("omp")
    if omp and "OMP_NUM_THREADS" not in env and (
            "OMP_NUM_THREADS" not in os.environ):
        env["OMP_NUM_THREADS"] = omp
    saved_env = {k: os.environ.get(k) for k in env}
    saved_cwd = os.getcwd()
    saved_path = list(sys.path)
    saved_inherited = _remote.inherited_env
    # What the tasks and actors this call starts inherit.
    _remote.inherited_env = {k: settings[k] for k in (
        "env", "working_dir", "py_modules") if k in settings}

    def undo():
        _remote.inherited_env = saved_inherited
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if os.getcwd() != saved_cwd:
            os.chdir(saved_cwd)
        sys.path[:] = saved_path

    try:
        os.environ.update(env)
        working_dir = settings.get("working_dir")
        if working_dir:
            folder = _unpack(working_dir)
            os.chdir(folder)
            sys.path.insert(0, folder)
        for key in settings.get("py_modules") or []:
            sys.path.insert(0, os.path.dirname(_unpack(key)))
    except BaseException:
        undo()
        raise
    return undo


@contextlib.contextmanager
def _environment(settings):
    """Runs a task's call with its runtime_env (_apply), put back after."""
    undo = _apply(settings)
    try:
        yield
    finally:
        undo()


def _failure(exc):
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
    sys.exit(_shoal.run_worker(Runtime()))
