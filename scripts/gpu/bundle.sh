#!/usr/bin/env bash
# Here (Debian 12, no GPU): packs what scripts/gpu/suite.sh needs on a lent GPU machine (../.library/device), which
# has no Vulkan loader, no build dependencies and no network. Writes .gpu/ (git-ignored through .git/info/exclude):
#   .gpu/gl/*.deb        the Vulkan loader and GL libraries, as the device README lists them (unpacked into /)
#   .gpu/deps/*.deb      ICU 72 (its two libraries kiln links, as a .tar.xz), OpenSSL 3 and brotli (kiln links them; cpp-httplib, the tests' SHA-256) and the Khronos
#                        validation layer (unpacked into /opt/kiln-deps)
#   .gpu/build.tar.xz    build/release's kiln, kiln-convert and the Vulkan test executables, stripped
#   .gpu/built_in        the source tree the binaries were built in (their test-data paths are absolute)
#   .gpu/peer.tar.xz     with --diffusers DIR: ../shared/gpu-peer/bench_torch.py and DIR (diffusers' src/diffusers)
# Then, in one `run` call with carry [".gpu"]:  bash scripts/gpu/suite.sh tests   (see suite.sh for the modes).
# The working tree and .gpu travel together and must stay under 64 MiB; the script prints the total.
set -euo pipefail
cd "$(dirname "$0")/../.."
diffusers=""
while [ $# -gt 0 ]; do
  case "$1" in
    --diffusers) diffusers="$2"; shift 2 ;;
    *) echo "usage: scripts/gpu/bundle.sh [--diffusers PATH/src/diffusers]" >&2; exit 2 ;;
  esac
done
[ -x build/release/apps/kiln ] || { echo "build first: cmake --preset release && cmake --build build/release" >&2; exit 1; }
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >> "$exclude"
rm -rf .gpu && mkdir -p .gpu/gl .gpu/deps /tmp/kiln-amd64/partial
o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/kiln-amd64'
apt-get $o update -qq
(cd .gpu/gl && apt-get $o download -qq libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
(cd .gpu/deps && apt-get $o download -qq libicu72 vulkan-validationlayers libssl3 libbrotli1)
# Of ICU only the two libraries kiln links (libicuuc, libicudata): 1.2 MiB less than the package.
rm -rf /tmp/kiln-icu && dpkg -x .gpu/deps/libicu72_*.deb /tmp/kiln-icu && rm .gpu/deps/libicu72_*.deb
tar -cJf .gpu/deps/libicu72-uc-data.tar.xz -C /tmp/kiln-icu ./usr/lib/x86_64-linux-gnu/libicuuc.so.72 \
  ./usr/lib/x86_64-linux-gnu/libicuuc.so.72.1 ./usr/lib/x86_64-linux-gnu/libicudata.so.72 \
  ./usr/lib/x86_64-linux-gnu/libicudata.so.72.1
# Only what runs there: no soak or C API test (that one installs Kiln and builds the examples with CMake).
# kiln-convert rather than build/release/dit-digits.kiln: suite.sh remakes the built-in model there (6 MiB saved).
files=(build/release/apps/kiln build/release/apps/kiln-convert)
for t in core ir converter schedulers text ops jit models apps; do
  [ -x "build/release/tests/test_$t" ] && files+=("build/release/tests/test_$t")
done
# Symbols stripped (the release build has no debug info; its symbol tables are half the archive's size).
rm -rf /tmp/kiln-gpu-strip && mkdir -p /tmp/kiln-gpu-strip
for f in "${files[@]}"; do mkdir -p "/tmp/kiln-gpu-strip/$(dirname "$f")" && cp "$f" "/tmp/kiln-gpu-strip/$f"; done
for f in "${files[@]}"; do strip "/tmp/kiln-gpu-strip/$f"; done
tar -cJf .gpu/build.tar.xz -C /tmp/kiln-gpu-strip "${files[@]}"
pwd > .gpu/built_in
if [ -n "$diffusers" ]; then
  [ -f "$diffusers/__init__.py" ] || { echo "--diffusers: $diffusers is not diffusers' src/diffusers" >&2; exit 1; }
  rm -rf /tmp/kiln-peer && mkdir -p /tmp/kiln-peer
  cp ../shared/gpu-peer/bench_torch.py /tmp/kiln-peer/
  cp -r "$diffusers" /tmp/kiln-peer/diffusers
  tar -cJf .gpu/peer.tar.xz -C /tmp/kiln-peer .
fi
tree=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
extra=$(du -sb .gpu | cut -f1)
awk -v e="$extra" -v t="$tree" 'BEGIN { printf "bundle: .gpu %.1f MiB + tracked tree %.1f MiB = %.1f MiB (the limit is 64 MiB)\n", e / 1048576, t / 1048576, (e + t) / 1048576 }'
