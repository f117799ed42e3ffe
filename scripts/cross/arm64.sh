#!/usr/bin/env bash
# Linux ARM64 (aarch64), one command: checks (as root: installs) the cross toolchain, qemu-user and the arm64
# multiarch packages; configures the arm64 preset (cmake/toolchains/aarch64-linux-gnu.cmake) and checks that it found
# no library of the host's; builds every target on 2 cores (so a test executable that no longer links fails here,
# also one this script does not run); runs the test executables under qemu-aarch64; runs `kiln generate` of the
# built-in digits on arm64 lavapipe and compares its PNG with the x86-64 build's (same command, same seed).
# Results: docs/platforms.md.
#   usage: scripts/cross/arm64.sh [extra cmake configure arguments]
#   env:   X86_BUILD (default build/release): the x86-64 build to compare with (built with --target kiln if missing);
#          ARM64_TESTS (default "core ir text schedulers converter layouts"): test folders to run under qemu;
#          ARM64_VULKAN_TESTS (default [op:softmax]): Catch2 filter run with test_ops under qemu on arm64 lavapipe
#          ("" to skip; ops on f16 data abort in Debian 12's arm64 lavapipe, see docs/platforms.md);
#          ARM64_TESTS_ONLY=1 (CI, .ci/run): build and run only the ARM64_TESTS executables (about 100 of the ~550
#          build steps; they link libcrypto and ICU as the rest do), without kiln, lavapipe or the x86-64 build.
set -euo pipefail
cd "$(dirname "$0")/../.."
x86=${X86_BUILD:-build/release}
tests=${ARM64_TESTS:-core ir text schedulers converter layouts}
vk_tests=${ARM64_VULKAN_TESTS-[op:softmax]}
tests_only=${ARM64_TESTS_ONLY:-0}

# Headers (volk, Vulkan, JSON, CLI11, Catch2 v2) are the host's; libraries and lavapipe come as :arm64.
pkgs="g++-aarch64-linux-gnu qemu-user-static libvulkan-dev libvulkan-volk-dev glslang-tools nlohmann-json3-dev
      libcli11-dev catch2 libstb-dev:arm64 libicu-dev:arm64 libcpp-httplib-dev:arm64 libssl-dev:arm64
      zlib1g-dev:arm64 libbrotli-dev:arm64"
# What the programs load at run time (the Vulkan loader, lavapipe), not needed to build.
[ "$tests_only" = 1 ] || pkgs="$pkgs libvulkan1:arm64 mesa-vulkan-drivers:arm64"
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "missing:$missing"
    echo "run: sudo dpkg --add-architecture arm64 && sudo apt-get update && sudo apt-get install -y$missing"
    exit 1
  fi
  dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
fi

qemu=$(command -v qemu-aarch64-static || command -v qemu-aarch64)
icd=/usr/share/vulkan/icd.d/lvp_icd.aarch64.json
[ "$tests_only" = 1 ] || test -f "$icd" || { echo "no $icd (mesa-vulkan-drivers:arm64)"; exit 1; }

# ELF e_machine (2 bytes at offset 18, little-endian) is EM_AARCH64 = 183 (0xb7).
aarch64_elf() { [ "$(od -An -tx1 -j18 -N2 "$1" | tr -d ' \n')" = b700 ] || { echo "$1 is not an aarch64 program"; exit 1; }; }

echo "== configure (build/arm64)"
cmake --preset arm64 "$@" >/dev/null
# A library path of the host's architecture in the cache would fail the link later with "file in wrong format" (the
# host's pkg-config once named /usr/lib/x86_64-linux-gnu/libcrypto.so to FindOpenSSL; the toolchain file now points
# pkg-config at the arm64 folder and ignores the host's).
host_libs=$(grep -E ':FILEPATH=/(usr/)?lib/[a-z0-9_]+-linux-gnu[a-z]*/' build/arm64/CMakeCache.txt |
            grep -vE '=/(usr/)?lib/aarch64-linux-gnu/' || true)
