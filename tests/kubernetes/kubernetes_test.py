#!/usr/bin/python3
"""deploy/kubernetes checked offline (ctest kubernetes_test, label
integration):

  1. manifests: scripts/check-kubernetes passes on deploy/kubernetes and
     fails, naming the file, object and field, on broken copies of it.
  2. entrypoint: deploy/kubernetes/entrypoint.sh with a stand-in for shoal,
     to see the command lines it runs (the token only as --token-file) and
     the worker id it finds without the pod-index label.
  3. pods: the head's pod and the two pods of TPU slice slice-a (a v5p-16),
     run on this host as plain processes: each runs the entrypoint and the
     arguments its manifest gives, with the environment Kubernetes would
     give it (its env list, the downward API, $(VAR) expansion) and what
     GKE adds to a TPU pod, fake TPU chips for its /dev, and only what must
     differ on one host changed (ports, paths, the Service's name; printed).
     Their probes answer, `shoal status` shows 3 nodes with the slice's
     labels, the token shows in no log or argument list, and the kubelet's
     SIGTERM stops everything, leaving no process and no /dev/shm segment.

  kubernetes_test.py --source DIR --build DIR [--part manifests|entrypoint|pods]

It uses its own temp dir (/tmp/shoal-test-k8s-*) and free ports, and never
touches another cluster of this host.
"""

import argparse
import importlib.machinery
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request

FAILURES = []


def check(good, what, detail=""):
    print(("ok    " if good else "FAIL  ") + what + ("" if good or not detail else f": {detail}"),
          flush=True)
    if not good:
        FAILURES.append(what)
    return good


