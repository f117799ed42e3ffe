#!/usr/bin/env bash
# The Vulkan test executables of build/release on Mesa 26.1's lavapipe (scripts/ci/lavapipe26.sh: cooperative matrices,
# subgroup size 8), validation on, through ctest: each executable runs under build/lavapipe26/run, and so does each kiln
# it spawns (KILN_TEST_RUNNER). Its own pipeline cache and linear table (build/release/test-cache-lvp26): kernels
# measured on lavapipe 22.3 are not this device's.
# Usage: scripts/ci/test_lavapipe26.sh [EXECUTABLE[:FILTER]...] [-- CTEST-ARGS...]   (default: ops jit models apps;
#        e.g. `ops jit -- -j2`). Catch2 arguments go through TEST_ARGS (TEST_ARGS='[linear]' scripts/ci/test_lavapipe26.sh
#        ops), or per executable after a colon, which makes a test of its own (lvp26_ops_1, lvp26_ops_2, ...): `'ops:[gemm]'
#        'ops:~[gemm]~[.]' -- -j2` runs test_ops in two processes, side by side (tests start in the order given).
set -euo pipefail
cd "$(dirname "$0")/../.."
src=$(pwd)
tests=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do tests+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#tests[@]} -gt 0 ] || tests=(ops jit models apps)
scripts/ci/lavapipe26.sh build/lavapipe26
run="$src/build/lavapipe26/run"
dir="$src/build/release/lavapipe26-ctest"  # a test folder of its own: the executables are build/release's
mkdir -p "$dir"
{
  echo "# scripts/ci/test_lavapipe26.sh: build/release's test executables on lavapipe 26"
  i=0
  for arg in "${tests[@]}"; do
    t=${arg%%:*} name=lvp26_${arg%%:*} filter=${TEST_ARGS:-}
    if [ "$arg" != "$t" ]; then i=$((i + 1)) name=lvp26_${t}_$i filter=${arg#*:}; fi
    exe="$src/build/release/tests/test_$t"
    [ -x "$exe" ] || { echo "test_lavapipe26: no $exe (build it first)" >&2; exit 1; }
    echo "add_test($name \"$run\" \"$exe\" ${filter:+\"$filter\"})"
    echo "set_tests_properties($name PROPERTIES TIMEOUT 1800 WORKING_DIRECTORY \"$src/build/release/tests\"" \
         "ENVIRONMENT \"KILN_VALIDATION=1;KILN_TEST_RUNNER=$run;KILN_TEST_DATA=$src/tests/data;KILN_CACHE_DIR=$src/build/release/test-cache-lvp26\")"
  done
} > "$dir/CTestTestfile.cmake"
ctest --test-dir "$dir" --output-on-failure "$@"
