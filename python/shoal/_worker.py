"""The Python worker: what ``python -m shoal.worker`` runs.

The node agent starts it for a job (with the devices of its lease in
TPU_VISIBLE_CHIPS, CUDA_VISIBLE_DEVICES and the bounds variables); it
registers with the agent through the C++ worker loop (_shoal.run_worker)
and runs each task, actor and method that loop hands to Runtime, with the
GIL taken for the call. Functions and classes are fetched from the head's
key-value store once per worker.
"""

import asyncio
import atexit
import contextvars
import inspect
import io
import os
import pickle
import shutil
import sys
import threading
import time
import tempfile
import traceback
import zipfile

from shoal import _handles, _output, _remote, _shoal
from shoal._remote import __file__ as _remote_file
from shoal._remote import decode_call, is_async_class
from shoal._serialization import dumps_result
from shoal.exceptions import error_data


# Frames of these files are the worker's, not the user's: left out of
# tracebacks.
_OWN_FILES = {__file__, _remote_file}


_runtime = None

# Ray's process titles, which `ps` shows and setproctitle.getproctitle()
# reads in a task: "ray::IDLE", "ray::<task>" while it runs, "ray::<Class>"
# for an actor ("ray::<Class>.<method>" in a call). Through the
# setproctitle module where there is one, as Ray's, so that both agree;
# else Shoal's own. Either writes over the command line only, so a title is
# cut to its length: /proc/<pid>/environ must stay whole, for it is how
# the node agent and the worker find what a worker started (its
# SHOAL_WORKER_ID) to end it with the worker (_first_title).
try:
    from setproctitle import setproctitle as _set_title
except ImportError:
    _set_title = _shoal.set_process_title
_IDLE_TITLE = "ray::IDLE"


def _first_title():
    """Sets the idle title, the first, with setproctitle told to leave
    the environment's memory alone (SPT_NOENV, read once, then unset so
    that tasks do not inherit it)."""
    had = "SPT_NOENV" in os.environ
    os.environ["SPT_NOENV"] = "1"
    try:
        _set_title(_IDLE_TITLE)
    finally:
        if not had:
            del os.environ["SPT_NOENV"]

# The resources the call running in this thread holds (a task's).
_call = threading.local()
# An async actor's call: what current_task() says in its coroutine (which
# runs on the actor's loop thread, not on the call's).
_task_in_coroutine = contextvars.ContextVar("shoal_task", default=None)


def current_task():
    """(task id, task name, function name) of the task or actor call that
    runs on this thread (or in this coroutine); None where none runs."""
    task = getattr(_call, "task", None)
    return task if task is not None else _task_in_coroutine.get()


def _function_name(fn, owner=None):
    """Ray's name of a task's function: "module.function", and
    "module.Class.method" for an actor's method."""
    module = getattr(fn, "__module__", None) or "__main__"
    name = getattr(fn, "__name__", type(fn).__name__)
    if owner is not None:
        return f"{module}.{owner.__name__}.{name}"
    return f"{module}.{name}"


def current_runtime():
    """This worker's Runtime, or None outside a worker (a driver)."""
    return _runtime


def current_placement():
    """(group id, bundles, name, capture) of the placement group the task
    that runs on this thread, or this worker's actor, runs in; None where
    none (a driver, or a call outside any group)."""
    placement = getattr(_call, "placement", None)
    if placement is None and _runtime is not None:
        placement = _runtime.actor_placement
    return placement


def held_resources():
    """The resources the running task, or this worker's actor, holds, as
    agents name them ({"CPU": 1.0}, {"CPU_group_<pg>": 1.0, ...}); None
    outside a worker."""
    held = getattr(_call, "resources", None)
    if held is None and _runtime is not None:
        held = _runtime.actor_resources
    return held