def load_checker(source):
    path = os.path.join(source, "scripts", "check-kubernetes")
    loader = importlib.machinery.SourceFileLoader("check_kubernetes", path)
    spec = importlib.util.spec_from_loader("check_kubernetes", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


# ---- 1. The manifests and the checker ----

# (name, file, text in it, replacement, what the FAIL line must name)
BROKEN = [
    ("replicas not the slice's hosts", "tpu-slice-a-v5p-16.yaml",
     "  replicas: 2\n", "  replicas: 3\n",
     ["tpu-slice-a-v5p-16.yaml", "StatefulSet/slice-a", "spec.replicas", "2 host(s)"]),
    ("google.com/tpu not the chips per host", "tpu-slice-b-v6e-16.yaml",
     "              google.com/tpu: 4\n", "              google.com/tpu: 8\n",
     ["tpu-slice-b-v6e-16.yaml", "StatefulSet/slice-b", "google.com/tpu", "has 4 chips"]),
    ("topology selector of another slice", "tpu-slice-a-v5p-16.yaml",
     "cloud.google.com/gke-tpu-topology: 2x2x2", "cloud.google.com/gke-tpu-topology: 2x2x4",
     ["StatefulSet/slice-a", "spec.replicas", "v5p-32"]),
    ("TPU_TOPOLOGY disagrees with the selector", "tpu-slice-b-v6e-16.yaml",
     "            - name: TPU_TOPOLOGY\n              value: 4x4",
     "            - name: TPU_TOPOLOGY\n              value: 2x8",
     ["StatefulSet/slice-b", "env TPU_TOPOLOGY", "TPU_TOPOLOGY=4x4"]),
    ("a hostname missing", "tpu-slice-a-v5p-16.yaml",
     ",slice-a-1.slice-a.$(POD_NAMESPACE).svc.cluster.local", "",
     ["StatefulSet/slice-a", "env TPU_WORKER_HOSTNAMES"]),
    ("token as an argument", "head.yaml",
     "            - --num-cpus=0\n",
     "            - --num-cpus=0\n            - --token=0123456789abcdef\n",
     ["head.yaml", "StatefulSet/shoal-head", "args", "token"]),
    ("token in a variable", "gpu-workers.yaml",
     "            - name: SHOAL_POD_ROLE\n",
     "            - name: SHOAL_TOKEN\n              valueFrom:\n                secretKeyRef:\n"
     "                  name: shoal-token\n                  key: token\n"
     "            - name: SHOAL_POD_ROLE\n",
     ["gpu-workers.yaml", "Deployment/gpu-workers", "env", "SHOAL_TOKEN"]),
    ("token file readable by all", "tpu-slice-a-v5p-16.yaml",
     "defaultMode: 0400", "defaultMode: 0444",
     ["StatefulSet/slice-a", "defaultMode", "readable"]),
    ("probe on a port not exposed", "head.yaml",
     "            httpGet:\n              path: /\n              port: dashboard",
     "            httpGet:\n              path: /\n              port: 9999",
     ["StatefulSet/shoal-head", "livenessProbe.httpGet.port", "9999"]),
    ("Service selecting no pod", "head.yaml",
     "  type: ClusterIP\n  selector:\n    app.kubernetes.io/name: shoal\n"
     "    app.kubernetes.io/component: head\n",
     "  type: ClusterIP\n  selector:\n    app.kubernetes.io/name: shoal\n"
     "    app.kubernetes.io/component: hed\n",
     ["Service/shoal-head", "spec.selector"]),
    ("Secret neither defined nor external", "gpu-workers.yaml",
     "secretName: shoal-token", "secretName: shoal-tokn",
     ["Deployment/gpu-workers", "volumes token", "Secret shoal-tokn"]),
    ("StatefulSet without its Service", "tpu-slice-a-v5p-16.yaml",
     "  serviceName: slice-a\n", "  serviceName: slice-x\n",
     ["StatefulSet/slice-a", "spec.serviceName", "slice-x"]),
    ("template labels not matching the selector", "tpu-slice-a-v5p-16.yaml",
     "      labels:\n        app.kubernetes.io/name: shoal\n"
     "        app.kubernetes.io/component: tpu-worker\n"
     "        shoal.io/tpu-slice: slice-a\n    spec:",
     "      labels:\n        app.kubernetes.io/name: shoal\n"
     "        app.kubernetes.io/component: tpu-worker\n    spec:",
     ["StatefulSet/slice-a", "spec.template.metadata.labels"]),
    ("a document that is not YAML", "head.yaml",
     "kind: Service\n", "kind: Service\n  bad: [\n", ["head.yaml", "yaml"]),
]


def part_manifests(source, work):
    checker = os.path.join(source, "scripts", "check-kubernetes")
    manifests = os.path.join(source, "deploy", "kubernetes")
    run = subprocess.run([checker, manifests], capture_output=True, text=True, timeout=300)
    print(run.stdout, end="")
    check(run.returncode == 0, "scripts/check-kubernetes passes on deploy/kubernetes",
          f"exit {run.returncode}: {run.stderr.strip()}")
    for name, file, old, new, wanted in BROKEN:
        copy = os.path.join(work, "broken-" + re.sub(r"[^a-z0-9]+", "-", name))
        shutil.copytree(manifests, copy)
        path = os.path.join(copy, file)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if not check(old in text, f"broken copy '{name}': {file} holds the text to break",
                     f"{old!r} is not in it (the manifest changed: update BROKEN)"):
            continue
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(old, new, 1))
        run = subprocess.run([checker, "--no-kubectl", copy], capture_output=True, text=True,
                             timeout=300)
        lines = [line for line in run.stdout.splitlines() if line.startswith("FAIL")]
        named = [line for line in lines if all(w in line for w in wanted)]
        check(run.returncode == 1 and named,
              f"broken copy '{name}': the checker fails naming {' / '.join(wanted)}"
              + (f" ({named[0].strip()})" if named else ""),
              f"exit {run.returncode}; FAIL lines: {lines or run.stdout[-2000:] + run.stderr}")


# ---- 2. The entrypoint with a stand-in for shoal ----

FAKE_SHOAL = """#!/bin/sh
# Records how entrypoint.sh runs shoal: each call's arguments, and the
# TPU_WORKER_ID it was given.
printf '%s|TPU_WORKER_ID=%s\\n' "$*" "${TPU_WORKER_ID:-}" >>"$FAKE_LOG"
exit 0
"""


