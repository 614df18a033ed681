#!/usr/bin/env python3
"""The security tier: a stranger's and a careless admin's attacks on a real
Shoal cluster, each with bounded loops on loopback, asserting what Shoal
promises (the README's "Security") and printing the figures.

Each finding below was once a way in or a way down; each check starts what
it needs (a head from `shoal start` in a temp dir of its own), attacks it,
checks that the cluster still answers `shoal status` and runs a program
while the attack goes on, and stops everything it started.

  restart    a failed `shoal start --head` after a crash leaves the session
             to the next start: same token, same jobs
  csrf       a page of another port posts a form with the dashboard cookie
  slowloris  HTTP clients that trickle a byte every 2 s
  bodies     huge POSTs without the token
  logs       a job that prints hundreds of MB, followed by the API
  rpc        strangers that hold thousands of RPC connections and reopen
             them as they are dropped
  wal        a damaged head.db-wal
  orphan     an agent whose head is gone for good
  files      who may read the session folder, what `ps` shows, printed
             commands, NUL bytes, hex numbers, node ids

  tests/security/probe.py --build build [--short] [--only csrf,logs]

Exits 1 if any promise is broken. Figures go to stdout, one
`finding figure value` line each, and to --figures FILE as JSON.
"""
import argparse
import http.client
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

FIGURES = []


def figure(finding, name, value):
    FIGURES.append((finding, name, value))
    if isinstance(value, float):
        value = f"{value:.3f}"
    print(f"  {finding:<10} {name:<42} {value}", flush=True)


class Broken(Exception):
    """A promise that does not hold."""


def expect(cond, what):
    if not cond:
        raise Broken(what)


def clean_env():
    return {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}


def read(path):
    with open(path, "rb") as f:
        return f.read().decode(errors="replace").strip()


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


class PeakRss:
    """The largest RSS of a process while the block runs (sampled)."""

    def __init__(self, pid):
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()

    def __enter__(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mib(self.pid))
            time.sleep(0.05)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mib(self.pid))


class Cluster:
    """A one-node cluster of its own: `shoal start --head` in a temp dir."""

    def __init__(self, shoal, root, name="head", extra=()):
        self.shoal = shoal
        self.temp_dir = os.path.join(root, name)
        self.env = clean_env()
        self.extra = list(extra)

    def start(self, check=True, extra=()):
        done = self.cli(["start", "--head", "--port", "0", "--node-ip-address",
                         "127.0.0.1", "--dashboard-port", "0", "--num-cpus",
                         "2", "--temp-dir", self.temp_dir] + self.extra +
                        list(extra), timeout=120, temp_dir=False)
        if check and done.returncode != 0:
            raise Broken(f"shoal start --head failed: {done.stdout}")
        return done

    @property
    def session(self):
        return os.path.join(self.temp_dir, "session_latest")

    def file(self, name):
        return read(os.path.join(self.session, name))

    @property
    def token(self):
        return self.file("token")

    @property
    def address(self):
        return self.file("cluster_address")

    @property
    def dashboard(self):
        return self.file("dashboard_address")

    @property
    def head_pid(self):
        return int(self.file("head.pid"))

    def cli(self, args, timeout=60, temp_dir=True, env=None):
        argv = [self.shoal] + args
        if temp_dir:
            argv += ["--temp-dir", self.temp_dir]
        return subprocess.run(argv, env=env or self.env, timeout=timeout,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, errors="replace")

    def status_s(self):
        """How long `shoal status` takes; raises if it fails."""
        start = time.monotonic()
        done = self.cli(["status"], timeout=30)
        took = time.monotonic() - start
        if done.returncode != 0:
            raise Broken(f"shoal status failed: {done.stdout[-2000:]}")
        return took

    def program_s(self, build):
        """How long a C++ program of 20 tasks takes; raises if it fails."""
        env = dict(self.env, SHOAL_ADDRESS=self.address,
                   SHOAL_TOKEN=self.token)
        start = time.monotonic()
        done = subprocess.run([os.path.join(build, "bin", "hello_tasks"), "20"],
                              env=env, timeout=120, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              errors="replace")
        took = time.monotonic() - start
        if done.returncode != 0:
            raise Broken(f"hello_tasks failed: {done.stdout[-2000:]}")
        return took

    def http(self, method, path, body=None, headers=None, token=True,
             timeout=30):
        req = urllib.request.Request(f"http://{self.dashboard}{path}",
                                     data=body, method=method)
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        if token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def submit(self, entrypoint, submission_id=None):
        body = {"entrypoint": entrypoint}
        if submission_id:
            body["submission_id"] = submission_id
        status, answer = self.http("POST", "/api/jobs/",
                                   json.dumps(body).encode(),
                                   {"Content-Type": "application/json"})
        expect(status == 200, f"job submit answered {status}: {answer[:300]}")
        return json.loads(answer)["submission_id"]

    def job(self, submission_id):
        status, answer = self.http("GET", f"/api/jobs/{submission_id}")
        return json.loads(answer) if status == 200 else None

    def stop(self):
        self.cli(["stop", "--force"], timeout=60)


