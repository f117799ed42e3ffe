#!/usr/bin/env bash
# A second CPU Vulkan device for the tests: Mesa 26.1's lavapipe from Debian trixie-backports, which exposes
# VK_KHR_cooperative_matrix (8x8x8) and VK_NV_cooperative_matrix2 at subgroup size 8 (Debian 12's lavapipe 22.3 has
# neither), on a Debian 12 x86-64 host, without root installs or a chroot.
#
# The driver, trixie's Vulkan loader, vulkaninfo, glslangValidator 15 (DEST/glslangValidator: Debian 12's glslang
# cannot compile the cooperative-matrix shader), trixie's validation layer (1.4.309: bookworm's 1.3.239 does not know
# the cooperative-matrix structures and reports each as an error) and their runtime closure (glibc 2.41, libstdc++ 14,
# LLVM 19, ...) are unpacked with dpkg -x into DEST/root. DEST/run runs an ELF program through trixie's dynamic loader
# with DEST/root's libraries first; libraries trixie lacks (ICU 72, OpenSSL 3, cpp-httplib for kiln) come from the
# host's ld.so.cache.
#
# Every package is pinned, with the SHA-256 of its .deb, in scripts/ci/lavapipe26.pins: backports replace each other,
# and a new Mesa must not change CI silently. The .debs are cached by version in $KILN_LVP26_CACHE (default
# ~/.cache/kiln/lavapipe26); with a full cache the set-up needs no network. When a pinned version has left the
# archive and is not cached, the script stops with one line; `--repin` then pins the current versions.
#
# Usage: scripts/ci/lavapipe26.sh [DEST]       (default build/lavapipe26; about 15 s and 66 MB of downloads uncached)
#        scripts/ci/lavapipe26.sh --repin      (rewrites the pins: MESA=VERSION picks the Mesa, default the newest in
#                                               trixie-backports)
# Then:  DEST/run PROGRAM [ARGS...]            (PROGRAM an ELF binary, not a script)
#        KILN_TEST_RUNNER=DEST/run             (tests/apps/cli_run.h runs the kiln it spawns through it)
# Env:   MIRROR (a Debian archive URI; default the host's first .../debian source), KILN_LVP26_CACHE.
# Do not set LP_NATIVE_VECTOR_WIDTH with this driver: its cooperative-matrix shaders need the default 256 bits.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pins="$here/lavapipe26.pins"
cache=${KILN_LVP26_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/lavapipe26}
repin=0
[ "${1:-}" = "--repin" ] && { repin=1; shift; }
dest=${1:-$here/../../build/lavapipe26}
die() { echo "lavapipe26: $*" >&2; exit 1; }
[ "$(uname -m)" = x86_64 ] || die "needs an x86-64 host (this is $(uname -m))"
command -v dpkg >/dev/null && command -v apt-get >/dev/null || die "needs Debian's dpkg and apt-get"

# --- the private apt (trixie + trixie-backports lists under the cache; nothing of the host's apt is touched) ---
apto=()
apt_init() {
  [ ${#apto[@]} -gt 0 ] && return
  if [ -z "${MIRROR:-}" ]; then
    MIRROR=$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
             grep -E '^[[:space:]]*(URIs:|deb[[:space:]])' |
             grep -oE 'https?://[^ ]+/debian/?([[:space:]]|$)' | tr -d ' ' | head -n1 || true)
  fi
  [ -n "${MIRROR:-}" ] || die "no Debian archive among the host's apt sources: set MIRROR"
  mkdir -p "$cache/apt/etc" "$cache/apt/lists/partial" "$cache/apt/archives/partial"
  cat > "$cache/apt/etc/trixie.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: trixie trixie-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  apto=(-oDir::Etc::SourceList=/dev/null "-oDir::Etc::SourceParts=$cache/apt/etc" "-oDir::State::Lists=$cache/apt/lists"
        "-oDir::Cache=$cache/apt" -oDir::State::status=/dev/null -oAPT::Default-Release=trixie
        -oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oAPT::Sandbox::User=root -qq)
  apt-get "${apto[@]}" update > "$cache/apt/update.log" 2>&1 ||
    die "apt-get update of trixie at $MIRROR failed (see $cache/apt/update.log)"
}
debname() { echo "$1_${2//:/%3a}_$3.deb"; }  # PACKAGE VERSION ARCH: apt's file name