def part_entrypoint(source, work):
    entry = os.path.join(source, "deploy", "kubernetes", "entrypoint.sh")
    fake = os.path.join(work, "fake-shoal")
    with open(fake, "w", encoding="utf-8") as f:
        f.write(FAKE_SHOAL)
    os.chmod(fake, 0o755)
    token = os.path.join(work, "fake-token")
    with open(token, "w", encoding="utf-8") as f:
        f.write("fedcba9876543210fedcba9876543210\n")
    os.chmod(token, 0o600)
    log = os.path.join(work, "fake-shoal.log")
    base = {"PATH": "/usr/bin:/bin", "SHOAL_BIN": fake, "FAKE_LOG": log,
            "SHOAL_POD_TOKEN_FILE": token, "SHOAL_POD_IP": "10.1.2.3"}

    def run(env, *args):
        if os.path.exists(log):
            os.unlink(log)
        done = subprocess.run(["/bin/sh", entry, *args], env=dict(base, **env),
                              capture_output=True, text=True, timeout=60)
        if not os.path.exists(log):
            return done, []
        with open(log, encoding="utf-8") as f:
            return done, f.read().splitlines()

    done, calls = run({"SHOAL_POD_ROLE": "head", "SHOAL_TEMP_DIR": os.path.join(work, "e1")},
                      "--num-cpus=0")
    check(done.returncode == 0 and len(calls) == 1 and calls[0].startswith(
        "start --head --port 6379 --dashboard-host 0.0.0.0 --dashboard-port 8265 "
        f"--node-ip-address 10.1.2.3 --block --token-file {token} --num-cpus=0"),
        "entrypoint (head): shoal start --head --block with the token as --token-file only",
        f"exit {done.returncode}, {done.stderr.strip()}, calls {calls}")
    leaks = [line for line in calls + [done.stdout, done.stderr] if "fedcba98" in line]
    check(not leaks, "entrypoint (head): the token is in no argument and no log", str(leaks))
    worker = {"SHOAL_POD_ROLE": "worker", "SHOAL_POD_HEAD_ADDRESS": "shoal-head.ns.svc:6379",
              "SHOAL_POD_METRICS_PORT": "8080", "TPU_ACCELERATOR_TYPE": "v5p-16",
              "TPU_WORKER_HOSTNAMES": "slice-a-0.slice-a.ns.svc.cluster.local,"
                                      "slice-a-1.slice-a.ns.svc.cluster.local",
              "HOSTNAME": "slice-a-1", "TPU_WORKER_ID": "",
              "SHOAL_TEMP_DIR": os.path.join(work, "e2")}
    done, calls = run(worker)
    check(done.returncode == 0 and len(calls) == 2
          and calls[0].startswith(f"status --address shoal-head.ns.svc:6379 --token-file {token}")
          and calls[1].startswith("start --address shoal-head.ns.svc:6379 --metrics-port 8080 "
                                  f"--node-ip-address 10.1.2.3 --block --token-file {token}"),
          "entrypoint (worker): waits for the head with shoal status, then joins it",
          f"exit {done.returncode}, {done.stderr.strip()}, calls {calls}")
    check(calls and calls[-1].endswith("|TPU_WORKER_ID=1"),
          "entrypoint (worker): without the pod-index label, the worker id is the pod's place "
          "in TPU_WORKER_HOSTNAMES (slice-a-1: 1)", f"calls {calls}")
    done, _ = run(dict(worker, SHOAL_POD_TOKEN_FILE=os.path.join(work, "no-such-token")))
    check(done.returncode != 0 and "cannot read the cluster token" in done.stderr,
          "entrypoint: a missing token file stops the start, saying where the Secret goes",
          done.stderr.strip())
    done, _ = run({"SHOAL_POD_ROLE": "hed"})
    check(done.returncode != 0 and "SHOAL_POD_ROLE" in done.stderr,
          "entrypoint: a wrong SHOAL_POD_ROLE is refused", done.stderr.strip())


# ---- 3. The pods as processes ----

