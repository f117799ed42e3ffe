#pragma once
// What Kiln reads off a physical device before it creates one: properties, limits, features, queue families
// and memory heaps (DeviceInfo), and the device kind's rank for the default choice. Internal to runtime/vulkan.
#include <vector>

#include "runtime/vulkan/context.h"
#include "runtime/vulkan/loader.h"

namespace kiln::vk::detail {

std::vector<VkPhysicalDevice> physical_devices(VkInstance inst);
DeviceInfo query(VkPhysicalDevice pd, int index);
// The test hook KILN_TEST_DISCRETE: d as a discrete GPU without unified memory (everything query() derives from the
// device type), so that a CPU device takes a GPU's choices.
void present_as_discrete(DeviceInfo& d);
// discrete 4 > integrated 3 > virtual 2 > cpu 1 > other 0.
int type_rank(VkPhysicalDeviceType t);
// Sets DeviceInfo::coopmat_*, cm2_* and memory_model_device_scope. Needs the instance: the properties queries are
// instance-level functions.
void query_coopmat(VkInstance inst, VkPhysicalDevice pd, DeviceInfo& d);
// The API version Kiln's instance asks for: 1.3 where the loader has it (SPIR-V 1.6: linear_cm2.comp), else 1.2.
uint32_t instance_api_version();

}  // namespace kiln::vk::detail
