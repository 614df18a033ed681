"""What a driver sees: its workers' output, the errors nobody waits for,
get() that signals interrupt, and Ray's exception classes."""

import os
import pickle
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

import shoal
from shoal import exceptions, test_utils


def _wait_for_output(capsys, want, timeout=20):
    """Everything captured until a line containing ``want`` came (out,
    err)."""
    out = err = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        captured = capsys.readouterr()
        out += captured.out
        err += captured.err
        if want in out or want in err:
            return out, err
        time.sleep(0.1)
    raise AssertionError(f"{want!r} never came; out: {out!r} err: {err!r}")


@shoal.remote
def _say(text):
    print(text)
    print(text + " on stderr", file=sys.stderr)
    return os.getpid()


@shoal.remote
class _Speaker:
    def __init__(self):
        print("speaker made")

    def say(self, text):
        print(text)
        return os.getpid()


def test_task_and_actor_output_reach_the_driver(local_cluster, capsys):
    pid = shoal.get(_say.remote("hello from a task"))
    out, _ = _wait_for_output(capsys, "hello from a task on stderr")
    assert f"(pid={pid}) hello from a task\n" in out
    speaker = _Speaker.remote()
    actor_pid = shoal.get(speaker.say.remote("hello from an actor"))
    out, _ = _wait_for_output(capsys, "hello from an actor")
    assert f"(_Speaker pid={actor_pid}) speaker made\n" in out
    assert f"(_Speaker pid={actor_pid}) hello from an actor\n" in out
    assert ":shoal:" not in out  # the markers are the driver's, not shown


@shoal.remote
def _flood(megabytes):
    line = "x" * 1023
    for _ in range(megabytes * 1024):
        print(line)
    print("flood done")


def test_a_worker_printing_fast_is_cut_with_a_line_that_says_so(
        local_cluster, capsys):
    shoal.get(_flood.remote(4))
    out, _ = _wait_for_output(capsys, "flood done")
    assert "bytes of this worker's output were not printed" in out
    # Bounded: far fewer lines than were printed reached the driver.
    assert out.count("x" * 1023) < 4 * 1024


def _run_driver(script, temp_dir):
    env = dict(os.environ, SHOAL_TEMP_DIR=temp_dir,
               PYTHONPATH=os.pathsep.join(
                   [os.path.dirname(os.path.dirname(shoal.__file__)),
                    os.environ.get("PYTHONPATH", "")]))
    env.pop("SHOAL_ADDRESS", None)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)],
                          env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_log_to_driver_false_keeps_worker_output_in_the_logs():
    with tempfile.TemporaryDirectory(prefix="shoal-py-") as temp_dir:
        proc = _run_driver("""
            import time, shoal
            shoal.init(num_cpus=1, log_to_driver=False)
            @shoal.remote
            def f():
                print("only in the log")
            shoal.get(f.remote())
            time.sleep(1)
            shoal.shutdown()
            """, temp_dir)
        assert "only in the log" not in proc.stdout + proc.stderr


@shoal.remote
def _fail(text):
    raise ValueError(text)


@shoal.remote(max_retries=0)
def _die():
    os._exit(7)


@shoal.remote(max_restarts=0)
class _Pid:
    def pid(self):
        return os.getpid()


def test_error_stream_has_task_errors_and_worker_deaths(local_cluster):
    subscriber = test_utils.init_error_pubsub()
    try:
        refs = [_fail.remote("first"), _fail.remote("second")]
        errors = test_utils.get_error_message(subscriber, 2, "task")
        assert sorted(e["type"] for e in errors) == ["task", "task"]
        assert any("first" in e.error_message for e in errors)
        assert all(e["job_id"] == shoal.get_runtime_context().get_job_id()
                   and e["timestamp"] > 0 for e in errors)
        with pytest.raises(exceptions.WorkerCrashedError):
            shoal.get(_die.remote())
        died = test_utils.get_error_message(subscriber, 1, "worker_died")
        assert len(died) == 1
        assert "died or was killed while executing" in died[0][
            "error_message"]
        # An actor killed on purpose is not an error.
        actor = _Pid.remote()
        shoal.get(actor.pid.remote())
        shoal.kill(actor)
        with pytest.raises(exceptions.ActorDiedError):
            shoal.get(actor.pid.remote())
        assert test_utils.get_error_message(subscriber, 1, timeout=1.5) == []
        del refs
    finally:
        subscriber.close()


