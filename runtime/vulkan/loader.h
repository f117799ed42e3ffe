#pragma once
// The Vulkan loader, opened at run time: Kiln links no libvulkan, so an app linking libkiln starts on a machine
// without one. volk (Debian: libvulkan-volk-dev) declares the entry points (vkCreateInstance, vkQueueSubmit, ...) as
// pointers; open_loader() and load_instance() fill them. Every Vulkan header in Kiln comes through this one.
#include <volk.h>

#include <string>

#include "runtime/core/error.h"

namespace kiln::vk {

// Vulkan cannot run here: no loader library, or a loader with no usable device. One line ("no Vulkan loader found
// (tried libvulkan.so.1, libvulkan.so)", "no Vulkan device (...)"); the C API returns it as KILN_NOT_FOUND.
struct Unavailable : Error {
    using Error::Error;
};

// Opens the loader once per process: `path` (ContextOptions::vulkan_loader) or, when empty, the platform's names
// in order. Later calls keep the loader opened first, whatever they name; a failed call leaves the next one free to
// try again. Thread-safe. Throws Unavailable naming every file tried.
void open_loader(const std::string& path);

// After vkCreateInstance: points the instance- and device-level entries at what vkGetInstanceProcAddr answers. The
// loader answers its dispatching trampolines, which serve every instance and device (as a linked libvulkan's
// exports do), so this runs once per process; extension entries are looked up where used, per instance/device.
void load_instance(VkInstance inst);

}  // namespace kiln::vk