# What GKE adds to the environment of a v5p-16 TPU pod besides the slice
# identity that the manifest sets (the values GKE gives every host of a
# 2x2x2 slice).
GKE_TPU_ENV_V5P_16 = {
    "TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1",
    "TPU_HOST_BOUNDS": "1,1,2",
    "TPU_SKIP_MDS_QUERY": "true",
    "TPU_TOPOLOGY_WRAP": "false,false,false",
    "TPU_TOPOLOGY_ALT": "false",
    "TPU_RUNTIME_METRICS_PORTS": "8431,8432,8433,8434",
}
SMALL_STORE = 64 << 20  # three "pods" share this host's /dev/shm


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Pod:
    """One pod of a workload, run as a process of this host."""

    def __init__(self, ck, workload, ordinal, root, source, shoal, namespace="default"):
        self.workload = workload
        self.name = f"{workload.name}-{ordinal}"
        self.dir = os.path.join(root, self.name)
        os.makedirs(self.dir)
        container = workload.pod_spec()["containers"][0]
        labels = dict(workload.template_labels())
        labels[ck.POD_INDEX_LABEL] = str(ordinal)
        labels["statefulset.kubernetes.io/pod-name"] = self.name
        fields = {"metadata.name": self.name, "metadata.namespace": namespace,
                  "status.podIP": "127.0.0.1", "status.hostIP": "127.0.0.1"}
        for key, value in labels.items():
            fields[f"metadata.labels['{key}']"] = value
        requests = (container.get("resources") or {}).get("requests") or {}
        if "cpu" in requests:
            fields["requests.cpu"] = ck.cpu_quantity(requests["cpu"])
        env, missing = ck.container_env(container, fields)
        check(not missing, f"{self.name}: every $(VAR) of its env resolves", str(missing))
        self.manifest_env = dict(env)
        self.changed = {}  # what differs from the pod on this host, and why

        def change(name, value, why):
            self.changed[name] = (env.get(name), value, why)
            env[name] = value

        for name in ("SHOAL_POD_TOKEN_FILE", "SHOAL_TEMP_DIR"):
            if name in env:
                change(name, self.dir + env[name], "the pod's file system, under its folder here")
        self.token_file = env.get("SHOAL_POD_TOKEN_FILE")
        self.temp_dir = env.get("SHOAL_TEMP_DIR")
        if env.get("SHOAL_POD_ROLE") == "head":
            self.port = free_port()
            self.dashboard_port = free_port()
            change("SHOAL_POD_PORT", str(self.port), "a free port: pods share this host")
            change("SHOAL_POD_DASHBOARD_PORT", str(self.dashboard_port), "a free port")
            change("SHOAL_POD_DASHBOARD_HOST", "127.0.0.1", "not every interface of this host")
        if "SHOAL_POD_METRICS_PORT" in env:
            self.metrics_port = free_port()
            change("SHOAL_POD_METRICS_PORT", str(self.metrics_port), "a free port")
        # The pod's /dev: fake TPU chips where it asks for google.com/tpu.
        self.device_root = os.path.join(self.dir, "dev-root")
        os.makedirs(self.device_root)
        chips = ((container.get("resources") or {}).get("limits") or {}).get("google.com/tpu")
        if chips:
            made = subprocess.run(
                [shoal, "dev", "fake-tpu", "--type", env["TPU_ACCELERATOR_TYPE"],
                 "--worker", str(ordinal), "--root", self.device_root],
                capture_output=True, text=True, timeout=60)
            check(made.returncode == 0, f"{self.name}: fake TPU chips made", made.stderr)
            for key, value in GKE_TPU_ENV_V5P_16.items():
                env.setdefault(key, value)
        env.update({
            "PATH": "/usr/bin:/bin", "HOME": self.dir, "HOSTNAME": self.name,
            "SHOAL_BIN": shoal,  # the image's /opt/shoal/bin/shoal
            "SHOAL_DEVICE_ROOT": self.device_root,
            "SHOAL_LIBTPU_LOCKFILE": os.path.join(self.dir, "libtpu_lockfile"),
        })
        self.env = env
        command = container.get("command") or []
        check(command and os.path.basename(command[0]) == "entrypoint.sh",
              f"{self.name}: runs entrypoint.sh", str(command))
        args = [ck.expand(a, env)[0] for a in command[1:] + (container.get("args") or [])]
        args = [f"--object-store-memory={SMALL_STORE}" if a.startswith("--object-store-memory=")
                else a for a in args]
        self.argv = [os.path.join(source, "deploy", "kubernetes", "entrypoint.sh")] + args
        self.process = None

    def write_token(self, token):
        os.makedirs(os.path.dirname(self.token_file), exist_ok=True)
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")

    def describe(self):
        print(f"== pod {self.name}: {' '.join(self.argv[1:]) or '(no args)'}")
        for key in sorted(k for k in self.env if k.startswith(("TPU_", "SHOAL_POD_ROLE"))):
            print(f"     {key}={self.env[key]}")
        for name, (was, now, why) in sorted(self.changed.items()):
            print(f"     changed here: {name}={now} (manifest: {was}; {why})")

    def start(self):
        self.log_out = open(os.path.join(self.dir, "container.stdout"), "w+")
        self.log_err = open(os.path.join(self.dir, "container.stderr"), "w+")
        self.process = subprocess.Popen(self.argv, env=self.env, stdout=self.log_out,
                                        stderr=self.log_err, cwd=self.dir,
                                        start_new_session=True)

    def probe_ready(self):
        """The readiness probe, exec'd in the pod."""
        return subprocess.run(self.argv[:1] + ["ready"], env=self.env, capture_output=True,
                              text=True, timeout=30)

    def logs(self):
        text = ""
        for f in (self.log_out, self.log_err):
            f.flush()
            f.seek(0)
            text += f.read()
        return text

    def node_id(self):
        try:
            with open(os.path.join(self.temp_dir, "session_latest", "node_id")) as f:
                return f.read().strip()
        except OSError:
            return ""

    def stop(self, grace_s=30):
        """The kubelet: SIGTERM to the container's first process, SIGKILL to
        all of it after the grace period. Whether it ended in time."""
        if self.process is None or self.process.poll() is not None:
            return True
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(grace_s)
            return True
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
            return False