@shoal.remote
class _Needy:
    def ping(self):
        return 1


def test_an_impossible_request_is_one_infeasible_task_error(local_cluster):
    # Once its grace for a node to join is over, an infeasible task is one
    # message of Ray's type, and an infeasible actor one however many of
    # its calls fail.
    subscriber = test_utils.init_error_pubsub()
    try:
        _fail.options(resources={"absent": 1}).remote("never runs")
        errors = test_utils.get_error_message(subscriber, 1,
                                              "infeasible_task")
        assert len(errors) == 1
        assert "absent" in errors[0].error_message
        actor = _Needy.options(resources={"absent": 1}).remote()
        calls = [actor.ping.remote() for _ in range(3)]
        for call in calls:
            with pytest.raises(shoal.InfeasibleError):
                shoal.get(call, timeout=60)
        errors = test_utils.get_error_message(subscriber, 2,
                                              "infeasible_task", timeout=3)
        assert len(errors) == 1, errors
    finally:
        subscriber.close()


def test_an_actor_process_death_is_one_worker_died_error(local_cluster):
    subscriber = test_utils.init_error_pubsub()
    try:
        actor = _Pid.remote()
        os.kill(shoal.get(actor.pid.remote()), signal.SIGKILL)
        calls = [actor.pid.remote() for _ in range(3)]
        for call in calls:
            with pytest.raises(exceptions.RayActorError) as e:
                shoal.get(call)
            assert e.value.actor_id and "its process died" in str(e.value)
        died = test_utils.get_error_message(subscriber, 2, "worker_died",
                                            timeout=3)
        assert len(died) == 1
    finally:
        subscriber.close()


def test_a_dropped_failed_result_is_reported_once(local_cluster, capsys,
                                                  monkeypatch):
    ref = _fail.remote("nobody reads me")
    del ref
    _, err = _wait_for_output(capsys, "nobody reads me")
    assert err.count("Unhandled error (suppress with") == 1
    # Seen failing first (wait() is not a read), dropped after.
    ref = _fail.remote("dropped once it failed")
    shoal.wait([ref])
    time.sleep(1.2)
    del ref
    _, err = _wait_for_output(capsys, "dropped once it failed")
    assert err.count("Unhandled error (suppress with") == 1
    ref = _fail.remote("somebody reads me")
    with pytest.raises(ValueError):
        shoal.get(ref)
    del ref
    time.sleep(1.5)
    assert "somebody reads me" not in capsys.readouterr().err
    monkeypatch.setenv("SHOAL_IGNORE_UNHANDLED_ERRORS", "1")
    ref = _fail.remote("ignored on purpose")
    del ref
    time.sleep(1.5)
    assert "ignored on purpose" not in capsys.readouterr().err


def test_the_runtimes_own_calls_are_not_reported_unread(local_cluster,
                                                        capsys):
    # A handle left from an earlier cluster: dropping it sends
    # __ray_terminate__ to an actor this cluster does not know, which fails.
    # That is the runtime's own call, not a result the user dropped.
    from shoal import _handles
    _handles._end("0123456789ab-1", "Gone")
    ref = _fail.remote("the user's own")
    del ref
    _, err = _wait_for_output(capsys, "the user's own")
    time.sleep(1.5)
    err += capsys.readouterr().err
    assert err.count("Unhandled error (suppress with") == 1, err


@shoal.remote
def _sleep(seconds):
    time.sleep(seconds)


def test_signal_handlers_run_while_get_and_wait_block(local_cluster):
    class Alarm(Exception):
        pass

    def on_alarm(*_):
        raise Alarm()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        for block in (lambda ref: shoal.get(ref),
                      lambda ref: shoal.wait([ref])):
            signal.setitimer(signal.ITIMER_REAL, 0.5)
            started = time.monotonic()
            with pytest.raises(Alarm):
                block(_sleep.remote(30))
            assert time.monotonic() - started < 5
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(KeyboardInterrupt):
            signal.signal(signal.SIGALRM, signal.default_int_handler)
            shoal.get(_sleep.remote(30))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    with pytest.raises(exceptions.GetTimeoutError):
        shoal.get(_sleep.remote(30), timeout=0.3)


