#pragma once
// VK_KHR_cooperative_matrix's structures and entry point, for Vulkan headers older than 1.3.255 (Debian 12 has
// 1.3.239). The values are the registry's; with newer headers theirs are used.
#include "runtime/vulkan/loader.h"

#ifndef VK_KHR_cooperative_matrix
#define VK_KHR_cooperative_matrix 1
#define VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME "VK_KHR_cooperative_matrix"
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR ((VkStructureType)1000506000)
#define VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR ((VkStructureType)1000506001)
#define VK_COMPONENT_TYPE_FLOAT16_KHR 0
#define VK_COMPONENT_TYPE_FLOAT32_KHR 1
#define VK_SCOPE_SUBGROUP_KHR 3
typedef struct VkCooperativeMatrixPropertiesKHR {
    VkStructureType sType;
    void* pNext;
    uint32_t MSize, NSize, KSize;
    int32_t AType, BType, CType, ResultType;  // VkComponentTypeKHR
    VkBool32 saturatingAccumulation;
    int32_t scope;  // VkScopeKHR
} VkCooperativeMatrixPropertiesKHR;
typedef struct VkPhysicalDeviceCooperativeMatrixFeaturesKHR {
    VkStructureType sType;
    void* pNext;
    VkBool32 cooperativeMatrix;
    VkBool32 cooperativeMatrixRobustBufferAccess;
} VkPhysicalDeviceCooperativeMatrixFeaturesKHR;
typedef VkResult(VKAPI_PTR* PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)(
    VkPhysicalDevice physicalDevice, uint32_t* pPropertyCount, VkCooperativeMatrixPropertiesKHR* pProperties);
#endif
