#!/bin/sh
# The command of every Shoal container in deploy/kubernetes: starts this
# pod's part of the cluster (the head and its node agent, or a node agent
# that joins the head) in the foreground, as the process the kubelet
# watches and stops.
#
#   entrypoint.sh [SHOAL START FLAGS...]  start; the flags go to `shoal start`
#   entrypoint.sh ready                   exit 0 when this pod's part is up
#                                         (the readiness probe)
#
# Settings, from the pod's environment (the manifests set them):
#   SHOAL_POD_ROLE            head or worker (required)
#   SHOAL_POD_TOKEN_FILE      the cluster token: a file of the Secret's
#                             volume (default /etc/shoal/token/token). The
#                             token reaches `shoal start` through
#                             --token-file only: never an argument, never a
#                             variable of the pod
#   SHOAL_POD_IP              the address to listen on and advertise: the
#                             pod's IP (downward API status.podIP); empty:
#                             this host's primary address
#   SHOAL_POD_PORT            head: the RPC port (default 6379)
#   SHOAL_POD_DASHBOARD_HOST  head: the dashboard's address (default 0.0.0.0,
#                             for the Service and the kubelet's probe)
#   SHOAL_POD_DASHBOARD_PORT  head: the dashboard's port (default 8265)
#   SHOAL_POD_METRICS_PORT    this node's /metrics port (default none)
#   SHOAL_POD_HEAD_ADDRESS    worker: the head, HOST:PORT (its Service's DNS
#                             name)
#   SHOAL_POD_HEAD_WAIT_S     worker: how long to wait for the head to answer
#                             before giving up (default 600)
#   SHOAL_TEMP_DIR            Shoal's own: the parent of the session folder
#                             (default /tmp/shoal)
#   SHOAL_BIN                 the shoal binary (default: shoal on PATH)
#   TPU_*                     read by the node agent: the slice's identity
#                             (docs/design/kubernetes.md)
#
# What `shoal start` prints names the token (it prints the command that
# joins another host), so it goes to start.out in the temp dir (0600), not
# to the container's log; errors still go to the log.
set -eu

shoal=${SHOAL_BIN:-shoal}
role=${SHOAL_POD_ROLE:-}
token_file=${SHOAL_POD_TOKEN_FILE:-/etc/shoal/token/token}
temp_dir=${SHOAL_TEMP_DIR:-/tmp/shoal}
export SHOAL_TEMP_DIR="$temp_dir"

say() { echo "shoal-entrypoint: $*" >&2; }
fail() {
  say "$*"
  exit 1
}

case $role in
  head | worker) ;;
  *) fail "SHOAL_POD_ROLE is '${role}': set it to head or worker" ;;
esac

# Without TPU_WORKER_ID (a StatefulSet before Kubernetes 1.28 has no
# apps.kubernetes.io/pod-index label for the downward API), this pod's
# place among TPU_WORKER_HOSTNAMES is its worker id.
if [ -n "${TPU_WORKER_HOSTNAMES:-}" ] && [ -z "${TPU_WORKER_ID:-}" ]; then
  # The container runtime sets HOSTNAME to the pod's name.
  # shellcheck disable=SC3028
  self=${HOSTNAME:-$(cat /proc/sys/kernel/hostname 2>/dev/null || true)}
  index=0
  rest="$TPU_WORKER_HOSTNAMES,"
  while [ -n "$rest" ]; do
    entry=${rest%%,*}
    rest=${rest#*,}
    if [ "${entry%%.*}" = "$self" ]; then
      export TPU_WORKER_ID="$index"
      break
    fi
    index=$((index + 1))
  done
fi

# `ready`: whether this pod's part of the cluster is up, for the readiness
# probe. Both find the cluster and its token through the session folder
# that the start below made in the temp dir.
if [ "${1:-}" = ready ]; then
  if [ "$role" = head ]; then
    exec "$shoal" status >/dev/null
  fi
  node_id=$(cat "$temp_dir/session_latest/node_id" 2>/dev/null) ||
    fail "no node agent started from $temp_dir yet"
  nodes=$("$shoal" list nodes --format json --filter "node_id=$node_id" \
    --filter state=ALIVE) || exit 1
  case $nodes in
    *"\"$node_id\""*) exit 0 ;;
    *) fail "node $node_id is not ALIVE in the head's table" ;;
  esac
fi

[ -r "$token_file" ] ||
  fail "cannot read the cluster token at $token_file: mount the Secret there (see deploy/kubernetes/head.yaml)"
[ -s "$token_file" ] || fail "the cluster token file $token_file is empty"

set -- --block --token-file "$token_file" "$@"
[ -z "${SHOAL_POD_IP:-}" ] || set -- --node-ip-address "$SHOAL_POD_IP" "$@"
[ -z "${SHOAL_POD_METRICS_PORT:-}" ] ||
  set -- --metrics-port "$SHOAL_POD_METRICS_PORT" "$@"

mkdir -p "$temp_dir"
umask 077
out="$temp_dir/start.out"

if [ "$role" = head ]; then
  port=${SHOAL_POD_PORT:-6379}
  say "head on port $port, dashboard on ${SHOAL_POD_DASHBOARD_HOST:-0.0.0.0}:${SHOAL_POD_DASHBOARD_PORT:-8265}; temp dir $temp_dir (what shoal start prints: $out)"
  exec "$shoal" start --head --port "$port" \
    --dashboard-host "${SHOAL_POD_DASHBOARD_HOST:-0.0.0.0}" \
    --dashboard-port "${SHOAL_POD_DASHBOARD_PORT:-8265}" "$@" >"$out"
fi

head=${SHOAL_POD_HEAD_ADDRESS:-}
[ -n "$head" ] || fail "SHOAL_POD_HEAD_ADDRESS is empty: set it to the head Service's HOST:PORT"
# The head's pod may start after this one, and its Service's name resolves
# only once it is ready: wait for it rather than fail into a restart loop.
wait_s=${SHOAL_POD_HEAD_WAIT_S:-600}
waited=0
until "$shoal" status --address "$head" --token-file "$token_file" \
  >/dev/null 2>"$temp_dir/head-wait.err"; do
  if [ "$waited" -ge "$wait_s" ]; then
    cat "$temp_dir/head-wait.err" >&2
    fail "the head at $head did not answer in ${wait_s}s"
  fi
  [ "$waited" -gt 0 ] || say "waiting for the head at $head"
  sleep 1
  waited=$((waited + 1))
done
rm -f "$temp_dir/head-wait.err"
say "worker joining $head${TPU_NAME:+ (TPU slice $TPU_NAME, worker ${TPU_WORKER_ID:-?})}; temp dir $temp_dir (what shoal start prints: $out)"
exec "$shoal" start --address "$head" "$@" >"$out"
