#!/bin/bash
# Windows x86-64 in one command: configure with the "windows" preset (mingw-w64), build, run the test executables
# under wine and try kiln.exe (devices, then generate of the built-in digits model). Prints one PASS/FAIL line per
# step and exits non-zero if a test executable failed. Needs: apt-get install mingw-w64 wine64 wine glslang-tools
# nlohmann-json3-dev catch2 libcli11-dev libstb-dev libvulkan-dev libvulkan-volk-dev (and, for kiln.exe under wine,
# xvfb (an X server for wine's display driver, through which winevulkan reaches the host's Vulkan) and a Vulkan
# driver on the host: mesa-vulkan-drivers' lavapipe).
# Environment: JOBS (build jobs, default 2), GLSLANG (a glslangValidator to use), KILN_WIN_TESTS (the test
# folders to run, default "core ir converter layouts text schedulers"), WINEPREFIX (default build/windows/wine).
set -u
cd "$(dirname "$0")/../.." || exit 1
B=build/windows
JOBS=${JOBS:-2}
export WINEPREFIX=${WINEPREFIX:-$PWD/$B/wine}
export WINEDEBUG=${WINEDEBUG:--all}
export WINEDLLOVERRIDES=${WINEDLLOVERRIDES:-mscoree,mshtml=}  # no Mono/Gecko install prompts on first start
WINE=$(command -v /usr/lib/wine/wine64 || command -v wine64 || command -v wine) || { echo "windows.sh: no wine"; exit 1; }

extra=()
command -v ccache >/dev/null && extra+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
[ -n "${GLSLANG:-}" ] && extra+=(-DGLSLANG="$GLSLANG")
echo "== configure ($(date -u +%FT%TZ))"
cmake --preset windows "${extra[@]}" >"$B.configure.log" 2>&1 || { tail -30 "$B.configure.log"; exit 1; }
echo "== build (-j$JOBS)"
nice -n 10 cmake --build "$B" -j"$JOBS" >"$B.build.log" 2>&1 || { grep -m20 -B2 -A8 'error' "$B.build.log"; exit 1; }
ls -l "$B"/apps/*.exe "$B"/lib/*.dll "$B"/lib/*.a 2>/dev/null | awk '{print $5, $9}'

mkdir -p "$WINEPREFIX"
"$WINE" wineboot -i >/dev/null 2>&1
export KILN_TEST_DATA=$PWD/tests/data KILN_CACHE_DIR=$PWD/$B/test-cache
fail=0
for t in ${KILN_WIN_TESTS:-core ir converter layouts text schedulers}; do
  exe=$B/tests/test_$t.exe
  if [ ! -f "$exe" ]; then echo "SKIP test_$t (not built in this configuration)"; continue; fi
  start=$(date +%s)
  if "$WINE" "$exe" >"$B/test_$t.log" 2>&1; then r=PASS; else r=FAIL; fail=1; fi
  echo "$r test_$t ($(($(date +%s) - start)) s): $(grep -E '^(All tests passed|test cases:)' "$B/test_$t.log" | tail -1)"
done

# kiln.exe needs Vulkan through wine's winevulkan, which forwards to the host's Vulkan loader and ICDs through wine's
# X11 display driver: without a display, under xvfb-run (Debian's xvfb) when it is installed.
if [ -f "$B/apps/kiln.exe" ]; then
  X=""
  [ -z "${DISPLAY:-}" ] && command -v xvfb-run >/dev/null && X="xvfb-run -a"
  if $X "$WINE" "$B/apps/kiln.exe" devices >"$B/kiln_devices.log" 2>&1; then r=PASS; else r=FAIL; fi
  echo "$r kiln.exe devices: $(grep -v fixme "$B/kiln_devices.log" | grep -m2 -E '^\[|error' | tr '\n' ' ')"
  rm -f "$B/digits.png"
  args="--class-labels 0,1,2,3,4,5,6,7,8,9 --grid --seed 0"
  if $X "$WINE" "$B/apps/kiln.exe" generate --model "$B/dit-digits.kiln" $args -o "$B/digits.png" \
    >"$B/kiln_generate.log" 2>&1; then r=PASS; else r=FAIL; fi
  echo "$r kiln.exe generate: $(grep -v fixme "$B/kiln_generate.log" | tail -n 3 | tr '\n' ' ')"
  # The same command on the Linux build, pixels compared (the PNGs' text chunks name the paths, so bytes differ).
  if [ -f "$B/digits.png" ] && [ -x build/release/apps/kiln ]; then
    build/release/apps/kiln generate --model build/release/dit-digits.kiln $args -o "$B/digits-linux.png" >/dev/null 2>&1 &&
      echo "digits.png against the Linux build: $(python3 scripts/cross/png_diff.py "$B/digits.png" "$B/digits-linux.png")"
  fi
fi
exit $fail
