#include "runtime/vulkan/device_query.h"

#include <cstring>
#include <string>

#include "runtime/vulkan/khr_coopmat.h"
#include "runtime/vulkan/linear_kernels.h"
#include "runtime/vulkan/memory_type.h"
#include "runtime/vulkan/nv_coopmat2.h"

namespace kiln::vk::detail {
namespace {
const char* type_name(VkPhysicalDeviceType t) {
    switch (t) {
        case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
            return "discrete";
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
            return "integrated";
        case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
            return "virtual";
        case VK_PHYSICAL_DEVICE_TYPE_CPU:
            return "cpu";
        default:
            return "other";
    }
}

// See DeviceInfo::subgroup_control. Core in Vulkan 1.3 (instance and device: the API version is their minimum), else
// VK_EXT_subgroup_size_control; the core structures are the extension's under other names.
void query_subgroup_control(VkPhysicalDevice pd, uint32_t device_api, bool ext, DeviceInfo& d) {
    const bool core = instance_api_version() >= VK_API_VERSION_1_3 && device_api >= VK_API_VERSION_1_3;
    if (!core && !ext) return;
    VkPhysicalDeviceSubgroupSizeControlProperties sp{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES};
    VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &sp};
    vkGetPhysicalDeviceProperties2(pd, &p2);
    VkPhysicalDeviceSubgroupSizeControlFeatures sf{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
    VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &sf};
    vkGetPhysicalDeviceFeatures2(pd, &f2);
    d.subgroup_min = sp.minSubgroupSize;
    d.subgroup_max = sp.maxSubgroupSize;
    d.max_workgroup_subgroups = sp.maxComputeWorkgroupSubgroups;
    d.subgroup_control = sf.subgroupSizeControl && sf.computeFullSubgroups &&
                         (sp.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT);
    d.subgroup_control_ext = d.subgroup_control && !core;
}

// See DeviceInfo::cm2_bm: called after the VK_KHR_cooperative_matrix query (its features are the base of these).
void query_coopmat2(VkInstance inst, VkPhysicalDevice pd, DeviceInfo& d) {
    uint32_t ne = 0;
    vkEnumerateDeviceExtensionProperties(pd, nullptr, &ne, nullptr);
    std::vector<VkExtensionProperties> exts(ne);
    vkEnumerateDeviceExtensionProperties(pd, nullptr, &ne, exts.data());
    bool ext = false;
    for (auto& e : exts) ext |= !std::strcmp(e.extensionName, VK_NV_COOPERATIVE_MATRIX_2_EXTENSION_NAME);
    if (!ext) return void(d.cm2_why = "no VK_NV_cooperative_matrix2");
    if (!d.coopmat_m)  // its shaders use VK_KHR_cooperative_matrix's types and the memory model enabled with them
        return void(d.cm2_why = "VK_NV_cooperative_matrix2 without a VK_KHR_cooperative_matrix shape Kiln runs (" +
                                d.coopmat_why + ")");
    VkPhysicalDeviceProperties props;
    vkGetPhysicalDeviceProperties(pd, &props);
    if (instance_api_version() < VK_API_VERSION_1_3 || props.apiVersion < VK_API_VERSION_1_3)
        return void(d.cm2_why = "no Vulkan 1.3 (its shader is SPIR-V 1.6)");
    VkPhysicalDeviceCooperativeMatrix2FeaturesNV cf{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV};
    VkPhysicalDeviceVulkan13Features f13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES, &cf};
    VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &f13};
    vkGetPhysicalDeviceFeatures2(pd, &f2);
    std::string missing;
    for (auto [on, name] : {std::pair{cf.cooperativeMatrixWorkgroupScope, "cooperativeMatrixWorkgroupScope"},
                            {cf.cooperativeMatrixFlexibleDimensions, "cooperativeMatrixFlexibleDimensions"},
                            {cf.cooperativeMatrixPerElementOperations, "cooperativeMatrixPerElementOperations"},
                            {cf.cooperativeMatrixTensorAddressing, "cooperativeMatrixTensorAddressing"},
                            {f13.maintenance4, "maintenance4"}})
        if (!on) missing += (missing.empty() ? "" : ", ") + std::string(name);
    if (!missing.empty()) return void(d.cm2_why = "VK_NV_cooperative_matrix2 without " + missing);
    VkPhysicalDeviceCooperativeMatrix2PropertiesNV cp{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_PROPERTIES_NV};
    VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &cp};
    vkGetPhysicalDeviceProperties2(pd, &p2);
    auto flex_fn = (PFN_vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV)vkGetInstanceProcAddr(
        inst, "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV");
    if (!flex_fn) return void(d.cm2_why = "no vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV");
    uint32_t n = 0;
    flex_fn(pd, &n, nullptr);
    std::vector<VkCooperativeMatrixFlexibleDimensionsPropertiesNV> fl(
        n, {VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV});
    flex_fn(pd, &n, fl.data());
    std::vector<Cm2Flex> listed;
    const int32_t workgroup_scope = 2;  // VK_SCOPE_WORKGROUP_KHR
    for (const auto& f : fl)
        if (f.AType == VK_COMPONENT_TYPE_FLOAT16_KHR && f.BType == VK_COMPONENT_TYPE_FLOAT16_KHR &&
            f.CType == VK_COMPONENT_TYPE_FLOAT32_KHR && f.ResultType == VK_COMPONENT_TYPE_FLOAT32_KHR &&
            f.scope == workgroup_scope && !f.saturatingAccumulation)
            listed.push_back({f.MGranularity, f.NGranularity, f.KGranularity, f.workgroupInvocations});
    const auto t = choose_cm2_tile(listed, cp.cooperativeMatrixFlexibleDimensionsMaxDimension,
                                   cp.cooperativeMatrixWorkgroupScopeMaxWorkgroupSize);
    if (!t)
        return void(d.cm2_why = "no workgroup-scope f16 x f16 + f32 flexible dimensions Kiln runs (" +
                                std::to_string(listed.size()) + " listed, max dimension " +
                                std::to_string(cp.cooperativeMatrixFlexibleDimensionsMaxDimension) + ")");
    d.cm2_bm = t->bm, d.cm2_bn = t->bn, d.cm2_bk = t->bk, d.cm2_invocations = t->invocations;
    d.cm2_why.clear();
}
}  // namespace

