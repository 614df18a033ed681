#!/usr/bin/env bash
# The README tier: runs the README's command blocks the way a person would.
#
#   readme_test.sh <shoal-source-dir> <shoal-build-dir>
#
# The commands come from README.md itself: a fenced block right after a
# `<!-- readme-test: NAME -->` comment is block NAME.
#   one-host  a head and a second node on this host, status, launches, a
#             program with no address, stop: run line by line, in order
#   temp-dir  a head started with --temp-dir: run, then every hint it prints
#             is pasted as printed
#   cpp       the C++ API example: built out of tree and run against the
#             one-host cluster through the head's "SHOAL_ADDRESS=..." hint
#   cmake     its CMakeLists.txt (`find_package(shoal)` with
#             -Dshoal_DIR=<shoal-build-dir>)
#   python    the Python example, typed in the source folder (its build/
#             becomes <shoal-build-dir>/) with no cluster to find: it starts
#             its own and leaves nothing running
# Every line of one-host must be one this script knows how to check, and
# every step it checks must have its line, so README and tier cannot drift.
#
# Each command runs under `env -i` with only PATH (the system PATH with the
# build's bin/ first, as for a user who put the build on PATH), HOME and
# SHOAL_TEMP_DIR (a fresh folder, so that nothing touches /tmp/shoal): no
# SHOAL_ADDRESS, no SHOAL_TOKEN. The README's fixed ports (6379, 6380) may be
# taken on this host, so each becomes a free port; its folders under /tmp
# become fresh folders. Nothing else is changed in what is typed, except that
# the join command is the one the head printed, plus --temp-dir (the README
# line says so: a second node on one host needs a temp dir of its own).
#
# Every step prints `step: ...`; a failing one prints what was typed, what
# came back and the exit code, and the run goes on where it can. The run ends
# with `readme tier: N passed, M failed` and exits 1 if any step failed.
# Whatever happens, every temp dir it made is stopped and removed.
#
# REQUIRES: the build is complete (shoal, hello_tasks); python3, cmake and a
# C++ compiler on the system PATH.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 <shoal-source-dir> <shoal-build-dir>" >&2
  exit 2
fi
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
readme="$src/README.md"

system_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
user_path="$build/bin:$system_path"
user_home=${HOME:-/root}

work=$(mktemp -d "${TMPDIR:-/tmp}/shoal-readme.XXXXXX")
# Folders a run may start Shoal processes from; all stopped on exit.
t1="$work/t1"          # SHOAL_TEMP_DIR of the one-host cluster
node2="$work/node2"    # the second node's --temp-dir (/tmp/shoal-node2)
node3="$work/node3"    # a node joining the one-host head without a token
t2="$work/t2"          # SHOAL_TEMP_DIR while the temp-dir head runs
cluster_b="$work/b"    # the temp-dir head's --temp-dir (/tmp/shoal-b)
cluster_b2="$work/b2"  # a node joining the temp-dir head without a token
app="$work/app"        # the C++ example, out of tree
t3="$work/t3"          # SHOAL_TEMP_DIR of the Python example
t4="$work/t4"          # SHOAL_TEMP_DIR of the C++ example with no cluster
temp_dirs=("$node3" "$node2" "$t1" "$cluster_b2" "$cluster_b" "$t2" "$t3" "$t4")
mkdir -p "$t1" "$t2" "$t4" "$app"

passed=0
failed=0
failures=()

# ---- running what a person types ----

# type_in DIR TEMP_DIR LIMIT_S COMMAND: runs COMMAND with bash -c in DIR,
# under env -i with the user's PATH, HOME and SHOAL_TEMP_DIR=TEMP_DIR, for at
# most LIMIT_S seconds. Sets typed, out (stdout and stderr) and rc.
type_in() {
  local dir=$1 temp=$2 limit=$3
  typed=$4
  echo "  \$ $typed"
  set +e
  out=$(cd "$dir" && timeout -k 5 "$limit" env -i PATH="$user_path" \
    HOME="$user_home" SHOAL_TEMP_DIR="$temp" bash -c "$typed" 2>&1 </dev/null)
  rc=$?
  set -e
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    out+=$'\n'"(killed: still running after ${limit}s)"
  fi
}