@shoal.remote
def _divide():
    return 1 / 0


@shoal.remote
def _divide_deeper():
    return shoal.get(_divide.remote())


def test_remote_errors_keep_their_type_through_nesting_and_pickling(
        local_cluster):
    for fn in (_divide, _divide_deeper):
        with pytest.raises(ZeroDivisionError) as e:
            shoal.get(fn.remote())
        assert isinstance(e.value, exceptions.RayTaskError)
        assert "ZeroDivisionError" in str(e.value)
        again = pickle.loads(pickle.dumps(e.value))
        assert isinstance(again, ZeroDivisionError)
        assert isinstance(again, exceptions.RayTaskError)


def test_ray_exception_classes():
    assert issubclass(exceptions.ActorDiedError, exceptions.RayActorError)
    assert issubclass(exceptions.ActorUnavailableError,
                      exceptions.RayActorError)
    assert issubclass(exceptions.WorkerCrashedError,
                      exceptions.WorkerDiedError)
    assert issubclass(exceptions.GetTimeoutError, TimeoutError)
    for name in ("OwnerDiedError", "ObjectFetchTimedOutError"):
        assert issubclass(getattr(exceptions, name),
                          exceptions.ObjectLostError)
    for name in exceptions.__all__:
        assert issubclass(getattr(exceptions, name), exceptions.RayError)
    error = exceptions.ActorDiedError("it was killed", "ab12")
    again = pickle.loads(pickle.dumps(error))
    assert again.actor_id == "ab12" and str(again) == "it was killed"


@shoal.remote(max_retries=0)
def _exit():
    exit()


def test_exit_in_a_task_ends_its_worker(local_cluster):
    with pytest.raises(exceptions.WorkerCrashedError):
        shoal.get(_exit.remote())


@shoal.remote
def _unpicklable():
    import threading

    class Holder(Exception):
        def __init__(self):
            super().__init__()
            self.lock = threading.Lock()

    raise Holder()


def test_an_exception_that_does_not_pickle_says_so(local_cluster):
    with pytest.raises(exceptions.RayTaskError) as e:
        shoal.get(_unpicklable.remote())
    assert isinstance(e.value.cause, exceptions.RaySystemError)
    assert "isn't serializable" in str(e.value.cause)


@shoal.remote
def _consume(value):
    return value


def test_a_failed_argument_fails_the_task_as_a_task_error(local_cluster):
    actor = _Pid.remote()
    os.kill(shoal.get(actor.pid.remote()), signal.SIGKILL)
    dead = actor.pid.remote()
    with pytest.raises(exceptions.ActorDiedError) as e:
        shoal.get(dead)
    assert not isinstance(e.value, exceptions.RayTaskError)
    with pytest.raises(exceptions.RayTaskError) as e:
        shoal.get(_consume.remote(dead))
    assert isinstance(e.value, exceptions.ActorDiedError)
    assert dead.hex() in str(e.value)


def test_a_large_function_warns_and_a_too_large_one_is_refused(
        local_cluster):
    import numpy as np
    subscriber = test_utils.init_error_pubsub()
    try:
        large = np.zeros(2 * 10**7, dtype=np.uint8)

        @shoal.remote
        def uses_large():
            return len(large)

        with pytest.warns(UserWarning, match="is very large"):
            assert shoal.get(uses_large.remote()) == 2 * 10**7
        warned = test_utils.get_error_message(
            subscriber, 1, "pickling_large_object", timeout=1)
        assert len(warned) == 1
        too_large = np.zeros(2 * 10**8, dtype=np.uint8)

        @shoal.remote
        class UsesTooLarge:
            def size(self):
                return len(too_large)

        with pytest.raises(ValueError, match="The actor UsesTooLarge is too "
                                             "large"):
            UsesTooLarge.remote()
    finally:
        subscriber.close()