uint32_t instance_api_version() {
    uint32_t v = VK_API_VERSION_1_0;
    if (!vkEnumerateInstanceVersion || vkEnumerateInstanceVersion(&v) != VK_SUCCESS) v = VK_API_VERSION_1_0;
    return v >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : VK_API_VERSION_1_2;
}

int type_rank(VkPhysicalDeviceType t) {
    switch (t) {
        case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
            return 4;
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
            return 3;
        case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
            return 2;
        case VK_PHYSICAL_DEVICE_TYPE_CPU:
            return 1;
        default:
            return 0;
    }
}

DeviceInfo query(VkPhysicalDevice pd, int index) {
    DeviceInfo d;
    d.index = index;
    VkPhysicalDeviceDriverProperties drv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceSubgroupProperties sub{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, &drv};
    VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &sub};
    vkGetPhysicalDeviceProperties2(pd, &p2);
    const auto& p = p2.properties;
    d.name = p.deviceName;
    d.vk_type = p.deviceType;
    d.type = type_name(p.deviceType);
    d.driver = std::string(drv.driverName) + " " + drv.driverInfo;
    d.api_version = std::to_string(VK_API_VERSION_MAJOR(p.apiVersion)) + "." +
                    std::to_string(VK_API_VERSION_MINOR(p.apiVersion)) + "." +
                    std::to_string(VK_API_VERSION_PATCH(p.apiVersion));
    d.subgroup_size = sub.subgroupSize;
    d.subgroup_arithmetic = (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                            (sub.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
    d.max_storage_buffer_range = p.limits.maxStorageBufferRange;
    d.min_storage_offset_align = p.limits.minStorageBufferOffsetAlignment;
    d.min_uniform_offset_align = p.limits.minUniformBufferOffsetAlignment;
    d.max_push_constants = p.limits.maxPushConstantsSize;
    d.max_shared_memory = p.limits.maxComputeSharedMemorySize;
    d.max_storage_buffers_per_stage = p.limits.maxPerStageDescriptorStorageBuffers;
    d.max_uniform_buffers_per_stage = p.limits.maxPerStageDescriptorUniformBuffers;
    d.min_texel_offset_align = p.limits.minTexelBufferOffsetAlignment;
    d.max_texel_elements = p.limits.maxTexelBufferElements;
    d.max_sampled_images_per_stage = p.limits.maxPerStageDescriptorSampledImages;
    d.texel_formats = true;
    for (VkFormat f : {VK_FORMAT_R32G32B32A32_SFLOAT, VK_FORMAT_R16G16B16A16_SFLOAT, VK_FORMAT_R16G16B16A16_UINT,
                       VK_FORMAT_R32_SFLOAT, VK_FORMAT_R16_SFLOAT, VK_FORMAT_R16_UINT}) {
        VkFormatProperties fp;
        vkGetPhysicalDeviceFormatProperties(pd, f, &fp);
        d.texel_formats = d.texel_formats && (fp.bufferFeatures & VK_FORMAT_FEATURE_UNIFORM_TEXEL_BUFFER_BIT);
    }
    d.timestamp_period_ns = p.limits.timestampPeriod;
    VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceProperties2 p3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &m3};
    vkGetPhysicalDeviceProperties2(pd, &p3);
    d.max_allocation = m3.maxMemoryAllocationSize;

    VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, &f12};
    VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &f11};
    vkGetPhysicalDeviceFeatures2(pd, &f2);
    d.fp16_storage = f11.storageBuffer16BitAccess;
    d.fp16_arith = f12.shaderFloat16;
    d.int8_arith = f12.shaderInt8;
    d.int64 = f2.features.shaderInt64;
    d.fp64 = f2.features.shaderFloat64;
    d.buffer_device_address = f12.bufferDeviceAddress;
    d.timeline_semaphore = f12.timelineSemaphore;

    uint32_t ne = 0;
    vkEnumerateDeviceExtensionProperties(pd, nullptr, &ne, nullptr);
    std::vector<VkExtensionProperties> exts(ne);
    vkEnumerateDeviceExtensionProperties(pd, nullptr, &ne, exts.data());
    bool sm_builtins = false, amd_cores = false, size_control_ext = false;
    for (auto& e : exts)
        if (!std::strcmp(e.extensionName, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME))
            d.memory_budget = true;
        else if (!std::strcmp(e.extensionName, "VK_KHR_cooperative_matrix") ||
                 !std::strcmp(e.extensionName, "VK_NV_cooperative_matrix"))
            d.cooperative_matrix = true;
        else if (!std::strcmp(e.extensionName, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME))
            d.host_import = true;
        else if (!std::strcmp(e.extensionName, "VK_KHR_portability_subset"))  // vulkan_beta.h names it
            d.portability_subset = true;
        else if (!std::strcmp(e.extensionName, VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME))
            sm_builtins = true;
        else if (!std::strcmp(e.extensionName, VK_AMD_SHADER_CORE_PROPERTIES_EXTENSION_NAME))
            amd_cores = true;
        else if (!std::strcmp(e.extensionName, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME))
            size_control_ext = true;
    query_subgroup_control(pd, p.apiVersion, size_control_ext, d);
    if (sm_builtins) {  // properties of a supported extension may be queried without enabling it
        VkPhysicalDeviceShaderSMBuiltinsPropertiesNV sm{
            VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV};
        VkPhysicalDeviceProperties2 ps{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &sm};
        vkGetPhysicalDeviceProperties2(pd, &ps);
        d.compute_units = sm.shaderSMCount;
    } else if (amd_cores) {
        VkPhysicalDeviceShaderCorePropertiesAMD cp{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_AMD};
        VkPhysicalDeviceProperties2 ps{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &cp};
        vkGetPhysicalDeviceProperties2(pd, &ps);
        d.compute_units = cp.shaderEngineCount * cp.shaderArraysPerEngineCount * cp.computeUnitsPerShaderArray;
    }
    if (d.host_import) {
        VkPhysicalDeviceExternalMemoryHostPropertiesEXT hp{
            VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT};
        VkPhysicalDeviceProperties2 ph{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &hp};
        vkGetPhysicalDeviceProperties2(pd, &ph);
        d.host_import_align = hp.minImportedHostPointerAlignment;
    }

    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, nullptr);
    std::vector<VkQueueFamilyProperties> qs(nq);
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, qs.data());
    for (uint32_t i = 0; i < nq; ++i) {
        const VkQueueFlags f = qs[i].queueFlags;
        if ((f & VK_QUEUE_COMPUTE_BIT) && qs[i].timestampValidBits > 0) d.timestamps = true;
        if ((f & VK_QUEUE_TRANSFER_BIT) && !(f & (VK_QUEUE_COMPUTE_BIT | VK_QUEUE_GRAPHICS_BIT)) &&
            d.transfer_family < 0)
            d.transfer_family = (int)i;
    }

    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(pd, &mp);
    d.device_local_bytes = vk::device_local_bytes(mp);
    d.unified_memory = vk::unified_memory(mp, p.deviceType);
    return d;
}