# ---- results ----

step() { echo; echo "step: $*"; current_step="$*"; }

pass() {
  passed=$((passed + 1))
  echo "  PASS${1:+: $1}"
}

# fail WHY: the current step failed; prints the last command and its output.
fail() {
  failed=$((failed + 1))
  failures+=("$current_step: $1")
  echo "  FAIL: $1"
  if [[ -n "${typed:-}" ]]; then
    echo "    typed:     $typed"
    echo "    exit code: $rc"
    echo "    came back:"
    if [[ -z "$out" ]]; then
      echo "      (nothing)"
    else
      tail -n 40 <<<"$out" | sed 's/^/      | /'
    fi
  fi
}

# fail_plain WHY: a failure that is not about the last command.
fail_plain() {
  local saved=${typed:-}
  typed=""
  fail "$1"
  typed=$saved
}

summary() {
  echo
  if [[ $failed -gt 0 ]]; then
    echo "failed steps:"
    local f
    for f in "${failures[@]}"; do echo "  - $f"; done
  fi
  echo "readme tier: $passed passed, $failed failed"
}

# ---- processes and cleanup ----

# Pids of processes started from DIR: a command line naming DIR/..., or
# SHOAL_TEMP_DIR=DIR in the environment (workers inherit their agent's).
pids_from() {
  local dir=$1 files f p
  # Read in full first, so that the greps (whose own command lines name DIR)
  # are gone before the check below.
  files=$(
    grep -lsaF -- "$dir/" /proc/[0-9]*/cmdline
    grep -lszxF -- "SHOAL_TEMP_DIR=$dir" /proc/[0-9]*/environ
  ) || true
  for f in $files; do
    p=${f#/proc/}
    p=${p%%/*}
    [[ $p == "$$" || ! -e /proc/$p ]] && continue
    echo "$p"
  done | sort -un
}

# Waits up to 15 s for every process started from the given dirs to end;
# prints those left (pid and command line).
leftovers_after_wait() {
  local i d p left
  for ((i = 0; i < 30; i++)); do
    left=""
    for d in "$@"; do
      for p in $(pids_from "$d"); do
        left+="$p $(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline")"$'\n'
      done
    done
    [[ -z "$left" ]] && return 0
    sleep 0.5
  done
  printf '%s' "$left"
}

# Passes, or fails saying $2 when processes were left ($1, as
# leftovers_after_wait printed them).
pass_unless_left() {
  if [[ -n "$1" ]]; then
    out+=$'\n'"still running 15 s later:"$'\n'"$1"
    fail "$2"
  else
    pass
  fi
}

cleanup() {
  local d p
  set +e
  for d in "${temp_dirs[@]}"; do
    [[ -d "$d" ]] || continue
    timeout -k 5 30 env -i PATH="$user_path" HOME="$user_home" \
      shoal stop --temp-dir "$d" >/dev/null 2>&1
  done
  # Anything `shoal stop` left (processes this run started) is killed.
  for d in "${temp_dirs[@]}"; do
    for p in $(pids_from "$d"); do kill -9 "$p" 2>/dev/null; done
  done
  rm -rf "$work"
}
trap cleanup EXIT

# ---- the README's blocks ----

# block NAME: the lines of the fenced block after <!-- readme-test: NAME -->.
block() {
  awk -v name="$1" '
    $0 == "<!-- readme-test: " name " -->" { marked++; want = 1; next }
    want && /^```/ { want = 0; inside = 1; next }
    want && NF { exit 3 }  # the marker is not followed by a fence
    inside && /^```/ { inside = 0; next }
    inside { print }
    END { if (marked != 1) exit 4 }
  ' "$readme"
}

# The README's fixed ports and folders, and what this run uses instead.
port_a=$(env -i PATH="$system_path" python3 -c \
  'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
port_b=$(env -i PATH="$system_path" python3 -c \
  'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
substitute() {
  local line=$1
  line=${line//6379/$port_a}
  line=${line//6380/$port_b}
  line=${line//\/tmp\/shoal-node2/$node2}
  line=${line//\/tmp\/shoal-b/$cluster_b}
  printf '%s' "$line"
}

# Without its trailing comment (two or more spaces, then #).
strip_comment() { sed -E 's/ {2,}#.*$//; s/[[:space:]]+$//' <<<"$1"; }

# hint NAME: the command the head printed after "To NAME:".
hint() { sed -nE "s/^To $1:[[:space:]]+//p" <<<"$2" | head -n 1; }

# The node ids `shoal status` lists as alive.
alive_nodes() { awk '/^Active:/ { a = 1; next } /^Dead:/ { a = 0 } a && / ALIVE/ { print $1 }' <<<"$1"; }

# Session folders under a temp dir.
sessions() { ls -d "$1"/session_2* 2>/dev/null | sort || true; }

# check_token_note HEAD_OUTPUT HEAD_ADDRESS TEMP_DIR JOIN_DIR: where the head
# says that on this host the token is found automatically, a node joins from
# JOIN_DIR with no token, and then stops as its own hint says.
# The head's 'To see the cluster:' hint (from its output $1), typed with
# SHOAL_TEMP_DIR=$2, must show the cluster at $3.
check_status_hint() {
  local h
  h=$(hint "see the cluster" "$1")
  if [[ -z "$h" ]]; then
    fail_plain "the head printed no 'To see the cluster:' line"
    return
  fi
  type_in "$work" "$2" 30 "$h"
  if [[ $rc -ne 0 ]] || ! grep -qF "Head: $3" <<<"$out"; then
    fail "it does not show the cluster at $3"
  else
    pass
  fi
}

check_token_note() {
  local head_out=$1 address=$2 temp=$3 join_dir=$4 stop_hint left
  step "the head's note 'on this host the token is found automatically' holds"
  if ! grep -q "on this host the token is found automatically" <<<"$head_out"; then
    pass "(this head does not say so)"
    return
  fi
  type_in "$work" "$temp" 60 "shoal start --address=$address --temp-dir $join_dir"
  if [[ $rc -ne 0 ]] || ! grep -q "joined $address" <<<"$out"; then
    fail "a node on this host could not join without --token"
    return
  fi
  pass
  step "the joined node's hint 'To stop' works as printed"
  stop_hint=$(hint "stop" "$out")
  if [[ -z "$stop_hint" ]]; then
    fail "the node printed no 'To stop:' line"
    return
  fi
  type_in "$work" "$temp" 60 "$stop_hint"
  left=$(leftovers_after_wait "$join_dir")
  if [[ $rc -ne 0 || -n "$left" ]]; then
    out+=$'\n'"still running 15 s later:"$'\n'"$left"
    fail "the node is still running"
  else
    pass
  fi
}

echo "== README:       $readme"
echo "== build:        $build"
echo "== scratch dir:  $work"
echo "== as typed by:  env -i PATH=$user_path HOME=$user_home SHOAL_TEMP_DIR=<fresh>"
echo "== ports:        6379 -> $port_a, 6380 -> $port_b"

step "the README has the blocks this tier runs"
missing=""
for name in one-host temp-dir cpp cmake python; do
  if ! block "$name" >/dev/null; then
    missing+=" $name"
  fi
done
if [[ -n "$missing" ]]; then
  fail_plain "no fenced block after <!-- readme-test: NAME --> (exactly once) for:$missing"
  summary
  exit 1
fi
pass "one-host, temp-dir, cpp, cmake, python"

# ---- the C++ example, out of tree (built first: it takes longest) ----

app_built=0
step "the C++ API example includes what it uses"
block cpp >"$app/main.cc"
block cmake >"$app/CMakeLists.txt"
lint=""
# A header that pulls <iostream> in today may not tomorrow or elsewhere.
if grep -qE 'std::(cout|cerr)' "$app/main.cc" && ! grep -qF '#include <iostream>' "$app/main.cc"; then
  lint+="uses std::cout without #include <iostream>; "
fi
if grep -qE 'std::span' "$app/main.cc" && ! grep -qF '#include <span>' "$app/main.cc"; then
  lint+="uses std::span without #include <span>; "
fi
if [[ -z "$lint" ]]; then
  pass
else
  fail_plain "README's C++ block (## The C++ API) ${lint%; }"
fi

step "the C++ API example builds out of tree against the build tree"
type_in "$app" "$t1" 300 "cmake -S . -B build -Dshoal_DIR=$build -DCMAKE_BUILD_TYPE=RelWithDebInfo"
if [[ $rc -ne 0 ]]; then
  fail "cmake could not configure the README's CMakeLists.txt"
else
  type_in "$app" "$t1" 400 "cmake --build build"
  if [[ $rc -ne 0 ]]; then
    fail "the README's C++ example does not build"
  elif [[ ! -x "$app/build/app" ]]; then
    fail "the build made no build/app"
  else
    app_built=1
    pass "build/app"
  fi
fi

if [[ $app_built -eq 1 ]]; then
  # As `shoal::Init()`'s comment says: with no cluster to find, the program
  # starts a local one of its own, and the example as written runs on it.
  step "the C++ API example runs as written with no cluster (it starts its own)"
  type_in "$app/build" "$t4" 120 "./app"
  if [[ $rc -ne 0 ]] || ! grep -qx "13" <<<"$out" || ! grep -qx "114" <<<"$out"; then
    fail "expected exit code 0 and the lines '13' and '114'"
  else
    pass
  fi
fi

# ---- one-host ----

mapfile -t one_host < <(block one-host)
head_out=""
head_address=""
cluster_nodes=""
seen=" "

for line in "${one_host[@]}"; do
  [[ -z "${line//[[:space:]]/}" || "$line" =~ ^[[:space:]]*# ]] && continue
  cmd=$(strip_comment "$line")
  typed_line=$(substitute "$line")
  case "$cmd" in
    "shoal start --head "*)
      seen+="head "
      step "start a head: $cmd"
      type_in "$work" "$t1" 60 "$typed_line"
      head_out=$out
      head_address=$(sed -nE 's/^ *Head address: *//p' <<<"$out")
      if [[ $rc -ne 0 || -z "$head_address" ]]; then
        fail "the head did not start"
        summary
        exit 1
      fi
      pass "head at $head_address"
      ;;

    "shoal start --address="*)
      seen+="join "
      step "join a second node with the command the head printed: $cmd"
      # The README shows the printed command's shape; this run uses the
      # printed command itself.
      # (<...> placeholders count as one word).
      readme_join=$(sed -E 's/ --temp-dir [^ ]+//; s/<[^>]*>/X/g' <<<"$cmd")
      printed_join=$(grep -E '^ *shoal start --address' <<<"$head_out" | head -n 1 | sed -E 's/^ +//') || true
      shape='^shoal start --address=[^ ]+ --token=[^ ]+$'
      if [[ -z "$printed_join" ]]; then
        typed="(the head's output)"; out=$head_out; rc=0
        fail "the head printed no 'shoal start --address=...' line"
        continue
      fi
      if ! [[ "$readme_join" =~ $shape && "$printed_join" =~ $shape ]]; then
        fail_plain "README's join line ($cmd) and the head's ($printed_join) differ in shape"
      fi
      type_in "$work" "$t1" 60 "$printed_join --temp-dir $node2"
      if [[ $rc -ne 0 ]] || ! grep -q "joined $head_address" <<<"$out"; then
        fail "the second node did not join $head_address"
      else
        pass
      fi
      ;;

    "shoal status")
      seen+="status "
      step "shoal status shows 2 nodes"
      type_in "$work" "$t1" 30 "$typed_line"
      cluster_nodes=$(alive_nodes "$out")
      n=$(grep -c . <<<"$cluster_nodes" || true)
      if [[ $rc -ne 0 ]]; then
        fail "shoal status failed"
      elif [[ $n -ne 2 ]]; then
        fail "expected 2 alive nodes, got $n"
      elif ! grep -qF "Head: $head_address" <<<"$out"; then
        fail "it does not show the head at $head_address"
      else
        pass "$(paste -sd' ' <<<"$cluster_nodes")"
      fi
      ;;

    "shoal launch "*"sys.exit("*)
      seen+="launch-fail "
      code=$(sed -nE 's/.*sys\.exit\(([0-9]+)\).*/\1/p' <<<"$cmd")
      step "a failing program makes shoal launch exit $code"
      type_in "$work" "$t1" 120 "$typed_line"
      if [[ $rc -ne $code ]]; then
        fail "expected exit code $code"
      elif ! grep -qE "^shoal launch: .*rank" <<<"$out"; then
        fail "no final line naming the failing rank"
      else
        pass
      fi
      ;;

    "shoal launch "*"hello from"*)
      mode=per-device
      [[ "$cmd" == *"--per-host"* ]] && mode=per-host
      seen+="launch-$mode "
      step "shoal launch --$mode runs the program on both nodes"
      type_in "$work" "$t1" 120 "$typed_line"
      problem=""
      [[ $rc -ne 0 ]] && problem+="exit code $rc, not 0; "
      for rank in 0 1; do
        grep -qE "hello from $rank\$" <<<"$out" || problem+="no 'hello from $rank' line; "
      done
      grep -qE '^shoal launch: all 2 processes exited 0$' <<<"$out" ||
        problem+="no 'shoal launch: all 2 processes exited 0' line; "
      if [[ -n "$problem" ]]; then fail "${problem%; }"; else pass; fi
      ;;

    "shoal launch "*"echo hi"*)
      seen+="launch-sh "
      step "shoal launch of a shell command prints every line"
      type_in "$work" "$t1" 120 "$typed_line"
      problem=""
      [[ $rc -ne 0 ]] && problem+="exit code $rc, not 0; "
      grep -qE '(^|\] )hi$' <<<"$out" || problem+="no 'hi' line; "
      grep -qE '(^|\] )bye$' <<<"$out" || problem+="no 'bye' line; "
      if [[ -n "$problem" ]]; then fail "${problem%; }"; else pass; fi
      ;;

    "hello_tasks")
      seen+="hello "
      step "hello_tasks with no address joins the running cluster"
      before=$(sessions "$t1")
      type_in "$work" "$t1" 120 "$typed_line"
      after=$(sessions "$t1")
      new_sessions=$(comm -13 <(echo "$before") <(echo "$after") | grep . || true)
      ran_on=$(sed -nE 's/^ *node ([^ ]+) ran [0-9]+ tasks$/\1/p' <<<"$out")
      strangers=""
      for node in $ran_on; do
        grep -qxF "$node" <<<"$cluster_nodes" || strangers+="$node "
      done
      problem=""
      [[ $rc -ne 0 ]] && problem+="exit code $rc, not 0; "
      [[ -n "$new_sessions" ]] &&
        problem+="it started a cluster of its own (new session folder $(paste -sd' ' <<<"$new_sessions")); "
      [[ -z "$ran_on" ]] && problem+="no 'node ... ran N tasks' line; "
      [[ -n "$strangers" ]] &&
        problem+="tasks ran on node(s) ${strangers% } that are not this cluster's ($(paste -sd' ' <<<"$cluster_nodes")); "
      if [[ -n "$problem" ]]; then fail "${problem%; }"; else pass "ran on $(paste -sd' ' <<<"$ran_on")"; fi

      # The head's hints, pasted as printed, while the cluster runs.
      step "the head's hint 'To see the cluster' works as printed"
      check_status_hint "$head_out" "$t1" "$head_address"

      step "the head's hint 'To connect a program' runs the C++ API example (prints 13)"
      connect_hint=$(hint "connect a program" "$head_out")
      if [[ -z "$connect_hint" || "$connect_hint" != *"./your_program"* ]]; then
        fail_plain "the head printed no 'To connect a program: ... ./your_program' line"
      elif [[ $app_built -eq 1 ]]; then
        type_in "$app/build" "$t1" 120 "${connect_hint//.\/your_program/./app}"
        if [[ $rc -ne 0 ]] || ! grep -qx "13" <<<"$out"; then
          fail "expected exit code 0 and a line '13'"
        else
          pass
        fi
      else
        # The example did not build: the hint is still tried, with hello_tasks.
        type_in "$work" "$t1" 120 "${connect_hint//.\/your_program/hello_tasks}"
        if [[ $rc -ne 0 ]] || ! grep -q "(correct)" <<<"$out"; then
          fail "the hint does not connect hello_tasks either"
        else
          fail_plain "the hint works with hello_tasks, but the C++ API example did not build (above)"
        fi
      fi

      check_token_note "$head_out" "$head_address" "$t1" "$node3"
      ;;

    "shoal job submit "*)
      seen+="job "
      step "shoal job submit runs a command under supervision and follows it"
      type_in "$work" "$t1" 120 "$typed_line"
      problem=""
      [[ $rc -ne 0 ]] && problem+="exit code $rc, not 0; "
      grep -qx "hello from a job" <<<"$out" || problem+="no 'hello from a job' line; "
      grep -q "SUCCEEDED" <<<"$out" || problem+="no 'SUCCEEDED' line; "
      if [[ -n "$problem" ]]; then fail "${problem%; }"; else pass; fi
      ;;

    "shoal summary tasks"*)
      seen+="summary "
      step "shoal summary tasks counts what hello_tasks ran"
      type_in "$work" "$t1" 60 "$typed_line"
      problem=""
      [[ $rc -ne 0 ]] && problem+="exit code $rc, not 0; "
      grep -qE "FINISHED: [0-9]+" <<<"$out" || problem+="no 'FINISHED: N' count; "
      if [[ -n "$problem" ]]; then fail "${problem%; }"; else pass; fi
      ;;

    "shoal logs "*)
      seen+="logs "
      step "shoal logs prints the head's log"
      type_in "$work" "$t1" 60 "$typed_line"
      problem=""
      [[ $rc -ne 0 ]] && problem+="exit code $rc, not 0; "
      grep -q "head" <<<"$out" || problem+="no line of the head's log; "
      if [[ -n "$problem" ]]; then fail "${problem%; }"; else pass; fi
      ;;

    "shoal stop --temp-dir "*)
      seen+="stop-node2 "
      step "stop the second node: $cmd"
      type_in "$work" "$t1" 60 "$typed_line"
      if [[ $rc -ne 0 ]] || ! grep -q "^Stopped node agent" <<<"$out"; then
        fail "no 'Stopped node agent' line"
      else
        pass
      fi
      ;;

    "shoal stop")
      seen+="stop "
      step "shoal stop stops the cluster, leaving no process behind"
      stop_hint=$(hint "stop" "$head_out")
      if [[ "$stop_hint" != "$cmd" ]]; then
        fail_plain "the head printed 'To stop: $stop_hint', the README says '$cmd'"
      fi
      type_in "$work" "$t1" 60 "$typed_line"
      left=$(leftovers_after_wait "$t1" "$node2")
      if [[ $rc -ne 0 ]]; then
        fail "shoal stop failed"
      else
        pass_unless_left "$left" "processes of the cluster are still running"
      fi
      ;;

    *)
      step "README line: $cmd"
      fail_plain "this line of the README's one-host block has no check in tests/readme/readme_test.sh"
      ;;
  esac
