#include "runtime/vulkan/loader.h"

#include <mutex>
#include <vector>

#include "runtime/core/platform.h"

#ifdef _WIN32
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#else
#include <dlfcn.h>
#endif

namespace kiln::vk {
namespace {

std::mutex g_mutex;
bool g_opened = false, g_instance_loaded = false;

// The names volkInitialize() tries, in its order; a program-relative or absolute path comes from the setting.
std::vector<std::string> default_names() {
#if defined(_WIN32)
    return {"vulkan-1.dll"};
#elif defined(__APPLE__)
    return {"libvulkan.dylib", "libvulkan.1.dylib", "libMoltenVK.dylib"};
#else
    return {"libvulkan.so.1", "libvulkan.so"};
#endif
}

// vkGetInstanceProcAddr of the library at `name`, or null (the library stays open for the process: the entry points
// point into it).
PFN_vkGetInstanceProcAddr open_one(const std::string& name) {
#ifdef _WIN32
    HMODULE m = LoadLibraryA(name.c_str());
    if (!m) return nullptr;
    auto gipa = reinterpret_cast<PFN_vkGetInstanceProcAddr>(
        reinterpret_cast<void (*)()>(GetProcAddress(m, "vkGetInstanceProcAddr")));
    if (!gipa) FreeLibrary(m);
#else
    void* m = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!m) return nullptr;
    auto gipa = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(m, "vkGetInstanceProcAddr"));
    if (!gipa) dlclose(m);
#endif
    return gipa;
}

}  // namespace

void open_loader(const std::string& path) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_opened) return;
    const std::vector<std::string> names = path.empty() ? default_names() : std::vector<std::string>{path};
    std::string tried;
    for (const std::string& name : names) {
        if (PFN_vkGetInstanceProcAddr gipa = open_one(name)) {
            volkInitializeCustom(gipa);  // vkCreateInstance, vkEnumerateInstance*: the loader's global entries
            g_opened = true;
            return;
        }
        tried += (tried.empty() ? "" : ", ") + name;
    }
    throw Unavailable(
        ::kiln::detail::concat("no Vulkan loader found (tried ", tried, "; ", platform::vulkan_loader_advice(), ")"));
}

void load_instance(VkInstance inst) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_instance_loaded) return;
    volkLoadInstance(inst);
    g_instance_loaded = true;
}

}  // namespace kiln::vk
