#!/usr/bin/env bash
# The dashboard in a real browser: headless Chromium (Debian's) opens the
# page of a two-host simulated TPU v5p-16 cluster running a job and a
# `shoal launch` gang, and the page it drew must show both nodes with their
# slice and TPU worker id and a custom resource (accel_x), the job's log
# lines (one of them not UTF-8), the gang's placement group, its ranks on
# both hosts and the log of its first rank; a wrong token gets the sign-in
# page saying so. Then, signed in, the browser opens a page served from
# another port of this host that auto-posts a text/plain form to the Jobs
# API (a cross-site request forgery: the cookie goes along): no job may
# run. The page's own "Stop this job" button must still stop the job
# (tests/browser/cdp.py clicks it). The screenshot is kept in
# <build>/artifacts/dashboard.png.
#
#   dashboard_browser_test.sh <shoal-cli> <artifacts-dir>
set -euo pipefail
shoal=$1
artifacts=$2
browser=$(command -v chromium || command -v chromium-browser || true)
if [[ -z "$browser" ]]; then
  echo "SKIP: no chromium (Debian package chromium; scripts/setup-deps installs it)"
  exit 0
fi
mkdir -p "$artifacts"
work=$(mktemp -d /tmp/shoal-browser.XXXXXX)
attacker=
cleanup() {
  [[ -n "$attacker" ]] && kill "$attacker" 2>/dev/null
  "$shoal" stop --temp-dir "$work/b" >/dev/null 2>&1 || true
  "$shoal" stop --temp-dir "$work/a" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
unset SHOAL_ADDRESS SHOAL_TOKEN

"$shoal" dev fake-tpu --type v5p-16 --worker 0 --root "$work/tpu-0" > "$work/tpu-0.env" 2>/dev/null
"$shoal" dev fake-tpu --type v5p-16 --worker 1 --root "$work/tpu-1" > "$work/tpu-1.env" 2>/dev/null
( . "$work/tpu-0.env"
  "$shoal" start --head --port 0 --dashboard-port 0 --node-ip-address 127.0.0.1 \
    --temp-dir "$work/a" --node-id tpu-host-0 --num-cpus 2 >/dev/null )
session=$work/a/session_latest
address=$(cat "$session/cluster_address")
token=$(cat "$session/token")
dashboard=$(cat "$session/dashboard_address")
( . "$work/tpu-1.env"
  "$shoal" start --address "$address" --token "$token" --node-ip-address 127.0.0.1 \
    --temp-dir "$work/b" --node-id tpu-host-1 --num-cpus 2 \
    --resources '{"accel_x": 4}' >/dev/null )
export SHOAL_TEMP_DIR=$work/a

"$shoal" job submit --no-wait --submission-id browser-job -- \
  sh -c 'printf "caf\351 ok\n"; for i in 1 2 3; do echo "training step $i: loss 0.$((9 - i))"; done; sleep 60' >/dev/null 2>&1
"$shoal" launch --per-host --slice my-tpu -- \
  sh -c 'echo "host $TPU_WORKER_ID ready for step 1"; sleep 60' > "$work/launch.log" 2>&1 &
launcher=$!
for _ in $(seq 100); do
  "$shoal" status --format json | grep -q '"CREATED"' &&
    grep -q "ready for step 1" "$work/launch.log" && break
  sleep 0.1
done

fail=0
check() {  # check WHAT TEXT: the page shows TEXT
  if grep -qF -- "$2" "$work/dom.html"; then
    echo "  ok: $1"
  else
    echo "  FAIL: $1: \"$2\" is not on the page"
    fail=1
  fi
}
url="http://$dashboard/?token=$token"
flags=(--headless --no-sandbox --disable-gpu --disable-dev-shm-usage
       --user-data-dir="$work/profile" --virtual-time-budget=8000)
timeout 120 "$browser" "${flags[@]}" --dump-dom "$url" > "$work/dom.html" 2>"$work/browser.log" || true
timeout 120 "$browser" "${flags[@]}" --window-size=1400,1200 \
  --screenshot="$artifacts/dashboard.png" "$url" >/dev/null 2>>"$work/browser.log" || true
cp "$work/dom.html" "$artifacts/dashboard-dom.html"
echo "the page at $url:"
check "the head node" "tpu-host-0"
check "the second host" "tpu-host-1"
check "the slice name" "my-tpu"
check "a usage bar" 'class="bar"'
check "a custom resource's bar" "accel_x 0/4"
check "the job" "browser-job"
check "the job's log lines" "training step 3: loss 0.6"
check "a stop button for the running job" '<button id="stopjob">Stop this job</button>'
check "a line that is not UTF-8, with U+FFFD" "caf� ok"
check "the gang's placement group" "STRICT_SPREAD"
check "its bundles on both hosts" "(tpu-host-1)"
check "the gang" "per host"
check "its ranks" "Ranks of gang"
check "a rank's log file" "/rank-1.log"
check "the first rank's log" "host 0 ready for step 1"
if [[ ! -s "$artifacts/dashboard.png" ]]; then
  echo "  FAIL: no screenshot"
  fail=1
else
  echo "  screenshot: $artifacts/dashboard.png"
fi
# Without the token the browser gets the sign-in page, not the cluster.
timeout 120 "$browser" "${flags[@]}" --dump-dom "http://$dashboard/" > "$work/login.html" 2>/dev/null || true
if grep -q "needs its token" "$work/login.html" && ! grep -q "tpu-host-0" "$work/login.html"; then
  echo "  ok: without the token, the sign-in page"
else
  echo "  FAIL: without the token the page was not the sign-in page"
  fail=1
fi
# A wrong token is told so.
timeout 120 "$browser" "${flags[@]}" --dump-dom "http://$dashboard/?token=wrong" > "$work/wrong.html" 2>/dev/null || true
if grep -q "not this cluster's" "$work/wrong.html"; then
  echo "  ok: a wrong token is told so"
else
  echo "  FAIL: a wrong token got no message"
  fail=1
fi
# A forged call from another port of this host (SameSite does not separate
# ports), then the page's own Stop button (its confirm() answered yes).
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work/attacker"
cat > "$work/attacker/forge.html" <<EOF
<form id="f" method="POST" enctype="text/plain" action="http://$dashboard/api/jobs/">
<input name='{"entrypoint": "echo forged", "submission_id": "forged-by-form", "x": "' value='"}'>
</form><script>document.getElementById("f").submit()</script>
EOF
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
/usr/bin/python3 -m http.server "$port" --bind 127.0.0.1 --directory "$work/attacker" >/dev/null 2>&1 &
attacker=$!
for _ in $(seq 50); do
  curl -sf "http://127.0.0.1:$port/forge.html" >/dev/null && break
  sleep 0.1
done
click='new Promise(done => {
  window.confirm = () => true;
  const fetched = window.fetch;
  window.fetch = async (...args) => {
    const r = await fetched(...args);
    if ((args[1] || {}).method === "POST") done("stop answered " + r.status);
    return r;
  };
  document.getElementById("stopjob").click();
  setTimeout(() => done("the button sent nothing"), 10000);
})'
timeout 120 /usr/bin/python3 "$here/cdp.py" "$browser" "$work/cdp-profile" \
  "open:$url" "open:http://127.0.0.1:$port/forge.html" \
  "eval:document.body.innerText" "open:http://$dashboard/" "eval:$click" \
  > "$work/cdp.txt" 2>&1 || true
forged=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" \
  "http://$dashboard/api/jobs/forged-by-form")
if [[ "$forged" == 404 ]] && grep -q "not of this dashboard" "$work/cdp.txt"; then
  echo "  ok: a form posted from another port is refused and runs no job"
else
  echo "  FAIL: the forged form's job answers $forged (404 expected); the browser saw:"
  cat "$work/cdp.txt"
  fail=1
fi
if grep -q "stop answered 200" "$work/cdp.txt"; then
  echo "  ok: the page's Stop button stops the job"
else
  echo "  FAIL: the Stop button: $(tail -1 "$work/cdp.txt")"
  fail=1
fi
kill "$attacker" 2>/dev/null || true
attacker=
kill "$launcher" 2>/dev/null || true
wait "$launcher" 2>/dev/null || true
"$shoal" job stop browser-job >/dev/null 2>&1 || true
if [[ $fail -ne 0 ]]; then
  echo "browser log:"; tail -20 "$work/browser.log"
  exit 1
fi
echo "dashboard_browser_test: PASS"
