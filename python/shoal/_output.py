"""Worker output in the driver: what the job's tasks and actors print
appears in the driver's stdout, each line prefixed as Ray prefixes it:
``(pid=1234) text`` for a task's worker, ``(Counter pid=1234) text`` for an
actor's, with ``, ip=10.0.0.2`` when the worker's node has another address
than the driver's host. ``init(log_to_driver=False)`` turns it off.

How it travels. A worker's stdout and stderr are its log file in its
node's session folder (logs/worker-ID.log), which the node's agent serves
(LIST_LOGS, READ_LOG) and the head relays for any node. A Python worker
writes a marker line first (``:shoal: job_id=J pid=P``) and one before an
actor's constructor runs (``:shoal: actor_name=C``). ``OutputFollower``,
a daemon thread of the driver, lists the worker logs of every node through
the head every ``_POLL_S``, reads the first bytes of a new one to learn its
job, and from then on reads what was added to the files of its own job,
printing whole lines with their prefix (marker lines are not printed).
Files of other jobs are passed over after that first read.

Bounds. Each read takes at most ``_CHUNK`` bytes of a file; when a file is
more than ``_MAX_BEHIND`` bytes ahead of what the driver printed (a worker
printing faster than the driver reads), the driver skips to its last
``_CHUNK`` bytes and says in a line how many bytes it dropped. A line
longer than ``_CHUNK`` is printed in pieces. So the driver holds at most a
chunk per file, whatever the workers print.
"""

import os
import socket
import sys
import threading

from shoal import _shoal

MARKER = ":shoal: "
_POLL_S = 0.2
_CHUNK = 64 << 10
_MAX_BEHIND = 1 << 20
_HEAD_BYTES = 512  # enough for the marker line


def write_marker(stream, **fields):
    """Writes a marker line to a worker's ``stream`` (its log)."""
    stream.write(MARKER + " ".join(f"{k}={v}" for k, v in fields.items())
                 + "\n")
    stream.flush()


class _Log:
    """What the driver knows of one worker log."""

    def __init__(self, node_id, name):
        self.node_id = node_id
        self.name = name
        self.offset = 0
        self.mine = None  # None: not read yet; else whether it is our job's
        self.pid = "?"
        self.actor = ""
        self.partial = b""


class OutputFollower:
    """Follows the job's worker logs on every node and prints their new
    lines (see the module's text). ``start`` runs it on a daemon thread;
    ``stop`` reads once more and ends it."""

    def __init__(self, job_id):
        self._job_id = job_id
        self._logs = {}
        self._addresses = {}
        self._my_ips = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = None

    def start(self):
        self._learn_nodes()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="shoal-log-to-driver")
        self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.poll()

    def _run(self):
        while not self._stop.wait(_POLL_S):
            self.poll()

    def _learn_nodes(self):
        try:
            nodes = _shoal.nodes()
        except Exception:  # noqa: BLE001 - asked again on the next poll
            return
        for n in nodes:
            self._addresses[n["NodeID"]] = n["Address"].rsplit(":", 1)[0]
        if not self._my_ips:
            self._my_ips = _local_ips()

    def poll(self):
        """Prints what the job's workers added to their logs. Never raises
        (a node or head that cannot answer is asked again)."""
        with self._lock:
            try:
                files = _shoal.list_logs("")
            except Exception:  # noqa: BLE001
                return
            for node_id, name, size in files:
                if not (name.startswith("worker-") and name.endswith(".log")):
                    continue
                log = self._logs.get((node_id, name))
                if log is None:
                    log = self._logs[(node_id, name)] = _Log(node_id, name)
                if log.mine is False or size <= log.offset:
                    continue
                try:
                    self._read(log, size)
                except Exception:  # noqa: BLE001 - gone, or node away
                    continue

    def _read(self, log, size):
        if log.mine is None:
            data, _, _ = _shoal.read_log(log.node_id, log.name, 0,
                                         _HEAD_BYTES)
            first = data.split(b"\n", 1)[0].decode(errors="replace")
            if not first.startswith(MARKER):
                if b"\n" in data or len(data) >= _HEAD_BYTES:
                    log.mine = False  # not a Python worker's log
                return
            fields = _fields(first)
            log.mine = fields.get("job_id") == self._job_id
            log.pid = fields.get("pid", "?")
            if not log.mine:
                return
        dropped = 0
        if size - log.offset > _MAX_BEHIND:
            dropped = size - _CHUNK - log.offset
            log.offset = size - _CHUNK
            log.partial = b""
        data, next_offset, _ = _shoal.read_log(log.node_id, log.name,
                                               log.offset, _CHUNK)
        log.offset = next_offset
        if dropped:
            self._emit(log, f"[{dropped} bytes of this worker's output "
                            "were not printed: it printed faster than the "
                            "driver reads; its log has them all]")
        data = log.partial + data
        lines = data.split(b"\n")
        log.partial = lines.pop()
        if len(log.partial) >= _CHUNK:
            lines.append(log.partial)
            log.partial = b""
        for line in lines:
            text = line.decode(errors="replace")
            if text.startswith(MARKER):
                fields = _fields(text)
                log.actor = fields.get("actor_name", log.actor)
                continue
            self._emit(log, text)

    def _emit(self, log, text):
        ip = self._addresses.get(log.node_id)
        if ip is None:
            self._learn_nodes()
            ip = self._addresses.get(log.node_id, "")
        who = f"{log.actor} pid={log.pid}" if log.actor else f"pid={log.pid}"
        if ip and ip not in self._my_ips:
            who += f", ip={ip}"
        print(f"({who}) {text}", file=sys.stdout, flush=True)


def _local_ips():
    """This host's addresses: a worker on a node at one of them runs here."""
    ips = {"127.0.0.1", "::1", "localhost"}
    try:
        ips.update(socket.gethostbyname_ex(socket.gethostname())[2])
    except OSError:
        pass
    try:  # the address this host reaches the head from
        head = _shoal.connection_info()["address"].rsplit(":", 1)[0]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((head, 9))
            ips.add(s.getsockname()[0])
    except (OSError, KeyError, ValueError):
        pass
    return ips


def _fields(marker_line):
    fields = {}
    for part in marker_line[len(MARKER):].split():
        key, _, value = part.partition("=")
        fields[key] = value
    return fields


_follower = None


def start(job_id):
    """Starts printing the job's worker output (init() calls it)."""
    global _follower
    stop()
    _follower = OutputFollower(job_id)
    _follower.start()


def stop():
    """Prints what is left and stops (shutdown() calls it first)."""
    global _follower
    if _follower is not None:
        _follower.stop()
        _follower = None


def announce_worker():
    """A Python worker's first line: its job and pid, read by the driver."""
    write_marker(sys.stdout, job_id=os.environ.get("SHOAL_JOB_ID", ""),
                 pid=os.getpid())


def announce_actor(class_name):
    """Written before an actor's constructor runs: its lines from then on
    are the actor's."""
    write_marker(sys.stdout, actor_name=class_name)
