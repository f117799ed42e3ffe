#!/bin/sh
# Installs Kiln from BUILD into TMP/prefix, then builds apps/examples against the installed package three ways
# (find_package with libkiln.so, find_package with libkiln.a, pkg-config with cc) and runs each on MODEL, writing
# TMP/digits-{shared,static,pc}.ppm. Also checks that libkiln.so exports kiln_* only and that nothing links libvulkan.
#   usage: install_check.sh BUILD SOURCE MODEL TMP
set -eu
build=$1 src=$2 model=$3 tmp=$4
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log"
for f in include/kiln.h; do test -f "$prefix/$f" || { echo "not installed: $f"; exit 1; }; done
libdir=$(dirname "$(find "$prefix" -name 'libkiln.so' | head -1)")
test -f "$libdir/libkiln.a" || { echo "libkiln.a not installed"; exit 1; }
test -f "$libdir/cmake/Kiln/KilnConfig.cmake" || { echo "KilnConfig.cmake not installed"; exit 1; }
test -f "$libdir/cmake/Kiln/KilnConfigVersion.cmake" || { echo "KilnConfigVersion.cmake not installed"; exit 1; }
test -f "$libdir/pkgconfig/kiln.pc" || { echo "kiln.pc not installed"; exit 1; }

others=$(nm -D --defined-only "$libdir/libkiln.so" | awk '{print $3}' | grep -v '^kiln_' || true)
if [ -n "$others" ]; then echo "libkiln.so exports more than kiln_*:"; echo "$others" | head; exit 1; fi

for kind in shared static; do
  static=OFF; [ $kind = static ] && static=ON
  cmake -S "$src/apps/examples" -B "$tmp/build-$kind" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
        -DKILN_EXAMPLES_STATIC=$static >"$tmp/configure-$kind.log" 2>&1 || { cat "$tmp/configure-$kind.log"; exit 1; }
  cmake --build "$tmp/build-$kind" >"$tmp/build-$kind.log" 2>&1 || { cat "$tmp/build-$kind.log"; exit 1; }
  "$tmp/build-$kind/digits" "$model" "$tmp/digits-$kind.ppm" 7
done
if ldd "$tmp/build-static/digits" | grep -q libkiln; then echo "static digits links libkiln.so"; exit 1; fi
# The Vulkan loader is opened at run time (runtime/vulkan/loader.h): neither the library nor an app links it.
for f in "$libdir/libkiln.so" "$tmp/build-static/digits" "$tmp/build-shared/digits"; do
  if readelf -d "$f" | grep NEEDED | grep -q libvulkan; then echo "$f links libvulkan"; exit 1; fi
done

export PKG_CONFIG_PATH="$libdir/pkgconfig"
want=$(sed -n 's/^project(kiln VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
test "$(pkg-config --modversion kiln)" = "$want" || { echo "kiln.pc version differs from the project's"; exit 1; }
cc -std=c99 -Wall -Wextra -pedantic -Werror $(pkg-config --cflags kiln) "$src/apps/examples/digits.c" \
   $(pkg-config --libs kiln) -o "$tmp/digits-pc"
LD_LIBRARY_PATH="$libdir" "$tmp/digits-pc" "$model" "$tmp/digits-pc.ppm" 7
