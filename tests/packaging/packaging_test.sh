#!/usr/bin/env bash
# Builds examples/out_of_tree as a user would, against Shoal's build tree and
# then against an install prefix only, and runs it both times.
#
#   packaging_test.sh <shoal-source-dir> <shoal-build-dir>
#
# REQUIRES: the build is complete (cmake --install installs every target).
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 <shoal-source-dir> <shoal-build-dir>" >&2
  exit 2
fi
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
example="$src/examples/out_of_tree"

work=$(mktemp -d "${TMPDIR:-/tmp}/shoal-packaging.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "== scratch dir: $work"

# The example starts its own local cluster: keep its session folders out of
# /tmp/shoal, and make sure no outside cluster is used.
unset SHOAL_ADDRESS SHOAL_TOKEN
export SHOAL_TEMP_DIR="$work/sessions"
mkdir -p "$SHOAL_TEMP_DIR"

run() {
  echo "+ $*"
  "$@"
}

# Builds the example into $1 with the remaining arguments and runs it.
build_and_run() {
  local dir=$1
  shift
  run cmake -G Ninja -S "$example" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
  run cmake --build "$dir" -j2
  run "$dir/app"
}

echo "== 1. against the build tree"
build_and_run "$work/from_build" -Dshoal_DIR="$build"

echo "== 2. against an install prefix"
run cmake --install "$build" --prefix "$work/prefix"
for f in bin/shoal include/shoal/api.h lib/cmake/shoal/shoalConfig.cmake \
         lib/cmake/shoal/shoalConfigVersion.cmake lib/libshoal.a; do
  [[ -e "$work/prefix/$f" ]] || { echo "not installed: $f" >&2; exit 1; }
done
if grep -rlF -e "$build" -e "$src" "$work/prefix/lib/cmake/shoal"; then
  echo "the installed package names the build or source tree (files above)" >&2
  exit 1
fi
# Only the prefix: no package registry, no shoal_DIR from the environment.
unset shoal_DIR shoal_ROOT
build_and_run "$work/from_prefix" \
  -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
found=$(sed -n 's/^shoal_DIR:PATH=//p' "$work/from_prefix/CMakeCache.txt")
echo "== shoal_DIR of the prefix build: $found"
if [[ "$found" != "$work/prefix/"* ]]; then
  echo "the prefix build found Shoal at $found, not in $work/prefix" >&2
  exit 1
fi

# The Python package, where the prefix's Python finds it, starting the
# prefix's own CLI for a local cluster.
if [[ -e "$build/python/shoal/_build.py" ]]; then
  echo "== 3. the Python package from the install prefix"
  site=$(find "$work/prefix/lib" -maxdepth 3 -type d -path '*python3*/*-packages' | head -n 1)
  [[ -n "$site" && -e "$site/shoal/__init__.py" ]] || { echo "the Python package is not installed" >&2; exit 1; }
  grep -qF "$work/prefix/bin/shoal" "$site/shoal/_build.py" || { echo "the installed package does not name the prefix's CLI" >&2; exit 1; }
  got=$(cd "$work" && PYTHONPATH="$site" /usr/bin/python3 -c '
import shoal
shoal.init(num_cpus=1)
print(shoal.get(shoal.remote(lambda a, b: a + b).remote(40, 2)))
shoal.shutdown()
')
  echo "$got"
  [[ "$got" == 42 ]] || { echo "the installed package printed $got, not 42" >&2; exit 1; }
fi

echo "== packaging_test: PASS"
