#!/usr/bin/env bash
# There (a lent GPU machine, from the repository root, carry [".gpu"] made by scripts/gpu/bundle.sh): runs Kiln on
# the real driver and writes every log and JSON under $OUT. One mode per `run` call (a call may last 10 minutes):
#   tests   kiln devices, then every Vulkan test executable on the GPU with validation on (#13: the same tests must
#           pass on a real GPU; a failure's log is in $OUT/test_NAME.log)
#   stream  the streaming tests with ring copies on the transfer-only queue family (KILN_TRANSFER_QUEUE=1), then
#           kiln bench --stream on DiT-XL/2-256 with --transfer-queue 0 against 1 (#12)
#   bench [ARCH...]  kiln bench --mode all per arch (default dit-xl-2-256; also dit-xl-2-512, sd3-medium-1024,
#           flux-dev-1024: one or two per call), and, when .gpu/peer.tar.xz was packed, PyTorch's side of the same
#           arch in the same call, so both share the card and its clocks (#13)
#   kernels kiln bench --kernels: the linear kernel table of this device
# Environment (tests mode): VALIDATION=0 turns the validation layer off; TESTS="jit models" runs only those.
set -uo pipefail
mode=${1:-tests}
shift || true
root=$(pwd)
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
[ -f .gpu/build.tar.xz ] || { echo "no .gpu/build.tar.xz: run scripts/gpu/bundle.sh here and carry .gpu" >&2; exit 1; }

# The Vulkan loader into / (as the device README says); ICU and the validation layer beside it, not over the system.
for f in .gpu/gl/*.deb; do dpkg -x "$f" /; done
ldconfig
deps=/opt/kiln-deps
mkdir -p "$deps"
for f in .gpu/deps/*.deb; do dpkg -x "$f" "$deps"; done
for f in .gpu/deps/*.tar.xz; do tar -xJf "$f" -C "$deps"; done
export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export VK_LAYER_PATH="$deps/usr/share/vulkan/explicit_layer.d"
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$icd" ] && export VK_DRIVER_FILES="$icd"

# The binaries name tests/data and the build folder by the absolute path they were built in.
built=$(cat .gpu/built_in)
if [ "$built" != "$root" ] && [ ! -e "$built" ]; then
  mkdir -p "$(dirname "$built")"
  ln -s "$root" "$built"
fi
tar -xJf .gpu/build.tar.xz
# The built-in model, made as apps/CMakeLists.txt makes it (bundle.sh ships kiln-convert instead of the file).
build/release/apps/kiln-convert models/default/dit-digits -o build/release/dit-digits.kiln --dtype f16 --quiet
kiln="$root/build/release/apps/kiln"
export KILN_TEST_DATA="$root/tests/data" KILN_CACHE_DIR=/tmp/kiln-cache

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true; } > "$out/gpu.txt" 2>&1
"$kiln" devices > "$out/devices.txt" 2>&1
cat "$out/gpu.txt" "$out/devices.txt"

run_test() {  # NAME [Catch2 args...]: one test executable, its log in $OUT; prints its last line
  local name=$1
  shift
  local log="$out/test_${name}${TAG:-}.log"
  (cd "$root/build/release/tests" && timeout "${TEST_TIMEOUT:-540}" "./test_$name" "$@" > "$log" 2>&1)
  echo "test_$name${TAG:-} rc=$? $(tail -n 2 "$log" | tr '\n' ' ')"
}

case "$mode" in
  tests)
    export KILN_VALIDATION=${VALIDATION:-1}
    for t in ${TESTS:-core ir converter schedulers text ops jit models apps}; do
      [ -x "build/release/tests/test_$t" ] && run_test "$t"
    done
    ;;
  stream)
    export KILN_VALIDATION=1 KILN_TRANSFER_QUEUE=1
    TAG=_transfer run_test jit "[stream]"
    TAG=_transfer run_test models "[stream]"
    unset KILN_VALIDATION KILN_TRANSFER_QUEUE
    for q in 0 1; do
      "$kiln" bench --synthetic dit-xl-2-256 --mode none --stream --vram-budget 1G --transfer-queue "$q" \
        --steps 5 --json "$out/stream-dit-xl-tq$q.json" > "$out/stream-dit-xl-tq$q.txt" 2>&1
      echo "stream --transfer-queue $q rc=$?"
      tail -n 8 "$out/stream-dit-xl-tq$q.txt"
    done
    ;;
  bench)
    [ -f .gpu/peer.tar.xz ] && mkdir -p /tmp/peer && tar -xJf .gpu/peer.tar.xz -C /tmp/peer
    for a in "${@:-dit-xl-2-256}"; do
      if [ -f /tmp/peer/bench_torch.py ]; then
        PYTHONPATH=/tmp/peer timeout 300 python3 /tmp/peer/bench_torch.py --arch "$a" --iters 20 \
          > "$out/torch-$a.jsonl" 2> "$out/torch-$a.err"
        echo "bench_torch $a rc=$?"
        cat "$out/torch-$a.jsonl"
      fi
      timeout 240 "$kiln" bench --synthetic "$a" --mode all --steps 5 --json "$out/kiln-$a.json" \
        > "$out/kiln-$a.txt" 2>&1
      echo "kiln bench $a rc=$?"
      grep -E '^(mode|eager|full|regional) ' "$out/kiln-$a.txt"
    done
    ;;
  kernels)
    "$kiln" bench --kernels > "$out/kernels.txt" 2>&1
    cat "$out/kernels.txt"
    ;;
  *)
    echo "usage: bash scripts/gpu/suite.sh tests|stream|bench [ARCH...]|kernels" >&2
    exit 2
    ;;
esac