def wait_for(cond, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise Broken(f"{what} (waited {timeout_s} s)")


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def host_port(address):
    host, port = address.rsplit(":", 1)
    return host, int(port)


# ---- the findings ----


def check_restart(args, root):
    """A failed restart after a crash leaves the session to the next one."""
    c = Cluster(args.shoal, root)
    c.start()
    try:
        token, address = c.token, c.address
        job = c.submit("sleep 300", "security-restart")
        wait_for(lambda: (c.job(job) or {}).get("status") == "RUNNING", 30,
                 "the job never ran")
        os.kill(c.head_pid, signal.SIGKILL)
        time.sleep(0.5)
        # The head's port is taken by someone else: the restart fails.
        blocker = socket.socket()
        blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        blocker.bind(host_port(address))
        blocker.listen(1)
        failed = c.start(check=False)
        blocker.close()
        figure("restart", "failed start exit code", failed.returncode)
        expect(failed.returncode != 0,
               "a start on a taken port succeeded: " + failed.stdout)
        start = time.monotonic()
        again = c.start(check=False)
        figure("restart", "resume after the failed start s",
               time.monotonic() - start)
        expect(again.returncode == 0, "the next start failed: " + again.stdout)
        expect(c.token == token, "the next start made a new cluster (token "
               "changed)")
        state = c.job(job)
        figure("restart", "job kept through both starts", bool(state))
        expect(state is not None, "the running job was lost")
        figure("restart", "status after resume s", c.status_s())
    finally:
        c.stop()


def sign_in_cookie(c):
    host, port = host_port(c.dashboard)
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request("GET", f"/?token={c.token}")
    cookie = conn.getresponse().getheader("Set-Cookie", "")
    conn.close()
    return cookie.split(";", 1)[0]


def check_csrf(args, root):
    """A form of another port cannot run, stop or delete a job."""
    c = Cluster(args.shoal, root)
    c.start()
    try:
        cookie = sign_in_cookie(c)
        expect(cookie.startswith("shoal_token="), "no sign-in cookie")
        body = json.dumps({"entrypoint": "echo forged",
                           "submission_id": "forged"}).encode()
        answers = {}
        for name, headers in {
                "form text/plain": {"Origin": "http://127.0.0.1:1",
                                    "Content-Type": "text/plain"},
                "form without Origin": {"Content-Type": "text/plain"},
                "urlencoded": {"Content-Type":
                               "application/x-www-form-urlencoded"},
                "json without X-Shoal-Request": {"Content-Type":
                                                 "application/json"},
                "foreign Origin with header": {
                    "Origin": "http://evil.example", "X-Shoal-Request": "1",
                    "Content-Type": "application/json"},
        }.items():
            status, _ = c.http("POST", "/api/jobs/", body,
                               dict(headers, Cookie=cookie), token=False)
            answers[name] = status
            figure("csrf", f"POST by cookie, {name}", status)
            expect(status in (403, 415), f"a forged POST ({name}) got {status}")
        expect(c.job("forged") is None, "a forged job exists")
        host, port = host_port(c.dashboard)
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.request("GET", "/", headers={"Cookie": cookie})
        page = conn.getresponse()
        framing = (page.getheader("X-Frame-Options", ""),
                   page.getheader("Content-Security-Policy", ""))
        conn.close()
        figure("csrf", "page: X-Frame-Options", framing[0])
        expect(framing[0] == "DENY" and "frame-ancestors 'none'" in framing[1],
               f"the page may be framed: {framing}")
        figure("csrf", "status s", c.status_s())
    finally:
        c.stop()


def check_slowloris(args, root):
    """Clients that trickle bytes do not stall the API."""
    c = Cluster(args.shoal, root)
    c.start()
    clients = 20 if args.short else 60
    seconds = 6 if args.short else 20
    socks = []
    stop = threading.Event()
    try:
        host, port = host_port(c.dashboard)
        for _ in range(clients):
            s = socket.create_connection((host, port), timeout=5)
            s.sendall(b"GET /api/jobs/ HTTP/1.1\r\n")
            socks.append(s)

        def trickle():
            while not stop.wait(2):
                for s in socks:
                    try:
                        s.sendall(b"X")
                    except OSError:
                        pass

        t = threading.Thread(target=trickle, daemon=True)
        t.start()
        latencies = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            start = time.monotonic()
            status, _ = c.http("GET", "/api/jobs/", timeout=10)
            latencies.append(time.monotonic() - start)
            expect(status == 200, f"GET /api/jobs/ answered {status}")
            time.sleep(0.2)
        figure("slowloris", "trickling clients", clients)
        figure("slowloris", "API answers while they trickle", len(latencies))
        figure("slowloris", "API max latency s", max(latencies))
        figure("slowloris", "status s", c.status_s())
        stop.set()
        t.join()
    finally:
        stop.set()
        for s in socks:
            s.close()
        c.stop()


def check_bodies(args, root):
    """Huge bodies without the token are never buffered."""
    c = Cluster(args.shoal, root)
    c.start()
    size = (100 if args.short else 500) << 20
    senders = 4
    sent = [0] * senders
    answers = [None] * senders
    try:
        host, port = host_port(c.dashboard)

        def post(i):
            s = socket.create_connection((host, port), timeout=10)
            s.sendall(f"POST /api/jobs/ HTTP/1.1\r\nHost: {c.dashboard}\r\n"
                      f"Content-Type: application/json\r\nContent-Length: "
                      f"{size}\r\n\r\n".encode())
            chunk = b"x" * (1 << 20)
            try:
                while sent[i] < size:
                    s.sendall(chunk)
                    sent[i] += len(chunk)
            except OSError:
                pass
            try:
                answers[i] = s.recv(200).split(b" ")[1].decode()
            except (OSError, IndexError):
                answers[i] = "closed"
            s.close()

        with PeakRss(c.head_pid) as peak:
            threads = [threading.Thread(target=post, args=(i,))
                       for i in range(senders)]
            for t in threads:
                t.start()
            status_s = c.status_s()
            for t in threads:
                t.join(120)
        figure("bodies", "POSTs without the token", senders)
        figure("bodies", "declared bytes each", size)
        figure("bodies", "bytes the head let in (max of the 4)", max(sent))
        figure("bodies", "answers", ",".join(map(str, answers)))
        figure("bodies", "head RSS peak MiB", peak.peak)
        figure("bodies", "status while they post s", status_s)
        expect(all(a == "401" for a in answers),
               f"a POST without the token was answered {answers}")
        expect(peak.peak < 300, f"the head reached {peak.peak:.0f} MiB")
    finally:
        c.stop()


def check_logs(args, root):
    """A huge log is served in bounded pieces; the head stays small."""
    c = Cluster(args.shoal, root)
    c.start()
    mib = 100 if args.short else 300
    try:
        job = c.submit(f"head -c {mib << 20} /dev/zero | tr '\\0' x | "
                       f"fold -w 99; sleep 300", "security-logs")
        served = 0
        answers = 0
        biggest = 0
        with PeakRss(c.head_pid) as peak:
            offset = 0
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                status, body = c.http("GET", f"/api/jobs/{job}/logs?"
                                      f"offset={offset}", timeout=60)
                expect(status == 200, f"logs answered {status}")
                window = json.loads(body)
                answers += 1
                biggest = max(biggest, len(body))
                served += len(window["logs"])
                offset = window["next_offset"]
                if offset >= (mib << 20):
                    break
            # A page that never follows: the whole log by default.
            status, body = c.http("GET", f"/api/jobs/{job}/logs")
            biggest = max(biggest, len(body))
            status_s = c.status_s()
        figure("logs", "log size MiB", mib)
        figure("logs", "follower answers", answers)
        figure("logs", "largest answer bytes", biggest)
        figure("logs", "bytes served in all", served)
        figure("logs", "head RSS peak MiB", peak.peak)
        figure("logs", "status while followed s", status_s)
        expect(offset >= (mib << 20), "the follower never reached the end")
        expect(biggest <= (4 << 20), f"an answer of {biggest} bytes")
        expect(peak.peak < 300, f"the head reached {peak.peak:.0f} MiB")
    finally:
        c.stop()


def check_rpc(args, root):
    """Strangers holding thousands of RPC connections lock nobody out."""
    c = Cluster(args.shoal, root)
    c.start()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    # 3,000, or what this process may open (the figures say which).
    target = 3000 if soft == resource.RLIM_INFINITY else min(3000, soft - 200)
    expect(target >= 1500, f"this process may open only {soft} files: "
           "raise the hard limit (ulimit -Hn) to 3,200 or more")
    seconds = 8 if args.short else 20
    stop = threading.Event()
    held = []
    counts = {"opened": 0, "dropped": 0, "refused": 0}
    lock = threading.Lock()
    try:
        host, port = host_port(c.address)

        def hold():
            while not stop.is_set():
                if len(held) >= target:
                    # Reopen what the head dropped.
                    for s in list(held):
                        try:
                            if s.recv(1) != b"":
                                continue  # never sent: still held
                        except BlockingIOError:
                            continue
                        except OSError:
                            pass
                        with lock:
                            held.remove(s)
                            counts["dropped"] += 1
                        s.close()
                    time.sleep(0.05)
                    continue
                try:
                    s = socket.create_connection((host, port), timeout=2)
                    s.setblocking(False)
                    with lock:
                        held.append(s)
                        counts["opened"] += 1
                except OSError:
                    with lock:
                        counts["refused"] += 1
                    time.sleep(0.05)

        t = threading.Thread(target=hold, daemon=True)
        t.start()
        wait_for(lambda: counts["opened"] >= target, 60,
                 f"could not open {target} connections")
        status = []
        programs = []
        with PeakRss(c.head_pid) as peak:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                status.append(c.status_s())
                programs.append(c.program_s(args.build))
        stop.set()
        t.join(30)
        figure("rpc", "stranger connections (target)", target)
        figure("rpc", "opened in all", counts["opened"])
        figure("rpc", "dropped by the head", counts["dropped"])
        figure("rpc", "status runs / max s", f"{len(status)} / "
               f"{max(status):.3f}")
        figure("rpc", "program runs / max s", f"{len(programs)} / "
               f"{max(programs):.3f}")
        figure("rpc", "head RSS peak MiB", peak.peak)
        nodes = json.loads(c.cli(["status", "--format", "json"]).stdout)
        alive_nodes = [n for n in nodes.get("nodes", [])
                       if n.get("state") == "ALIVE"]
        figure("rpc", "nodes alive after", len(alive_nodes))
        expect(len(alive_nodes) >= 1, "the node died under the strangers")
    finally:
        stop.set()
        for s in held:
            s.close()
        c.stop()


def check_wal(args, root):
    """A damaged head.db-wal stops the head and says what to do."""
    c = Cluster(args.shoal, root)
    c.start()
    try:
        for i in range(40):
            c.submit("true", f"security-wal-{i}")
        wal = os.path.join(c.session, "head.db-wal")
        os.kill(c.head_pid, signal.SIGKILL)
        time.sleep(0.5)
        size = os.path.getsize(wal) if os.path.exists(wal) else 0
        figure("wal", "WAL bytes at the crash", size)
        if size < 32 + 2 * (24 + 4096):
            figure("wal", "skipped: the WAL was checkpointed", True)
            return
        # A byte in the middle of the first frame's page.
        with open(wal, "r+b") as f:
            f.seek(32 + 24 + 100)
            b = f.read(1)
            f.seek(32 + 24 + 100)
            f.write(bytes([b[0] ^ 0xFF]))
        before = sorted(os.listdir(c.session))
        refused = c.start(check=False)
        figure("wal", "start on a damaged WAL exit code", refused.returncode)
        expect(refused.returncode != 0, "the head started on a damaged WAL")
        expect("head.db-wal" in refused.stdout,
               "the refusal does not name the file: " + refused.stdout)
        expect(sorted(os.listdir(c.session)) == before,
               "the failed start changed the session folder")
        again = c.start(check=False, extra=["--discard-wal"])
        figure("wal", "start with --discard-wal exit code", again.returncode)
        expect(again.returncode == 0, "--discard-wal failed: " + again.stdout)
        kept = [n for n in os.listdir(c.session) if "discarded" in n]
        figure("wal", "damaged WAL kept as", ",".join(kept))
        expect(kept, "the damaged WAL was not kept")
    finally:
        c.stop()


def check_orphan(args, root):
    """An agent whose head is gone for good stops and frees its segment."""
    timeout_s = 3
    c = Cluster(args.shoal, root, extra=["--head-timeout-s", str(timeout_s)])
    c.start()
    node = Cluster(args.shoal, root, name="node")
    try:
        done = node.cli(["start", "--address", c.address, "--token", c.token,
                         "--node-ip-address", "127.0.0.1", "--num-cpus", "1",
                         "--head-timeout-s", str(timeout_s)], timeout=120)
        expect(done.returncode == 0, "the node did not join: " + done.stdout)
        agent = int(node.file("agent.pid"))
        node_id = node.file("node_id")
        segments = lambda: [n for n in os.listdir("/dev/shm")
                            if node_id in n]
        expect(segments(), "the node has no store segment")
        os.kill(c.head_pid, signal.SIGKILL)
        start = time.monotonic()
        wait_for(lambda: not alive(agent), timeout_s + 60,
                 "the agent outlived its head")
        figure("orphan", "agent exit after the head s",
               time.monotonic() - start)
        wait_for(lambda: not segments(), 10, "the segment outlived its agent")
        figure("orphan", "segments left", len(segments()))
    finally:
        node.stop()
        c.stop()


def check_files(args, root):
    """Files, arguments and printed commands give strangers nothing."""
    c = Cluster(args.shoal, root)
    c.start()
    try:
        job = c.submit("echo secret-output", "security-files")
        wait_for(lambda: (c.job(job) or {}).get("status") == "SUCCEEDED", 60,
                 "the job did not end")
        open_to_others = []
        for base, dirs, files in os.walk(os.path.realpath(c.session)):
            for name in dirs + files:
                path = os.path.join(base, name)
                try:
                    mode = os.lstat(path).st_mode
                except OSError:
                    continue
                if os.path.islink(path):
                    continue
                if mode & 0o077:
                    open_to_others.append(f"{path} {oct(mode & 0o777)}")
        figure("files", "session entries group/other can read",
               len(open_to_others))
        expect(not open_to_others,
               "readable by others: " + "; ".join(open_to_others[:5]))
        # No process of the cluster shows the token in its arguments.
        token = c.token
        shown = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if token.encode() in f.read():
                        shown.append(pid)
            except OSError:
                pass
        figure("files", "processes with the token in argv", len(shown))
        expect(not shown, f"the token is in the arguments of {shown}")
        # Numbers are decimal; NUL bytes and odd node ids are refused
        # before anything starts.
        hexed = Cluster(args.shoal, root, name="hex-node").start(
            check=False, extra=["--num-cpus", "0x10"])
        figure("files", "--num-cpus 0x10 exit code", hexed.returncode)
        expect(hexed.returncode != 0, "--num-cpus 0x10 was taken")
        odd = Cluster(args.shoal, root, name="odd-node")
        refused = odd.start(check=False, extra=["--node-id", "../../etc"])
        figure("files", "--node-id ../../etc exit code", refused.returncode)
        expect(refused.returncode != 0, "--node-id ../../etc was taken")
        expect(not os.path.exists(os.path.join(odd.temp_dir, "session_latest",
                                               "head.pid")),
               "a head started for --node-id ../../etc")
        status, answer = c.http("POST", "/api/jobs/",
                                b'{"entrypoint": "echo a\\u0000rm -rf x"}',
                                {"Content-Type": "application/json"})
        figure("files", "entrypoint with NUL answered", status)
        expect(status == 400, f"an entrypoint with NUL was answered {status}")
    finally:
        c.stop()


CHECKS = {
    "restart": check_restart,
    "csrf": check_csrf,
    "slowloris": check_slowloris,
    "bodies": check_bodies,
    "logs": check_logs,
    "rpc": check_rpc,
    "wal": check_wal,
    "orphan": check_orphan,
    "files": check_files,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--short", action="store_true",
                        help="smaller attacks, for CI")
    parser.add_argument("--only", default="",
                        help="comma-separated checks: " + ",".join(CHECKS))
    parser.add_argument("--figures", help="also write the figures as JSON")
    args = parser.parse_args()
    args.build = os.path.abspath(args.build)
    args.shoal = os.path.join(args.build, "bin", "shoal")
    names = [n for n in args.only.split(",") if n] or list(CHECKS)
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        parser.error(f"unknown checks {unknown}; known: {list(CHECKS)}")
    failed = []
    for name in names:
        root = tempfile.mkdtemp(prefix=f"shoal-security-{name}-")
        print(f"== {name}: {CHECKS[name].__doc__}", flush=True)
        start = time.monotonic()
        try:
            CHECKS[name](args, root)
            print(f"   ok ({time.monotonic() - start:.1f} s)", flush=True)
        except (Broken, subprocess.TimeoutExpired, OSError) as e:
            failed.append(name)
            print(f"   BROKEN: {e}", flush=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    if args.figures:
        with open(args.figures, "w") as f:
            json.dump([{"finding": a, "figure": b, "value": c}
                       for a, b, c in FIGURES], f, indent=1)
    if failed:
        print(f"security: broken: {', '.join(failed)}")
        return 1
    print(f"security: all {len(names)} checks hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