def test_output_of_a_worker_on_another_host_names_its_ip():
    """A second node at another address (127.0.0.2: another host as far
    as the driver can tell) has its workers' lines followed through the
    head, with ``ip=`` in their prefix."""
    cli = os.environ.get("SHOAL_CLI", "shoal")
    with tempfile.TemporaryDirectory(prefix="shoal-py-") as root:
        head_dir, node_dir = (os.path.join(root, d) for d in ("head", "node"))
        env = {k: v for k, v in os.environ.items()
               if k not in ("SHOAL_ADDRESS", "SHOAL_TOKEN")}

        def start(args, temp_dir, ip):
            subprocess.run([cli, "start", *args, "--node-ip-address", ip,
                            "--temp-dir", temp_dir],
                           env=dict(env, SHOAL_TEMP_DIR=temp_dir),
                           check=True, capture_output=True, timeout=60)

        try:
            start(["--head", "--port", "0", "--num-cpus", "0"], head_dir,
                  "127.0.0.1")
            session = os.path.join(head_dir, "session_latest")
            with open(os.path.join(session, "cluster_address")) as f:
                address = f.read().strip()
            with open(os.path.join(session, "token")) as f:
                token = f.read().strip()
            start(["--address", address, "--token", token, "--num-cpus",
                   "1"], node_dir, "127.0.0.2")
            script = """
                import shoal, time
                shoal.init()
                @shoal.remote
                def where():
                    print("printed far away")
                    import os
                    return os.getpid()
                print("PID", shoal.get(where.remote()))
                time.sleep(1)
                shoal.shutdown()
                """
            proc = _run_driver(script, head_dir)
            pid = proc.stdout.split("PID ")[1].split()[0]
            assert (f"(pid={pid}, ip=127.0.0.2) printed far away"
                    in proc.stdout), proc.stdout
        finally:
            for temp_dir in (node_dir, head_dir):
                subprocess.run([cli, "stop", "--temp-dir", temp_dir],
                               env=dict(env, SHOAL_TEMP_DIR=temp_dir),
                               capture_output=True, timeout=60)