done

step "the one-host block has every step this tier checks"
absent=""
for want in head join status launch-per-device launch-per-host launch-sh \
            launch-fail hello summary job logs stop-node2 stop; do
  [[ "$seen" == *" $want "* ]] || absent+="$want "
done
if [[ -n "$absent" ]]; then
  fail_plain "no README line for: ${absent% }"
else
  pass
fi

# ---- temp-dir: a head started with --temp-dir; its hints as printed ----

# SHOAL_TEMP_DIR is a fresh, empty folder here, standing in for the default
# /tmp/shoal of a user who gives --temp-dir.
mapfile -t temp_dir_block < <(block temp-dir)
b_out=""
b_lines=0
for line in "${temp_dir_block[@]}"; do
  [[ -z "${line//[[:space:]]/}" || "$line" =~ ^[[:space:]]*# ]] && continue
  b_lines=$((b_lines + 1))
  cmd=$(strip_comment "$line")
  step "start a head with its own temp dir: $cmd"
  if [[ "$cmd" != "shoal start --head "*"--temp-dir "* ]]; then
    fail_plain "the temp-dir block should start a head with --temp-dir"
    continue
  fi
  type_in "$work" "$t2" 60 "$(substitute "$line")"
  b_out=$out
  b_address=$(sed -nE 's/^ *Head address: *//p' <<<"$out")
  if [[ $rc -ne 0 || -z "$b_address" ]]; then
    fail "the head did not start"
    b_out=""
  else
    pass "head at $b_address"
  fi
done

if [[ $b_lines -eq 0 ]]; then
  step "the temp-dir block starts a head"
  fail_plain "the README's temp-dir block has no command"
fi

if [[ -n "$b_out" ]]; then
  step "its hint 'To see the cluster' works as printed"
  check_status_hint "$b_out" "$t2" "$b_address"

  step "its hint 'To connect a program' works as printed (hello_tasks as the program)"
  h=$(hint "connect a program" "$b_out")
  if [[ -z "$h" ]]; then
    fail_plain "the head printed no 'To connect a program:' line"
  else
    before=$(sessions "$t2")
    type_in "$work" "$t2" 120 "${h//.\/your_program/hello_tasks}"
    after=$(sessions "$t2")
    if [[ $rc -ne 0 ]] || ! grep -q "(correct)" <<<"$out"; then
      fail "expected exit code 0 and a '(correct)' sum"
    elif [[ "$before" != "$after" ]]; then
      fail "it started a cluster of its own"
    else
      pass
    fi
  fi

  check_token_note "$b_out" "$b_address" "$t2" "$cluster_b2"

  step "its hint 'To stop' stops it as printed"
  h=$(hint "stop" "$b_out")
  if [[ "$h" != *"--temp-dir"* ]]; then
    fail_plain "the head printed 'To stop: $h', which does not name its temp dir"
  fi
  if [[ -n "$h" ]]; then
    type_in "$work" "$t2" 60 "$h"
    left=$(leftovers_after_wait "$cluster_b" "$t2")
    if [[ $rc -ne 0 || -n "$left" ]]; then
      out+=$'\n'"still running 15 s later:"$'\n'"$left"
      fail "processes of the cluster are still running"
    else
      pass
    fi
  fi
fi

# ---- the Python example ----

step "the Python example runs with a local cluster of its own"
if [[ ! -d "$build/python/shoal" ]]; then
  fail_plain "no $build/python/shoal: the Python frontend was not built"
else
  mkdir -p "$t3"
  py=$(block python)
  type_in "$src" "$t3" 120 "${py//build\//$build/}"
  left=$(leftovers_after_wait "$t3")
  if [[ $rc -ne 0 ]] || ! grep -qE '^4194303 [0-9.]+$' <<<"$out" ||
     ! grep -qxF '[0, 1, 4, 9]' <<<"$out" ||
     ! grep -qxF '[1, 2, 3]' <<<"$out"; then
    fail "expected exit code 0, '[0, 1, 4, 9]', '[1, 2, 3]' and '4194303 <CPUs>'"
  else
    pass_unless_left "$left" "its local cluster is still running"
  fi
fi

summary
[[ $failed -eq 0 ]]