def tcp_open(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def our_processes(root):
    """Processes whose arguments or environment mention `root`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        texts = []
        for name in ("cmdline", "environ"):
            try:
                with open(f"/proc/{pid}/{name}", "rb") as f:
                    texts.append(f.read().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                pass
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except (OSError, IndexError):
            continue
        if any(root in t for t in texts):
            found.append(f"pid {pid}: {texts[0][:200] if texts else '?'}")
    return found


def processes_with(text):
    """Processes whose argument list holds `text`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(pid)
        except OSError:
            pass
    return found


def part_pods(source, build, work):
    ck = load_checker(source)
    shoal = os.path.join(build, "bin", "shoal")
    objects, _, errors = ck.load([os.path.join(source, "deploy", "kubernetes")])
    check(not errors, "the manifests load", str(errors))
    workloads = {o.name: o for o in objects if o.kind in ck.WORKLOADS}
    head_set = next((o for o in workloads.values() if any(
        ck.container_env(c)[0].get("SHOAL_POD_ROLE") == "head"
        for c in o.pod_spec().get("containers") or [])), None)
    slice_set = next((o for o in workloads.values() if any(
        ck.container_env(c)[0].get("TPU_ACCELERATOR_TYPE") == "v5p-16"
        for c in o.pod_spec().get("containers") or [])), None)
    if not check(head_set is not None and slice_set is not None,
                 "the manifests hold a head and a v5p-16 slice"):
        return
    hosts = slice_set.data["spec"]["replicas"]
    check(hosts == 2, f"{slice_set.name}: 2 replicas", str(hosts))
    token = os.urandom(16).hex()
    pods = [Pod(ck, head_set, 0, work, source, shoal)]
    pods += [Pod(ck, slice_set, i, work, source, shoal) for i in range(hosts)]
    head = pods[0]
    for pod in pods[1:]:
        pod.changed["SHOAL_POD_HEAD_ADDRESS"] = (
            pod.env["SHOAL_POD_HEAD_ADDRESS"], f"localhost:{head.port}",
            "the head Service's name, on this host")
        pod.env["SHOAL_POD_HEAD_ADDRESS"] = f"localhost:{head.port}"
    for pod in pods:
        pod.write_token(token)
        pod.describe()
    node_ids = {}
    try:
        # Like a StatefulSet with podManagementPolicy Parallel (the head's
        # and the slice's at once): the workers wait for the head.
        for pod in reversed(pods):
            pod.start()
        deadline = time.monotonic() + 90
        ready = set()
        while time.monotonic() < deadline and len(ready) < len(pods):
            for pod in pods:
                if pod.name not in ready and pod.probe_ready().returncode == 0:
                    ready.add(pod.name)
                if pod.process.poll() is not None:
                    deadline = 0
            time.sleep(0.5)
        for pod in pods:
            ended = pod.process.poll()
            check(pod.name in ready, f"{pod.name}: readiness probe (entrypoint.sh ready) passes",
                  f"process {'runs' if ended is None else f'ended with {ended}'}; "
                  f"log: {pod.logs()[-3000:]}; probe: {pod.probe_ready().stderr.strip()}")
            node_ids[pod.name] = pod.node_id()
        check(tcp_open(head.port), f"{head.name}: startup probe, tcpSocket rpc ({head.port})")
        try:
            url = f"http://127.0.0.1:{head.dashboard_port}/"
            with urllib.request.urlopen(url, timeout=5) as r:
                code = r.status
        except OSError as e:
            code = str(e)
        check(code == 200, f"{head.name}: liveness probe, httpGet / on dashboard "
                           f"({head.dashboard_port}) answers 200 without the token", str(code))
        for pod in pods[1:]:
            check(tcp_open(pod.metrics_port),
                  f"{pod.name}: startup/liveness probe, tcpSocket metrics ({pod.metrics_port})")

        status = subprocess.run(
            [shoal, "status", "--format", "json", "--address", f"localhost:{head.port}",
             "--token-file", head.token_file],
            capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
        if check(status.returncode == 0, "shoal status --address <head> --token-file answers",
                 status.stderr):
            nodes = [n for n in json.loads(status.stdout)["nodes"] if n.get("state") == "ALIVE"]
            check(len(nodes) == 3, f"the cluster has 3 ALIVE nodes ({len(nodes)})",
                  json.dumps(nodes)[:2000])
            by_id = {n["node_id"]: n for n in nodes}
            head_node = by_id.get(node_ids[head.name], {})
            check(head_node.get("is_head_node") is True,
                  f"{head.name}'s node is the head's ({node_ids[head.name]})")
            for worker, pod in enumerate(pods[1:]):
                node = by_id.get(node_ids[pod.name], {})
                labels = node.get("labels", {})
                want = {"shoal.io/tpu-slice-name": slice_set.name,
                        "shoal.io/tpu-worker-id": str(worker),
                        "shoal.io/tpu-pod-type": "v5p-16",
                        "shoal.io/tpu-topology": "2x2x2",
                        "shoal.io/tpu-num-workers": "2"}
                got = {k: labels.get(k) for k in want}
                check(got == want, f"{pod.name}'s node has the slice's labels {want}", str(labels))
                check(node.get("total", {}).get("TPU") == 4, f"{pod.name}'s node has TPU 4",
                      str(node.get("total")))
                check(node.get("total", {}).get(slice_set.name) == 1,
                      f"{pod.name}'s node has the slice's resource {slice_set.name}: 1",
                      str(node.get("total")))
        # The token: in no container log, no process's arguments.
        for pod in pods:
            check(token not in pod.logs(), f"{pod.name}: the token is not in the container's log")
            out = os.path.join(pod.temp_dir, "start.out")
            mode = stat.S_IMODE(os.stat(out).st_mode) if os.path.exists(out) else None
            check(mode == 0o600,
                  f"{pod.name}: what shoal start printed is in start.out, mode 0600",
                  str(mode))
        check(not processes_with(token), "the token is in no process's arguments",
              str(processes_with(token)))
    finally:
        # kubectl delete: every pod gets its SIGTERM at once.
        for pod in pods:
            if pod.process is not None and pod.process.poll() is None:
                pod.process.send_signal(signal.SIGTERM)
        for pod in pods:
            in_time = pod.stop()
            check(in_time and pod.process is not None and pod.process.returncode == 0,
                  f"{pod.name}: SIGTERM stops it within the grace period, exit 0",
                  f"in time {in_time}, exit {pod.process.returncode if pod.process else None}; "
                  f"log: {pod.logs()[-2000:] if pod.process else ''}")
        # What is left: processes of ours, and our nodes' segments.
        time.sleep(0.5)
        left = our_processes(work)
        check(not left, "no process of the pods is left", "; ".join(left))
        for pid in [int(line.split()[1].rstrip(":")) for line in left]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        segments = [s for s in os.listdir("/dev/shm") for node in node_ids.values()
                    if node and s.startswith(f"shoal-node-{node}-")]
        check(not segments, "no /dev/shm segment of the pods' nodes is left", str(segments))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True)
    parser.add_argument("--build", required=True)
    parser.add_argument("--part", choices=["manifests", "entrypoint", "pods"], action="append")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = parser.parse_args()
    parts = args.part or ["manifests", "entrypoint", "pods"]
    source = os.path.abspath(args.source)
    build = os.path.abspath(args.build)
    work = tempfile.mkdtemp(prefix="shoal-test-k8s-", dir="/tmp")
    print(f"== temp dir {work}")
    try:
        if "manifests" in parts:
            print("== 1. the manifests")
            part_manifests(source, os.path.join(work, "manifests"))
        if "entrypoint" in parts:
            print("== 2. the entrypoint, with a stand-in for shoal")
            os.makedirs(os.path.join(work, "entrypoint"))
            part_entrypoint(source, os.path.join(work, "entrypoint"))
        if "pods" in parts:
            print("== 3. a head and a v5p-16 slice's two pods, as processes")
            os.makedirs(os.path.join(work, "pods"))
            part_pods(source, build, os.path.join(work, "pods"))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if FAILURES:
        print(f"kubernetes_test: {len(FAILURES)} check(s) FAILED:")
        for f in FAILURES:
            print(f"  {f}")
        return 1
    print("kubernetes_test: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