def _http_status(url, token=None):
    import urllib.error
    import urllib.request
    request = urllib.request.Request(url, headers={
        "Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status
    except urllib.error.HTTPError as e:
        return e.code


def test_get_dashboard_url_is_where_the_dashboard_answers(local_cluster,
                                                          monkeypatch):
    # init() starts a local cluster with a dashboard, as Ray's does.
    url = shoal.get_runtime_context().get_dashboard_url()
    assert url.startswith("127.0.0.1:")
    # It answers (and wants the cluster's token, as every endpoint does).
    assert _http_status(f"http://{url}/api/cluster_status") == 401
    import glob
    token_file, = glob.glob(os.path.join(local_cluster, "session_2*",
                                         "token"))
    with open(token_file) as f:
        token = f.read().strip()
    assert _http_status(f"http://{url}/api/cluster_status", token) == 200
    monkeypatch.setenv("SHOAL_OVERRIDE_DASHBOARD_URL", "dash.example:1234")
    assert shoal.get_runtime_context().get_dashboard_url() == \
        "dash.example:1234"


def test_init_without_a_dashboard(monkeypatch):
    with tempfile.TemporaryDirectory(prefix="shoal-py-") as temp_dir:
        monkeypatch.setenv("SHOAL_TEMP_DIR", temp_dir)
        monkeypatch.delenv("SHOAL_ADDRESS", raising=False)
        monkeypatch.delenv("SHOAL_TOKEN", raising=False)
        info = shoal.init(num_cpus=1, include_dashboard=False)
        try:
            assert info["webui_url"] == "" and info.dashboard_url == ""
            assert shoal.get_runtime_context().get_dashboard_url() == ""
        finally:
            shoal.shutdown()


def test_a_driver_running_one_task_after_another_leaves_room_for_others(
        local_cluster):
    # The driver keeps an idle lease a moment for its next task; a lease
    # that old goes back when idle, so the actor's request, waiting at the
    # agent for the same resources, gets its turn.
    @shoal.remote(num_cpus=0, resources={"slot": 3})
    def all_slots():
        return os.getpid()

    @shoal.remote(num_cpus=0)
    class Other:
        def run_one(self):
            return shoal.get(all_slots.remote())

    other = Other.remote()
    shoal.get(other.__ray_ready__.remote())
    shoal.get(all_slots.remote())
    theirs = other.run_one.remote()
    deadline = time.time() + 30
    while not shoal.wait([theirs], timeout=0)[0]:
        assert time.time() < deadline, "the actor's task never got the slots"
        shoal.get(all_slots.remote())
        time.sleep(0.05)
    assert shoal.get(theirs) > 0


def test_thousands_of_calls_queued_to_an_actor_warn_the_driver(local_cluster,
                                                                capfd):
    @shoal.remote
    class Stuck:
        def wait(self, seconds):
            time.sleep(seconds)

    subscriber = test_utils.init_error_pubsub()
    try:
        stuck = Stuck.remote()
        refs = [stuck.wait.remote(60) for _ in range(5001)]
        errors = test_utils.get_error_message(
            subscriber, 1, "excess_queueing_warning", timeout=20)
        assert len(errors) == 1
        assert ("More than 5000 tasks are pending submission to actor "
                f"{stuck._actor_id}") in errors[0]["error_message"]
        assert "More than 5000 tasks" in capfd.readouterr().err
        del refs
        shoal.kill(stuck)
    finally:
        subscriber.close()


def test_a_driver_of_another_version_is_refused(started_cluster):
    # Ray's check: the cluster's version against the driver's own
    # (shoal.__version__), before the driver does anything there.
    mine = shoal.__version__
    assert mine == shoal._shoal.version()
    shoal.__version__ = "0.0.1"
    try:
        with pytest.raises(RuntimeError, match="Version mismatch") as refused:
            shoal.init(address="auto")
    finally:
        shoal.__version__ = mine
    assert "Shoal 0.0.1" in str(refused.value)
    assert f"Shoal {mine}" in str(refused.value)
    assert not shoal.is_initialized()
    shoal.init(address="auto")
    assert shoal.get(shoal.put(7)) == 7


def _job_keys():
    """The Python frontend's keys of jobs in the head's key-value store, by
    job: {job id: sorted keys}."""
    by_job = {}
    for key in shoal._shoal.kv_keys(""):
        group, _, rest = key.decode().partition("/")
        if group in ("pyfn", "pyactor", "pyenv", "pyjob"):
            by_job.setdefault(rest.split("/")[0], []).append(key.decode())
    return {job: sorted(keys) for job, keys in by_job.items()}


def _eventually(check, timeout=20):
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.1)
    return check()


def test_what_a_job_keeps_in_the_head_goes_when_it_and_its_actors_end(
        started_cluster, tmp_path):
    # Each driver's functions, classes and packages are copied into the
    # head's key-value store; they stay while its detached actor may need
    # them (to restart, to run its calls' tasks) and go after that, so that
    # a cluster that runs job after job does not keep them all.
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "helper.py").write_text("VALUE = 3\n")
    script = f"""
        import shoal
        shoal.init(namespace="keys", runtime_env={{
            "working_dir": {str(tmp_path / "pkg")!r}}})
        @shoal.remote
        def f():
            import helper
            return helper.VALUE
        @shoal.remote
        class Keeper:
            def ping(self):
                return 1
        assert shoal.get(f.remote()) == 3
        assert shoal.get(Keeper.remote().ping.remote()) == 1
        %s
        print("job", shoal.get_runtime_context().get_job_id())
        """
    plain = _run_driver(script % "", started_cluster).stdout
    kept = _run_driver(script % (
        'k = Keeper.options(name="k", lifetime="detached").remote(); '
        'shoal.get(k.ping.remote())'), started_cluster).stdout
    plain_job = plain.split("job ")[-1].strip()
    kept_job = kept.split("job ")[-1].strip()
    shoal.init(address="auto", namespace="keys")
    assert _eventually(lambda: plain_job not in _job_keys()), _job_keys()
    keys = _job_keys()[kept_job]
    assert any(k.startswith("pyfn/") for k in keys), keys
    assert any(k.startswith("pyactor/") for k in keys), keys
    assert any(k.startswith("pyenv/") for k in keys), keys
    shoal.kill(shoal.get_actor("k"))
    assert _eventually(lambda: kept_job not in _job_keys()), _job_keys()