class Runtime:
    """Called by _shoal's worker loop; each method returns ("ok", ...),
    ("error", text, type name, data) or, for a call after which the actor
    ends, ("exit", text), and never raises.

    An async actor (see shoal._remote.is_async_class) is made and runs its
    coroutine methods on one asyncio event loop, in a thread of its own;
    each call waits for its coroutine on the thread the C++ actor host gave
    it (without the GIL), so up to max_concurrency run at once. Its plain
    methods run on the loop too, as Ray runs them.
    """

    def __init__(self):
        global _runtime
        self._functions = {}
        self._instance = None
        self._holds_actor = False
        self._async = False
        self._loop = None
        self._constructing = False
        # Calls running now; exit waits for them (see request_exit).
        self._in_flight = 0
        self._idle = threading.Condition()
        self._exit_requested = False
        # __ray_terminate__ came: calls after it answer that the actor
        # exited; those running finish first, with their own results.
        self._terminating = False
        self._exit_hooks_run = False
        self._calls = {}  # function key -> calls of it (max_calls)
        self._title = _IDLE_TITLE  # the process's between calls
        self.actor_resources = None  # what the actor holds, once made
        self.actor_placement = None  # its group (current_placement)
        _runtime = self

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

    # Each entry point says, once the call's frames are gone and before it
    # is answered, which actor handles it was passed this process keeps
    # (_handles.note_kept): the actor's owner reads that after the answer.

    def call(self, key, args):
        outcome = self._call(key, args)
        _handles.note_kept()
        return outcome

    def construct(self, key, args):
        outcome = self._construct(key, args)
        _handles.note_kept()
        return outcome

    def call_method(self, instance, method, args):
        outcome = self._call_method(instance, method, args)
        _handles.note_kept()
        return outcome

    def _call(self, key, args):
        settings = {}
        try:
            fn = self._load(key)
            call_args, kwargs, settings = decode_call(args, True)
            _call.resources = settings.get("resources")
            _call.placement = settings.get("placement")
            name = settings.get("name") or getattr(fn, "__name__", key)
            _call.task = (_shoal.current_task_id(), name, _function_name(fn))
            undo = _apply(settings)
            _set_title(f"ray::{name}")
            try:
                result = _run_retrying(fn, call_args, kwargs,
                                       settings.get("retry"))
            finally:
                _set_title(_IDLE_TITLE)
                undo()
            # A worker that ends after this call cannot lend the refs in
            # its result (it would take them with it): they carry their
            # values instead.
            pieces, size = dumps_result(
                result, lend=not self._ends_after(key, settings))
            return ("ok", pieces, size, self._last_call(key, settings))
        except BaseException as e:  # noqa: BLE001 - reported to the caller
            return _failure(e)
        finally:
            _call.resources = None
            _call.placement = None
            _call.task = None

    def _ends_after(self, key, settings):
        """Whether this call, if it succeeds, is the function's last one
        here (its max_calls)."""
        limit = settings.get("max_calls")
        return bool(limit) and self._calls.get(key, 0) + 1 >= limit

    def _last_call(self, key, settings):
        """Whether this worker ends after this call: the function's
        max_calls successful calls have run here."""
        limit = settings.get("max_calls")
        if not limit:
            return False
        self._calls[key] = self._calls.get(key, 0) + 1
        return self._calls[key] >= limit

    # ---- Actors ----

    def holds_actor(self):
        return self._holds_actor

    def constructing(self):
        """Whether the actor's constructor runs now."""
        return self._constructing

    def is_async_actor(self):
        return self._async

    def _start_loop(self):
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run():
            asyncio.set_event_loop(self._loop)
            self._loop.call_soon(ready.set)
            self._loop.run_forever()

        threading.Thread(target=run, name="shoal-actor-loop",
                         daemon=True).start()
        ready.wait()

    def _on_loop(self, coroutine):
        """Runs ``coroutine`` on the actor's loop; waits for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _construct(self, key, args):
        try:
            cls = self._load(key)
            class_name = getattr(cls, "__name__", "Actor")
            _output.announce_actor(class_name)
            self._title = f"ray::{class_name}"
            _set_title(f"{self._title}.__init__")
            call_args, kwargs, settings = decode_call(args, True)
            _apply(settings)  # the actor's process keeps its runtime_env
            self.actor_resources = settings.get("resources")
            self.actor_placement = settings.get("placement")
            self._holds_actor = True
            self._async = is_async_class(cls)
            self._constructing = True
            if self._async:
                self._start_loop()

                async def make():
                    return cls(*call_args, **kwargs)

                self._instance = self._on_loop(make())
            else:
                self._instance = cls(*call_args, **kwargs)
            return ("ok", self._instance)
        except BaseException as e:  # noqa: BLE001
            if self._exit_requested:  # exit_actor() in __init__
                return ("ok", self._instance)
            self._holds_actor = False
            return _failure(e)
        finally:
            self._constructing = False
            _set_title(self._title if self._holds_actor else _IDLE_TITLE)

    def _call_method(self, instance, method, args):
        # The method's name follows its class's ("Counter.incr").
        name = _method_names.get(method)
        if name is None:
            name = _method_names[method] = method.rsplit(".", 1)[-1]
        with self._idle:
            if self._exit_requested or self._terminating:
                return ("exit", _EXITED)  # queued behind the exit
            self._in_flight += 1
        try:
            if name == "__ray_terminate__":
                return self._terminate()
            if name == "__ray_ready__":
                result = True
            else:
                call_args, kwargs, settings = decode_call(args, True)
                fn = _method(instance, name)
                task_name = (settings.get("name") or
                             f"{type(instance).__name__}.{name}")
                if self._async:
                    # Ray names an async actor's method by its qualname.
                    function = getattr(fn, "__func__", fn)
                    task = (_shoal.current_task_id(), task_name,
                            f"{function.__module__}.{function.__qualname__}")
                    result = self._on_loop(_on_loop_call(fn, call_args,
                                                         kwargs, task))
                else:
                    _call.task = (_shoal.current_task_id(), task_name,
                                  _function_name(fn, type(instance)))
                    _set_title(f"ray::{task_name}")
                    try:
                        result = fn(*call_args, **kwargs)
                    finally:
                        _set_title(self._title)
            if self._exit_requested:
                return self._exit_outcome(_EXITED)
            pieces, size = dumps_result(result)
            return ("ok", pieces, size)
        except BaseException as e:  # noqa: BLE001
            if self._exit_requested:
                return self._exit_outcome(_EXITED)
            return _failure(e)
        finally:
            _call.task = None
            with self._idle:
                self._in_flight -= 1
                if self._exit_requested or self._terminating:
                    self._idle.notify_all()  # an exit waits for the rest

    def _terminate(self):
        """``handle.__ray_terminate__``: the calls already running finish,
        then the actor ends."""
        with self._idle:
            self._terminating = True
            while self._in_flight > 1:  # this call is one
                self._idle.wait()
            self._exit_requested = True
        return self._exit_outcome("the actor was terminated by "
                                  "__ray_terminate__")

    def request_exit(self):
        """exit_actor(): the actor ends once the call that asked returns,
        or, asked from elsewhere (__init__, a coroutine it started), as
        soon as no call runs."""
        with self._idle:
            self._exit_requested = True
            in_call = self._in_flight > 0
        if not in_call:
            threading.Thread(target=self._exit_when_idle,
                             name="shoal-actor-exit", daemon=True).start()

    def _exit_when_idle(self):
        with self._idle:
            while self._in_flight > 0 or self._constructing:
                self._idle.wait(0.1)
        # Lets the constructor's answer go out first.
        time.sleep(0.2)
        self._run_exit_hooks()
        _tell_head_exiting()
        os._exit(0)

    def _exit_outcome(self, message):
        self._run_exit_hooks()
        _tell_head_exiting()
        return ("exit", message)

    def _run_exit_hooks(self):
        """The actor's __ray_shutdown__, then the process's atexit
        handlers, once: the actor ends gracefully."""
        with self._idle:
            if self._exit_hooks_run:
                return
            self._exit_hooks_run = True
        shutdown = getattr(self._instance, "__ray_shutdown__", None)
        if callable(shutdown):
            try:
                shutdown()
            except BaseException:  # noqa: BLE001 - the actor ends anyway
                traceback.print_exc()
        import shoal
        # The worker's connection is needed until the answer is out.
        atexit.unregister(shoal.shutdown)
        atexit._run_exitfuncs()


async def _on_loop_call(fn, args, kwargs, task=None):
    """An async actor's call, on its loop: a coroutine method is awaited; a
    plain one runs there too, as in Ray, so that it may touch the loop's
    objects (an asyncio.Event its coroutines wait on). ``task`` is what
    current_task() says inside it (each call's coroutine has a context of
    its own)."""
    _task_in_coroutine.set(task)
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result


_EXITED = "the actor exited: it called exit_actor() (shoal::ExitActor)"


def _tell_head_exiting():
    try:
        _shoal.actor_exiting()
    except Exception:  # noqa: BLE001 - the process ends all the same
        traceback.print_exc()


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
    _follow_omp(settings.get("omp"))
    if not ("env" in settings or "working_dir" in settings or
            "py_modules" in settings):
        return _keep_inherited()
    env = dict(settings.get("env") or {})
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


_omp_ours = None  # the OMP_NUM_THREADS the last call set, if any
_method_names = {}  # "Class.method" -> "method"
_methods = {}  # (class, name) -> the class's attribute (a descriptor)


def _method(instance, name):
    """``instance``'s method ``name``, found on its class as Ray finds it:
    an attribute of the instance with the same name does not hide it."""
    cls = type(instance)
    try:
        found = _methods[cls, name]
    except KeyError:
        try:
            found = inspect.getattr_static(cls, name)
        except AttributeError:
            return getattr(instance, name)  # made by __getattr__
        _methods[cls, name] = found
    get = getattr(type(found), "__get__", None)
    return get(found, instance, cls) if get is not None else found


def _nothing_to_undo():
    pass


def _follow_omp(omp):
    """OMP_NUM_THREADS is the call's CPUs (``omp``), left set for the
    next call that asks the same (a worker's calls usually do), never over
    a value the node or the program set."""
    global _omp_ours
    current = os.environ.get("OMP_NUM_THREADS")
    if current is None or current == _omp_ours:
        want = omp or None
        if want != current:
            if want:
                os.environ["OMP_NUM_THREADS"] = want
            else:
                os.environ.pop("OMP_NUM_THREADS", None)
        _omp_ours = want


def _keep_inherited():
    """_apply of a call without a runtime_env: what the tasks it starts
    inherit is nothing."""
    saved_inherited = _remote.inherited_env
    if not saved_inherited:
        return _nothing_to_undo

    def undo():
        _remote.inherited_env = saved_inherited

    _remote.inherited_env = {}
    return undo


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
    _first_title()
    _output.announce_worker()
    sys.exit(_shoal.run_worker(Runtime()))