if [ $repin = 1 ]; then
  apt_init
  mesa=${MESA:-$(apt-cache "${apto[@]}" madison mesa-vulkan-drivers | awk '/trixie-backports/ { print $3; exit }')}
  [ -n "$mesa" ] || die "no mesa-vulkan-drivers in trixie-backports at $MIRROR"
  # The runtime closure of the driver, the loader, vulkaninfo, the validation layer and glslang (Depends and
  # Pre-Depends).
  names=$(apt-cache "${apto[@]}" depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
            --no-replaces --no-enhances "mesa-vulkan-drivers=$mesa" libvulkan1 vulkan-tools vulkan-validationlayers glslang-tools |
          grep -v '^ ' | grep -v '[<>]' | grep -vx mesa-vulkan-drivers | sort -u)
  mkdir -p "$cache/debs"
  tmp=$(mktemp)
  echo "# scripts/ci/lavapipe26.sh --repin, $(date -u +%Y-%m-%d): PACKAGE VERSION ARCH SHA256 (trixie; Mesa from trixie-backports)" > "$tmp"
  for spec in "mesa-vulkan-drivers=$mesa" $names; do
    p=${spec%%=*}
    v=${spec#*=}; [ "$v" = "$spec" ] && v=$(apt-cache "${apto[@]}" policy "$p" | awk '/Candidate:/ { print $2 }')
    a=$(apt-cache "${apto[@]}" show "$p=$v" | awk '/^Architecture:/ { print $2; exit }')
    f=$(debname "$p" "$v" "$a")
    [ -f "$cache/debs/$f" ] || (cd "$cache/debs" && apt-get "${apto[@]}" download "$p=$v" >/dev/null) ||
      die "apt-get download $p=$v failed"
    echo "$p $v $a $(sha256sum "$cache/debs/$f" | cut -d' ' -f1)" >> "$tmp"
  done
  mv "$tmp" "$pins"
  echo "lavapipe26: pinned $(grep -vc '^#' "$pins") packages, Mesa $mesa, in $pins"
  exit 0
fi

# --- the pinned .debs: from the cache, else downloaded once and checked against the pinned SHA-256 ---
[ -f "$pins" ] || die "no $pins (run $0 --repin)"
mesa=$(awk '$1 == "mesa-vulkan-drivers" { print $2 }' "$pins")
stamp="$mesa $(cat "$pins" "$0" | sha256sum | cut -d' ' -f1)"  # a new pin or a new script: unpack again
if [ -x "$dest/run" ] && [ "$(cat "$dest/stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "lavapipe26: Mesa $mesa lavapipe ready in $dest (cached)"
  exit 0
fi
mkdir -p "$cache/debs"
debs=()
while read -r p v a sum; do
  case "$p" in ''|'#'*) continue ;; esac
  f="$cache/debs/$(debname "$p" "$v" "$a")"
  if [ ! -f "$f" ] || [ "$(sha256sum "$f" | cut -d' ' -f1)" != "$sum" ]; then
    rm -f "$f"
    apt_init
    if ! (cd "$cache/debs" && apt-get "${apto[@]}" download "$p=$v" > "$cache/apt/download.log" 2>&1); then
      die "pinned $p $v is no longer in trixie(-backports) at $MIRROR and not cached in $cache/debs: pin the current versions with $0 --repin (and check the tests on that Mesa)"
    fi
    [ "$(sha256sum "$f" | cut -d' ' -f1)" = "$sum" ] || die "$f does not match its pinned SHA-256 in $pins"
  fi
  debs+=("$f")
done < "$pins"

# --- unpack into DEST/root; only lavapipe among the drivers, only the Khronos validation layer ---
rm -rf "$dest"
mkdir -p "$dest/root"
dest=$(cd "$dest" && pwd)
for f in "${debs[@]}"; do  # DEST/origin.txt: each unpacked path and its package (scripts/gpu/bundle.sh's manifest)
  dpkg -x "$f" "$dest/root"
  pv=$(dpkg-deb --show --showformat='${Package}=${Version}' "$f")
  dpkg-deb -c "$f" | awk -v pv="$pv" '{ sub(/^\./, "", $6); print $6, pv }' >> "$dest/origin.txt"
done
lib="$dest/root/usr/lib/x86_64-linux-gnu"
find "$lib" -maxdepth 1 -name 'libvulkan_*.so' ! -name libvulkan_lvp.so -delete
find "$lib" -maxdepth 1 -name 'libVkLayer_*' ! -name libVkLayer_khronos_validation.so -delete
rm -rf "$dest/root/usr/share/doc" "$dest/root/usr/share/locale" "$dest/root/usr/share/man" \
  "$dest/root/usr/share/vulkan/icd.d" "$dest/root/usr/share/vulkan/implicit_layer.d"
find "$dest/root/usr/share/vulkan/explicit_layer.d" -name '*.json' ! -name VkLayer_khronos_validation.json -delete
[ -f "$lib/ld-linux-x86-64.so.2" ] && [ -f "$lib/libvulkan_lvp.so" ] && [ -f "$lib/libVkLayer_khronos_validation.so" ] ||
  die "the pinned packages lack the loader, lavapipe or the validation layer"
cat > "$dest/lvp_icd.json" <<EOF
{ "file_format_version": "1.0.1",
  "ICD": { "library_path": "$lib/libvulkan_lvp.so", "api_version": "1.4.0" } }
EOF
# The driver through VK_ICD_FILENAMES, the variable the tests override to hide it (test_no_vulkan_cli); the newer
# VK_DRIVER_FILES, which would win over it, is unset. A run inside a run (a test's spawned kiln, through
# KILN_TEST_RUNNER) keeps what its parent set. VK_LAYER_PATH: trixie's validation layer only (the host's explicit
# layers are bookworm's). VK_IMPLICIT_LAYER_PATH: an empty folder, so none of the host's implicit layers (built for
# bookworm's libraries) loads, without the warning that VK_LOADER_LAYERS_DISABLE prints for each.
mkdir -p "$dest/implicit_layer.d"
cat > "$dest/run" <<EOF
#!/bin/sh
# usage: $dest/run PROGRAM [ARGS...]: PROGRAM (an ELF binary) on Mesa $mesa's lavapipe, by scripts/ci/lavapipe26.sh.
p=\$(command -v "\$1") || { echo "lavapipe26: not found: \$1" >&2; exit 127; }
shift
if [ "\${KILN_LVP26:-}" != "$dest" ]; then
  export KILN_LVP26="$dest" VK_ICD_FILENAMES="$dest/lvp_icd.json"
  export VK_LAYER_PATH="$dest/root/usr/share/vulkan/explicit_layer.d" VK_IMPLICIT_LAYER_PATH="$dest/implicit_layer.d"
  unset VK_DRIVER_FILES VK_ADD_DRIVER_FILES VK_ADD_LAYER_PATH
fi
export XDG_RUNTIME_DIR="\${XDG_RUNTIME_DIR:-/tmp}"
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" "\$p" "\$@"
EOF
chmod +x "$dest/run"
# trixie's glslangValidator (15.x): Debian 12's 12.0 lacks GL_KHR_cooperative_matrix, so a build configured with
# -DGLSLANG=DEST/glslangValidator is the one that has the cooperative-matrix linear (shaders/CMakeLists.txt).
cat > "$dest/glslangValidator" <<EOF
#!/bin/sh
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$dest/root/usr/bin/glslangValidator" "\$@"
EOF
chmod +x "$dest/glslangValidator"
"$dest/glslangValidator" --version > /dev/null || die "trixie's glslangValidator does not run"

# --- check: the device is lavapipe $mesa with the cooperative-matrix extensions, and the layer loads ---
info=$("$dest/run" "$dest/root/usr/bin/vulkaninfo" 2>&1) || die "vulkaninfo failed on it: $(echo "$info" | tail -n 1)"
grep -q "driverInfo *= *Mesa ${mesa%%-*}" <<< "$info" || die "vulkaninfo does not show Mesa $mesa"
for e in VK_KHR_cooperative_matrix VK_NV_cooperative_matrix2; do
  grep -q "$e" <<< "$info" || die "lavapipe $mesa does not list $e"
done
layers=$("$dest/run" "$dest/root/usr/bin/vulkaninfo" --summary 2>&1 | grep -c VK_LAYER_KHRONOS_validation || true)
[ "$layers" -ge 1 ] || die "the validation layer is not listed under $dest/run"
echo "$stamp" > "$dest/stamp"
echo "lavapipe26: Mesa $mesa lavapipe ready in $dest ($(du -sh "$dest/root" | cut -f1)): $dest/run PROGRAM [ARGS]"