[ -z "$host_libs" ] || { echo "the arm64 configure found host libraries:"; echo "$host_libs"; exit 1; }
if [ "$tests_only" = 1 ]; then
  echo "== build the test executables: $tests (-j2)"
  nice -n 10 cmake --build build/arm64 -j2 --target $(for t in $tests; do echo test_$t; done)
  vk_tests=""
else
  echo "== build every target (build/arm64, -j2)"
  nice -n 10 cmake --build build/arm64 -j2
  aarch64_elf build/arm64/apps/kiln
fi
for t in $tests; do aarch64_elf build/arm64/tests/test_$t; done

export KILN_CACHE_DIR=$PWD/build/arm64/test-cache
fail=0
for t in $tests; do
  echo "== qemu-aarch64 test_$t"
  start=$(date +%s)
  if "$qemu" build/arm64/tests/test_$t >build/arm64/test_$t.log 2>&1; then r=passed; else r=FAILED; fail=1; fi
  echo "test_$t: $r ($(tail -n 2 build/arm64/test_$t.log | tr '\n' ' ')) in $(( $(date +%s) - start )) s"
done
if [ -n "$vk_tests" ]; then
  echo "== qemu-aarch64 test_ops $vk_tests on arm64 lavapipe"
  start=$(date +%s)
  if VK_ICD_FILENAMES=$icd "$qemu" build/arm64/tests/test_ops "$vk_tests" >build/arm64/test_ops.log 2>&1; then
    r=passed
  else
    r=FAILED
    fail=1
  fi
  echo "test_ops $vk_tests: $r ($(tail -n 2 build/arm64/test_ops.log | tr '\n' ' ')) in $(( $(date +%s) - start )) s"
fi
[ "$tests_only" = 1 ] && exit $fail

# The built-in digits, as README.md draws them, with a fixed seed; the same command on both builds. The built-in
# model has f16 weights, which Debian 12's arm64 lavapipe (Mesa 22.3, LLVM 15) cannot compile a shader for (LLVM
# ERROR: Cannot select fp_extend v4i16 -> v4f32; docs/platforms.md); the same model converted to f32 runs.
VK_ICD_FILENAMES=$icd "$qemu" build/arm64/apps/kiln devices >build/arm64/devices.txt  # (a pipe into head: SIGPIPE)
head -n 2 build/arm64/devices.txt
[ -x "$x86/apps/kiln" ] || cmake --build "$x86" -j2 --target kiln default_model
cmp -s build/arm64/dit-digits.kiln "$x86/dit-digits.kiln" && echo "dit-digits.kiln: arm64 and x86-64 files equal" ||
  echo "dit-digits.kiln: arm64 and x86-64 files DIFFER"
"$qemu" build/arm64/apps/kiln-convert models/default/dit-digits -o build/arm64/dit-digits-f32.kiln --dtype f32 --quiet
gen=(generate --class-labels 0,1,2,3,4,5,6,7,8,9 --grid --seed 7)
for m in dit-digits dit-digits-f32; do
  echo "== qemu-aarch64 kiln ${gen[*]} --model $m.kiln on arm64 lavapipe"
  start=$(date +%s)
  if VK_ICD_FILENAMES=$icd "$qemu" build/arm64/apps/kiln "${gen[@]}" --model build/arm64/$m.kiln \
       -o build/arm64/$m-arm64.png 2>build/arm64/$m-arm64.log; then
    echo "arm64 $m: $(( $(date +%s) - start )) s"
    VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json "$x86/apps/kiln" "${gen[@]}" \
      --model build/arm64/$m.kiln -o build/arm64/$m-x86_64.png 2>/dev/null
    echo -n "$m arm64 vs x86-64 PNG: "
    python3 scripts/cross/png_diff.py build/arm64/$m-arm64.png build/arm64/$m-x86_64.png
  else
    echo "arm64 $m FAILED after $(( $(date +%s) - start )) s: $(grep -m1 -E 'error|ERROR' build/arm64/$m-arm64.log)"
  fi
done
exit $fail
