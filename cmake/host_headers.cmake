# Debian's header-only dependencies for a cross build (KILN_HOST_HEADERS=ON): nlohmann-json (nlohmann-json3-dev),
# Catch2 v2 (catch2: catch.hpp is the whole library), CLI11 (libcli11-dev), stb (libstb-dev), the Vulkan headers
# (libvulkan-dev) and volk (libvulkan-volk-dev: volk.h and volk.c). /usr/include is never put on the include path
# (its glibc headers would shadow the target's): a folder of links to just these is. Each target below stands for
# the package's own CMake target.
set(KILN_HOST_INCLUDE ${PROJECT_BINARY_DIR}/host-include)
file(MAKE_DIRECTORY ${KILN_HOST_INCLUDE})
foreach(d nlohmann catch2 CLI stb vulkan vk_video volk.h volk.c)
  if(EXISTS /usr/include/${d} AND NOT EXISTS ${KILN_HOST_INCLUDE}/${d})
    file(CREATE_LINK /usr/include/${d} ${KILN_HOST_INCLUDE}/${d} SYMBOLIC)
  endif()
endforeach()
foreach(d nlohmann catch2)
  if(NOT EXISTS ${KILN_HOST_INCLUDE}/${d})
    message(FATAL_ERROR "KILN_HOST_HEADERS: /usr/include/${d} missing (apt-get install nlohmann-json3-dev catch2)")
  endif()
endforeach()
add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
target_include_directories(nlohmann_json::nlohmann_json SYSTEM INTERFACE ${KILN_HOST_INCLUDE})
add_library(Catch2::Catch2 INTERFACE IMPORTED)
target_include_directories(Catch2::Catch2 SYSTEM INTERFACE ${KILN_HOST_INCLUDE})
set(KILN_STB_INCLUDE ${KILN_HOST_INCLUDE}/stb)
# runtime/CMakeLists.txt looks for volk and the Vulkan headers: here, not in the target's root.
set(KILN_VOLK_INCLUDE ${KILN_HOST_INCLUDE} CACHE PATH "volk.h's folder" FORCE)
set(KILN_VULKAN_INCLUDE ${KILN_HOST_INCLUDE} CACHE PATH "vulkan/vulkan_core.h's folder" FORCE)
