# Windows x86-64 cross build with Debian's mingw-w64 (apt-get install mingw-w64 wine64): the "windows" preset.
# The POSIX-thread flavour of the compiler, for std::thread and std::mutex; everything linked statically (libgcc,
# libstdc++, winpthread), so kiln.exe, kiln-convert.exe and kiln.dll need no DLL beyond Windows' own.
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(KILN_MINGW_PREFIX x86_64-w64-mingw32)
set(CMAKE_C_COMPILER ${KILN_MINGW_PREFIX}-gcc-posix)
set(CMAKE_CXX_COMPILER ${KILN_MINGW_PREFIX}-g++-posix)
set(CMAKE_RC_COMPILER ${KILN_MINGW_PREFIX}-windres)
set(CMAKE_FIND_ROOT_PATH /usr/${KILN_MINGW_PREFIX})
# Programs (glslangValidator) from the host; libraries, headers and packages from the mingw root only, so that no
# glibc header or Linux library leaks in. Debian's header-only dependencies come in through cmake/host_headers.cmake.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(CMAKE_EXE_LINKER_FLAGS_INIT "-static")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-static")
# wine runs what the build runs (kiln-convert makes the built-in model) and what ctest runs. Debian 12 installs the
# 64-bit loader as /usr/lib/wine/wine64 (package wine64); `wine` (package wine) is its launcher.
find_program(KILN_WINE NAMES wine64 wine PATHS /usr/lib/wine NO_CMAKE_FIND_ROOT_PATH)
if(KILN_WINE)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${KILN_WINE})
endif()