void present_as_discrete(DeviceInfo& d) {
    d.vk_type = VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
    d.type = type_name(d.vk_type);
    d.unified_memory = false;  // vk::unified_memory: never on a discrete GPU
}

std::vector<VkPhysicalDevice> physical_devices(VkInstance inst) {
    uint32_t n = 0;
    VK_CHECK(vkEnumeratePhysicalDevices(inst, &n, nullptr));
    std::vector<VkPhysicalDevice> pds(n);
    VK_CHECK(vkEnumeratePhysicalDevices(inst, &n, pds.data()));
    return pds;
}

namespace {
// See DeviceInfo::coopmat_m. The properties query is an instance-level extension function.
void query_coopmat_khr(VkInstance inst, VkPhysicalDevice pd, DeviceInfo& d) {
    d.coopmat_m = d.coopmat_n = d.coopmat_k = 0;
    uint32_t ne = 0;
    vkEnumerateDeviceExtensionProperties(pd, nullptr, &ne, nullptr);
    std::vector<VkExtensionProperties> exts(ne);
    vkEnumerateDeviceExtensionProperties(pd, nullptr, &ne, exts.data());
    bool ext = false;
    for (auto& e : exts) ext |= !std::strcmp(e.extensionName, VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME);
    if (!ext) return void(d.coopmat_why = "no VK_KHR_cooperative_matrix");
    if (!d.fp16_arith) return void(d.coopmat_why = "no shaderFloat16");
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR cf{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
    VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, &cf};
    VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &f12};
    vkGetPhysicalDeviceFeatures2(pd, &f2);
    d.memory_model_device_scope = f12.vulkanMemoryModel && f12.vulkanMemoryModelDeviceScope;
    auto props_fn = (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)vkGetInstanceProcAddr(
        inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
    if (!cf.cooperativeMatrix || !props_fn) return void(d.coopmat_why = "cooperativeMatrix feature off");
    // The shader declares the Vulkan memory model; select_advance.comp's atomics are Device-scope, which that model
    // allows only with vulkanMemoryModelDeviceScope (VUID-RuntimeSpirv-vulkanMemoryModel-06265).
    if (!d.memory_model_device_scope) return void(d.coopmat_why = "no vulkanMemoryModel with device scope");
    uint32_t n = 0;
    props_fn(pd, &n, nullptr);
    std::vector<VkCooperativeMatrixPropertiesKHR> props(n, {VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR});
    props_fn(pd, &n, props.data());
    std::vector<CoopmatShape> shapes;
    for (const auto& p : props)
        if (p.AType == VK_COMPONENT_TYPE_FLOAT16_KHR && p.BType == VK_COMPONENT_TYPE_FLOAT16_KHR &&
            p.CType == VK_COMPONENT_TYPE_FLOAT32_KHR && p.ResultType == VK_COMPONENT_TYPE_FLOAT32_KHR &&
            p.scope == VK_SCOPE_SUBGROUP_KHR && !p.saturatingAccumulation)
            shapes.push_back({p.MSize, p.NSize, p.KSize});
    if (auto s = choose_coopmat_shape(shapes, d.subgroup_size)) {
        d.coopmat_m = s->m, d.coopmat_n = s->n, d.coopmat_k = s->k;
        d.coopmat_why.clear();
    } else {
        d.coopmat_why = "no f16 x f16 + f32 subgroup shape with M, N in {8, 16} and 32 % K == 0 (subgroup size " +
                        std::to_string(d.subgroup_size) + ")";
    }
}

}  // namespace

void query_coopmat(VkInstance inst, VkPhysicalDevice pd, DeviceInfo& d) {
    query_coopmat_khr(inst, pd, d);
    d.cm2_bm = d.cm2_bn = d.cm2_bk = d.cm2_invocations = 0;
    query_coopmat2(inst, pd, d);
}

}  // namespace kiln::vk::detail
