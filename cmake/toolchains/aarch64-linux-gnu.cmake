# Linux ARM64 (aarch64) cross build with Debian's cross compiler (g++-aarch64-linux-gnu) against the arm64 multiarch
# packages (libicu-dev:arm64, ...: `dpkg --add-architecture arm64`). Headers are shared with the host in /usr/include
# (volk, Vulkan, nlohmann-json, CLI11, Catch2 v2 are header-only or arch-independent); libraries come from
# /usr/lib/aarch64-linux-gnu. glslang runs on the host. Binaries run under qemu-user (scripts/cross/arm64.sh).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# AArch64 has fused multiply-add in its base ISA and GCC contracts a * b + c into it by default; x86-64 (SSE2) does
# not. Off, host arithmetic rounds each operation as on x86-64 and as PyTorch's CPU ops do: the scheduler tests compare
# exactly (tests/schedulers/test_flow_stochastic.cpp failed 35 checks by one ulp with contraction on).
set(CMAKE_C_FLAGS_INIT "-ffp-contract=off")
set(CMAKE_CXX_FLAGS_INIT "-ffp-contract=off")

# find_library looks in /usr/lib/aarch64-linux-gnu (CMAKE_LIBRARY_ARCHITECTURE), never the host's x86_64 folder;
# programs (glslangValidator, spirv-val) are the host's.
# The shared libraries' own dependencies (libicuuc -> libicudata, libcpp-httplib -> libssl) are looked up there too.
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,-rpath-link,/usr/lib/aarch64-linux-gnu")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-Wl,-rpath-link,/usr/lib/aarch64-linux-gnu")

# pkg-config answers for the target too: Find modules ask it first and search the folder it names before any other
# (FindOpenSSL: the host's pkg-config named /usr/lib/x86_64-linux-gnu/libcrypto.so, and test_layouts failed to link
# with "file in wrong format" on a machine with both libssl-dev and libssl-dev:arm64). PKG_CONFIG_LIBDIR replaces the
# default search path, so only the arm64 .pc files and the architecture-independent ones are seen. The toolchain file
# is read on every configure (and in try_compile), so the setting holds for re-runs of cmake too.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
# And whatever else points a find_library at the host's multiarch folder (a Find module's hint, a user's -D path): its
# files are never taken, so a library missing as :arm64 is "not found" at configure time, not a link error later.
# Not recursive: only libraries directly in these folders are ignored.
if(NOT CMAKE_HOST_SYSTEM_PROCESSOR STREQUAL "aarch64")
  list(APPEND CMAKE_IGNORE_PATH /usr/lib/${CMAKE_HOST_SYSTEM_PROCESSOR}-linux-gnu
       /lib/${CMAKE_HOST_SYSTEM_PROCESSOR}-linux-gnu)
  list(REMOVE_DUPLICATES CMAKE_IGNORE_PATH)  # this file is read more than once per configure
endif()

# Build-time runs of target programs (kiln-convert making the built-in model) and add_test go through qemu. With
# Debian's multiarch libc6:arm64 installed, /lib/ld-linux-aarch64.so.1 is there and no QEMU_LD_PREFIX is needed.
find_program(KILN_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64 REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR ${KILN_QEMU_AARCH64})
