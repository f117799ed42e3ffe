#include "runtime/vulkan/context.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "runtime/core/error.h"
#include "runtime/core/platform.h"
#include "runtime/vulkan/device_query.h"
#include "runtime/vulkan/khr_coopmat.h"
#include "runtime/vulkan/nv_coopmat2.h"
#include "runtime/vulkan/pipeline.h"
#include "runtime/vulkan/pipeline_cache.h"

namespace kiln::vk {

const char* vk_result_name(VkResult r) {
    switch (r) {
#define C(x) \
    case x:  \
        return #x;
        // clang-format off
        C(VK_SUCCESS)
        C(VK_NOT_READY)
        C(VK_TIMEOUT)
        C(VK_INCOMPLETE)
        C(VK_ERROR_OUT_OF_HOST_MEMORY)
        C(VK_ERROR_OUT_OF_DEVICE_MEMORY)
        C(VK_ERROR_INITIALIZATION_FAILED)
        C(VK_ERROR_DEVICE_LOST)
        C(VK_ERROR_MEMORY_MAP_FAILED)
        C(VK_ERROR_LAYER_NOT_PRESENT)
        C(VK_ERROR_EXTENSION_NOT_PRESENT)
        C(VK_ERROR_FEATURE_NOT_PRESENT)
        C(VK_ERROR_INCOMPATIBLE_DRIVER)
        C(VK_ERROR_TOO_MANY_OBJECTS)
        C(VK_ERROR_FORMAT_NOT_SUPPORTED)
        C(VK_ERROR_FRAGMENTED_POOL)
        C(VK_ERROR_OUT_OF_POOL_MEMORY)
        C(VK_ERROR_UNKNOWN)
        // clang-format on
#undef C
        default:
            return "VK_ERROR_(unnamed)";
    }
}

void check_vk(VkResult r, const char* expr, const char* file, int line) {
    if (r == VK_SUCCESS) return;
    const ErrorKind kind =
        r == VK_ERROR_DEVICE_LOST ? ErrorKind::device_lost
        : r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_POOL_MEMORY
            ? ErrorKind::out_of_memory
            : ErrorKind::generic;
    ::kiln::detail::throw_error_kind(kind, "Vulkan error ", vk_result_name(r), " (", (int)r, ") from ", expr, " at ",
                                     file, ":", line);
}

namespace {
std::atomic<int> g_validation_errors{0};
std::mutex g_msg_mutex;
std::string g_last_msg;

// GPU-assisted validation's notes on its own set-up ("vkCreateDevice(): Internal Warning: Forcing
// fragmentStoresAndAtomics to VK_TRUE", "... rayQuery feature was not supported [Disabling ...]"): about the layer's
// instrumentation, not Kiln's use of Vulkan, so not counted. Only with KILN_VALIDATION_GPU (the user data).
bool gpu_av_setup_note(const char* msg) { return msg && std::strstr(msg, "Internal Warning:") != nullptr; }
// The messenger's user data with KILN_VALIDATION_GPU: its address says "skip the set-up notes" (null: count all).
const bool kSkipGpuAvNotes = true;

VKAPI_ATTR VkBool32 VKAPI_CALL debug_cb(VkDebugUtilsMessageSeverityFlagBitsEXT sev, VkDebugUtilsMessageTypeFlagsEXT,
                                        const VkDebugUtilsMessengerCallbackDataEXT* data, void* gpu_av) {
    if (gpu_av && gpu_av_setup_note(data->pMessage)) return VK_FALSE;
    if (sev >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
        g_validation_errors++;
        std::lock_guard<std::mutex> lk(g_msg_mutex);
        g_last_msg = data->pMessage ? data->pMessage : "";
        std::fprintf(stderr, "kiln: vulkan validation: %s\n", g_last_msg.c_str());
    }
    return VK_FALSE;
}

// No driver, or none with a device: vk::Unavailable, one line for every entry point (CLI, C API).
[[noreturn]] void no_device(const char* why) {
    throw Unavailable(::kiln::detail::concat("no Vulkan device (", why, "; ", platform::vulkan_driver_advice(), ")"));
}

// Opens the loader (loader.h) first: every vk* below is a pointer it fills.
VkInstance make_instance(const ContextOptions& o, bool validation, bool validation_sync, bool validation_gpu,
                         VkDebugUtilsMessengerEXT* messenger) {
    open_loader(o.vulkan_loader);
    uint32_t n = 0;
    vkEnumerateInstanceExtensionProperties(nullptr, &n, nullptr);
    std::vector<VkExtensionProperties> exts(n);
    vkEnumerateInstanceExtensionProperties(nullptr, &n, exts.data());
    auto has_ext = [&](const char* e) {
        return std::any_of(exts.begin(), exts.end(), [&](auto& p) { return std::strcmp(p.extensionName, e) == 0; });
    };
    std::vector<const char*> enabled, layers;
    VkInstanceCreateFlags flags = 0;
    // MoltenVK (macOS, iOS) is a portability implementation: the loader lists its devices only to an instance that
    // enables VK_KHR_portability_enumeration and sets this flag.
    if (has_ext(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
        enabled.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
        flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
    }
    if (validation) {
        uint32_t nl = 0;
        vkEnumerateInstanceLayerProperties(&nl, nullptr);
        std::vector<VkLayerProperties> ls(nl);
        vkEnumerateInstanceLayerProperties(&nl, ls.data());
        bool found = std::any_of(ls.begin(), ls.end(),
                                 [](auto& l) { return std::strcmp(l.layerName, "VK_LAYER_KHRONOS_validation") == 0; });
        KILN_CHECK(found,
                   "KILN_VALIDATION=1 but the layer VK_LAYER_KHRONOS_validation is not installed "
                   "(Debian: apt-get install vulkan-validationlayers)");
        layers.push_back("VK_LAYER_KHRONOS_validation");
        KILN_CHECK(has_ext(VK_EXT_DEBUG_UTILS_EXTENSION_NAME), "KILN_VALIDATION=1 needs VK_EXT_debug_utils");
        enabled.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    }
    // With validation, synchronization validation too (missing barriers: hazards lavapipe's in-order execution
    // hides but a GPU would not), through VK_EXT_validation_features, which the layer provides.
    // validation_sync false (KILN_VALIDATION_SYNC=0) leaves it off.
    // validation_gpu (KILN_VALIDATION_GPU=1): GPU-assisted validation as well, whose instrumented shaders report
    // out-of-bounds buffer accesses: lavapipe bounds-checks every storage access (reads past a range return 0), so a
    // tile that reads past its binding gives the right answer there and another tensor's bytes on a GPU.
    std::vector<VkValidationFeatureEnableEXT> feature_list;
    if (validation_sync) feature_list.push_back(VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT);
    if (validation_gpu) feature_list.push_back(VK_VALIDATION_FEATURE_ENABLE_GPU_ASSISTED_EXT);
    VkValidationFeaturesEXT features{VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT};
    features.enabledValidationFeatureCount = (uint32_t)feature_list.size();
    features.pEnabledValidationFeatures = feature_list.data();
    bool validation_features = false;
    if (validation) {
        uint32_t n = 0;
        vkEnumerateInstanceExtensionProperties("VK_LAYER_KHRONOS_validation", &n, nullptr);
        std::vector<VkExtensionProperties> lx(n);
        vkEnumerateInstanceExtensionProperties("VK_LAYER_KHRONOS_validation", &n, lx.data());
        const bool has = std::any_of(lx.begin(), lx.end(), [](auto& p) {
            return std::strcmp(p.extensionName, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME) == 0;
        });
        KILN_CHECK(has || !validation_gpu,
                   "KILN_VALIDATION_GPU=1 needs VK_EXT_validation_features from the validation layer, which lacks it");
        validation_features = has && !feature_list.empty();
        if (validation_features) enabled.push_back(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
    }
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "kiln";
    app.pEngineName = "kiln";
    app.apiVersion = detail::instance_api_version();  // 1.3 where the loader has it (linear_cm2.comp's SPIR-V 1.6)
    VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    ci.flags = flags;
    ci.pApplicationInfo = &app;
    ci.enabledExtensionCount = (uint32_t)enabled.size();
    ci.ppEnabledExtensionNames = enabled.data();
    ci.enabledLayerCount = (uint32_t)layers.size();
    ci.ppEnabledLayerNames = layers.data();
    if (validation_features) ci.pNext = &features;
    VkInstance inst = VK_NULL_HANDLE;
    VkResult r = vkCreateInstance(&ci, nullptr, &inst);
    if (r == VK_ERROR_INCOMPATIBLE_DRIVER) no_device("the Vulkan loader found no Vulkan 1.2 driver");
    // A loader that cannot reach any driver at all (wine's winevulkan without a display driver) fails this way.
    if (r == VK_ERROR_INITIALIZATION_FAILED)
        no_device("the Vulkan loader could not initialize (VK_ERROR_INITIALIZATION_FAILED)");
    VK_CHECK(r);
    load_instance(inst);
    if (validation) {
        VkDebugUtilsMessengerCreateInfoEXT mi{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
        mi.messageSeverity =
            VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
        mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                         VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
        mi.pfnUserCallback = debug_cb;
        mi.pUserData = validation_gpu ? (void*)&kSkipGpuAvNotes : nullptr;
        auto fn = (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(inst, "vkCreateDebugUtilsMessengerEXT");
        if (fn) VK_CHECK(fn(inst, &mi, nullptr, messenger));
    }
    return inst;
}

// The features and extensions Kiln enables on a device (where DeviceInfo found them), chained from f2 for
// vkCreateDevice. Not copyable: the chain points into it.
struct EnabledFeatures {
    VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceVulkan13Features f13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR cmf{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
    VkPhysicalDeviceCooperativeMatrix2FeaturesNV cm2{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV};
    VkPhysicalDeviceSubgroupSizeControlFeatures sgc{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
    std::vector<const char*> extensions;

    explicit EnabledFeatures(const DeviceInfo& info);
    EnabledFeatures(const EnabledFeatures&) = delete;
    EnabledFeatures& operator=(const EnabledFeatures&) = delete;

private:
    void chain(void* s) {  // s after f12 (every device Kiln runs on has Vulkan 1.2)
        static_cast<VkBaseOutStructure*>(s)->pNext = static_cast<VkBaseOutStructure*>(f12.pNext);
        f12.pNext = s;
    }
};

EnabledFeatures::EnabledFeatures(const DeviceInfo& info) {
    f2.pNext = &f11;
    f11.pNext = &f12;
    f11.storageBuffer16BitAccess = VK_TRUE;
    f2.features.shaderInt64 = info.int64;  // the device loop's correctly rounded division (shaders/loop.glsl)
    f2.features.shaderFloat64 = info.fp64;
    f12.timelineSemaphore = info.timeline_semaphore;
    f12.shaderFloat16 = info.fp16_arith;
    f12.bufferDeviceAddress = info.buffer_device_address;  // block weights selected on the device
    if (info.coopmat_m) {  // linear_coopmat.comp declares the Vulkan memory model; other shaders' atomics are
        cmf.cooperativeMatrix = VK_TRUE;  // Device-scope, which it allows only with vulkanMemoryModelDeviceScope
        f12.vulkanMemoryModel = VK_TRUE;
        f12.vulkanMemoryModelDeviceScope = VK_TRUE;
        chain(&cmf);
        extensions.push_back(VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME);
    }
    // linear_cm2.comp (DeviceInfo::cm2_bm): workgroup-scope matrices of flexible dimensions, per-element operations,
    // tensor addressing; maintenance4 for its LocalSizeId. Chained only where the query found all of them.
    if (info.coopmat_m && info.cm2_bm) {
        cm2.cooperativeMatrixWorkgroupScope = cm2.cooperativeMatrixFlexibleDimensions = VK_TRUE;
        cm2.cooperativeMatrixPerElementOperations = cm2.cooperativeMatrixTensorAddressing = VK_TRUE;
        f13.maintenance4 = VK_TRUE;
        chain(&cm2);
        extensions.push_back(VK_NV_COOPERATIVE_MATRIX_2_EXTENSION_NAME);
    }
    // Subgroup size control (DeviceInfo::subgroup_control): required sizes and full subgroups for the shaders with
    // cooperative matrices (vk::subgroup_request). In Vulkan 1.3's features, else the extension's.
    if (info.subgroup_control && info.subgroup_control_ext) {
        sgc.subgroupSizeControl = sgc.computeFullSubgroups = VK_TRUE;
        chain(&sgc);
        extensions.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
    } else if (info.subgroup_control) {
        f13.subgroupSizeControl = f13.computeFullSubgroups = VK_TRUE;
    }
    if (f13.maintenance4 || f13.subgroupSizeControl) chain(&f13);  // Vulkan 1.3 (both queries checked it)
    // VK_EXT_memory_budget: heap usage; VK_EXT_external_memory_host: mmapped weights read in place.
    if (info.memory_budget) extensions.push_back(VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
    if (info.host_import) extensions.push_back(VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
    // The spec requires enabling VK_KHR_portability_subset where the device offers it (MoltenVK). Kiln's compute
    // shaders use none of what it restricts (triangle fans, image view swizzles, events, ...).
    if (info.portability_subset) extensions.push_back("VK_KHR_portability_subset");
}
}  // namespace

int Context::validation_errors() { return g_validation_errors.load(); }

void Context::name_object(VkObjectType type, uint64_t handle, const std::string& name) const {
    if (!messenger_) return;
    auto fn = (PFN_vkSetDebugUtilsObjectNameEXT)vkGetInstanceProcAddr(instance_, "vkSetDebugUtilsObjectNameEXT");
    if (!fn) return;
    VkDebugUtilsObjectNameInfoEXT ni{VK_STRUCTURE_TYPE_DEBUG_UTILS_OBJECT_NAME_INFO_EXT};
    ni.objectType = type;
    ni.objectHandle = handle;
    ni.pObjectName = name.c_str();
    fn(device_, &ni);
}
std::string Context::last_validation_message() {
    std::lock_guard<std::mutex> lk(g_msg_mutex);
    return g_last_msg;
}

std::vector<DeviceInfo> list_devices(const ContextOptions& o) {
    VkDebugUtilsMessengerEXT m = VK_NULL_HANDLE;
    VkInstance inst = make_instance(o, false, false, false, &m);
    std::vector<DeviceInfo> out;
    try {
        auto pds = detail::physical_devices(inst);
        if (pds.empty()) no_device("the Vulkan drivers list none");
        for (size_t i = 0; i < pds.size(); ++i) {
            out.push_back(detail::query(pds[i], (int)i));
            detail::query_coopmat(inst, pds[i], out.back());
        }
    } catch (...) {
        vkDestroyInstance(inst, nullptr);
        throw;
    }
    vkDestroyInstance(inst, nullptr);
    return out;
}

const Settings& Context::settings() const {
    if (!settings_.test.live) return settings_;
    thread_local Settings live;  // tests only (TestHooks::live): read anew on every call
    live = settings_.test.live();
    return live;
}

// transfer_queue: "0", "1" or "split" (see CopyQueue); needs the device's info_.
void Context::choose_copy_queue(const std::string& q) {
    KILN_CHECK(q == "0" || q == "1" || q == "split", "KILN_TRANSFER_QUEUE=", q, ": expected 0, 1 or split");
    if (q != "0" && info_.timeline_semaphore)
        copy_queue_ = q == "split"                 ? CopyQueue::split
                      : info_.transfer_family >= 0 ? CopyQueue::transfer
                                                   : CopyQueue::in_step;
    if (q != "0" && copy_queue_ == CopyQueue::in_step)
        std::fprintf(stderr, "kiln: note: KILN_TRANSFER_QUEUE=%s: device '%s' has %s; ring copies stay in the step\n",
                     q.c_str(), info_.name.c_str(),
                     !info_.timeline_semaphore ? "no timelineSemaphore" : "no transfer-only queue family");
}

// A constructor that throws runs no destructor: what init() made is destroyed here (a C API caller may retry).
Context::Context(const Settings& settings) : settings_(settings) {
    static const uint64_t open_files = platform::raise_open_file_limit();  // a driver's descriptors per memory object
    (void)open_files;
    try {
        init(settings);
    } catch (...) {
        destroy();
        throw;
    }
}

void Context::init(const Settings& settings) {
    const ContextOptions& o = settings.context;
    faults_.memory_limit = settings.test.device_memory_limit;
    faults_.lose_device_after = settings.test.device_lost_after;
    instance_ = make_instance(o, o.validation, o.validation_sync, o.validation_gpu, &messenger_);
    auto pds = detail::physical_devices(instance_);
    if (pds.empty()) no_device("the Vulkan drivers list none");
    const int device = o.device;
    int chosen = 0;
    if (device >= 0) {
        KILN_CHECK(device < (int)pds.size(), "device ", device, " does not exist (", pds.size(),
                   " devices; see `kiln devices`)");
        chosen = device;
    } else {
        int best = -1;
        for (size_t i = 0; i < pds.size(); ++i) {
            VkPhysicalDeviceProperties p;
            vkGetPhysicalDeviceProperties(pds[i], &p);
            if (detail::type_rank(p.deviceType) > best) best = detail::type_rank(p.deviceType), chosen = (int)i;
        }
    }
    phys_ = pds[(size_t)chosen];
    info_ = detail::query(phys_, chosen);
    // Test hook: a CPU device presented as a discrete GPU without unified memory (KILN_TEST_DISCRETE): executors take
    // a GPU's choices (block weights by address, ring slots, nothing read in place) and device blocks stay unmapped.
    if (settings.test.discrete) detail::present_as_discrete(info_);
    // Test hook: a device with fewer storage buffers per stage than this one (KILN_TEST_MAX_STORAGE_BUFFERS).
    if (settings.test.max_storage_buffers)
        info_.max_storage_buffers_per_stage =
            std::min(info_.max_storage_buffers_per_stage, settings.test.max_storage_buffers);
    // Test hook: a device whose texel buffers hold fewer elements (KILN_TEST_MAX_TEXEL_ELEMENTS): "tex" linears
    // whose views would exceed it run the storage-buffer shader.
    if (settings.test.max_texel_elements)
        info_.max_texel_elements = std::min(info_.max_texel_elements, settings.test.max_texel_elements);
    detail::query_coopmat(instance_, phys_, info_);
    KILN_CHECK(info_.fp16_storage, "device '", info_.name,
               "' lacks the Vulkan feature storageBuffer16BitAccess, "
               "which Kiln needs for f16/bf16 weights");
    KILN_CHECK(info_.subgroup_arithmetic, "device '", info_.name,
               "' lacks subgroup arithmetic in compute shaders "
               "(VK_SUBGROUP_FEATURE_ARITHMETIC_BIT), which Kiln's reductions need");
    vkGetPhysicalDeviceMemoryProperties(phys_, &mem_props_);

    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(phys_, &nq, nullptr);
    std::vector<VkQueueFamilyProperties> qs(nq);
    vkGetPhysicalDeviceQueueFamilyProperties(phys_, &nq, qs.data());
    family_ = UINT32_MAX;
    for (uint32_t i = 0; i < nq; ++i)  // prefer a compute queue that has timestamps
        if ((qs[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && (family_ == UINT32_MAX || qs[i].timestampValidBits)) {
            if (family_ == UINT32_MAX || !qs[family_].timestampValidBits) family_ = i;
        }
    KILN_CHECK(family_ != UINT32_MAX, "device '", info_.name, "' has no compute queue");

    choose_copy_queue(o.transfer_queue);
    float prio = 1.f;
    VkDeviceQueueCreateInfo qcis[2] = {{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO},
                                       {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO}};
    qcis[0].queueFamilyIndex = family_;
    qcis[0].queueCount = 1;
    qcis[0].pQueuePriorities = &prio;
    qcis[1] = qcis[0];
    qcis[1].queueFamilyIndex = (uint32_t)info_.transfer_family;
    const EnabledFeatures features(info_);
    VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, &features.f2};
    dci.queueCreateInfoCount = copy_queue_ == CopyQueue::transfer ? 2 : 1;
    dci.pQueueCreateInfos = qcis;
    dci.enabledExtensionCount = (uint32_t)features.extensions.size();
    dci.ppEnabledExtensionNames = features.extensions.data();
    VK_CHECK(vkCreateDevice(phys_, &dci, nullptr, &device_));
    vkGetDeviceQueue(device_, family_, 0, &queue_);

    VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pci.queueFamilyIndex = family_;
    VK_CHECK(vkCreateCommandPool(device_, &pci, nullptr, &pool_));
    families_[0] = families_[1] = family_;
    if (copy_queue_ == CopyQueue::transfer) {
        families_[1] = (uint32_t)info_.transfer_family;
        vkGetDeviceQueue(device_, families_[1], 0, &transfer_queue_);
        pci.queueFamilyIndex = families_[1];
        VK_CHECK(vkCreateCommandPool(device_, &pci, nullptr, &transfer_pool_));
    }
    VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VK_CHECK(vkCreateFence(device_, &fci, nullptr, &fence_));

    // The pipeline cache of the last run on this device (see pipeline_cache.h).
    const PipelineCacheKey key = pipeline_cache_key(phys_);
    cache_info_.path = o.pipeline_cache && !o.skip_pipeline_cache_file ? pipeline_cache_path(key, o.cache_dir) : "";
    cache_info_.status = "disabled";
    if (!cache_info_.path.empty()) {
        bool warn = false;
        cache_loaded_ = read_pipeline_cache(cache_info_.path, key, cache_info_.status, warn);
        if (warn)
            std::fprintf(stderr, "kiln: warning: ignoring pipeline cache %s (%s); it will be rewritten\n",
                         cache_info_.path.c_str(), cache_info_.status.c_str());
    }
    VkPipelineCacheCreateInfo cci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    cci.initialDataSize = cache_loaded_.size();
    cci.pInitialData = cache_loaded_.empty() ? nullptr : cache_loaded_.data();
    if (vkCreatePipelineCache(device_, &cci, nullptr, &cache_) != VK_SUCCESS) {  // the driver refused it: start empty
        std::fprintf(stderr, "kiln: warning: the driver rejected pipeline cache %s; it will be rewritten\n",
                     cache_info_.path.c_str());
        cache_info_.status = "corrupt: rejected by the driver";
        cache_loaded_.clear();
        cci.initialDataSize = 0;
        cci.pInitialData = nullptr;
        VK_CHECK(vkCreatePipelineCache(device_, &cci, nullptr, &cache_));
    }
    cache_info_.loaded_bytes = cache_loaded_.size();
}

uint64_t Context::heap_usage_bytes() const {
    if (!info_.memory_budget) return 0;
    VkPhysicalDeviceMemoryBudgetPropertiesEXT budget{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
    VkPhysicalDeviceMemoryProperties2 mp{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2, &budget};
    vkGetPhysicalDeviceMemoryProperties2(phys_, &mp);
    uint64_t used = 0;
    for (uint32_t i = 0; i < mp.memoryProperties.memoryHeapCount; ++i)
        if (mp.memoryProperties.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) used += budget.heapUsage[i];
    return used;
}

void Context::sample_heap_usage() { peak_heap_usage_ = std::max(peak_heap_usage_, heap_usage_bytes()); }
void Context::reset_peak_heap_usage() { peak_heap_usage_ = heap_usage_bytes(); }

PipelinePool* Context::pipeline_pool() {
    if (!reuse_pipelines_ || cold_cache_) return nullptr;
    if (!pipelines_) {
        pipelines_ = std::make_unique<PipelinePool>();
        pipelines_->device = device_;
    }
    return pipelines_.get();
}

void Context::set_cold_pipeline_cache(bool cold) {
    if (cold && !cold_cache_) {
        VkPipelineCacheCreateInfo cci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
        VK_CHECK(vkCreatePipelineCache(device_, &cci, nullptr, &cold_cache_));
    } else if (!cold && cold_cache_) {
        VkResult r = vkMergePipelineCaches(device_, cache_, 1, &cold_cache_);
        vkDestroyPipelineCache(device_, cold_cache_, nullptr);
        cold_cache_ = VK_NULL_HANDLE;
        VK_CHECK(r);
    }
}

// Never throws and never fails a run: a cache that cannot be written costs the next run its compile time only.
void Context::save_pipeline_cache() {
    if (cache_info_.path.empty() || !cache_) return;
    try {
        size_t n = 0;
        if (vkGetPipelineCacheData(device_, cache_, &n, nullptr) != VK_SUCCESS || n == 0) return;
        std::vector<char> blob(n);
        if (vkGetPipelineCacheData(device_, cache_, &n, blob.data()) != VK_SUCCESS) return;
        blob.resize(n);
        if (blob == cache_loaded_) return;  // nothing new
        std::string why;
        if (!write_pipeline_cache(cache_info_.path, pipeline_cache_key(phys_), blob, why))
            std::fprintf(stderr, "kiln: warning: pipeline cache not saved: %s (KILN_PIPELINE_CACHE=0 turns it off)\n",
                         why.c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kiln: warning: pipeline cache not saved: %s\n", e.what());
    }
}

Context::~Context() { destroy(); }

void Context::destroy() noexcept {
    if (device_) {
        vkDeviceWaitIdle(device_);
        pipelines_.reset();
        if (cold_cache_) {  // what a cold start created is kept, as set_cold_pipeline_cache(false) would
            vkMergePipelineCaches(device_, cache_, 1, &cold_cache_);
            vkDestroyPipelineCache(device_, cold_cache_, nullptr);
        }
        save_pipeline_cache();
        vkDestroyPipelineCache(device_, cache_, nullptr);
        vkDestroyFence(device_, fence_, nullptr);
        vkDestroyCommandPool(device_, pool_, nullptr);
        if (transfer_pool_) vkDestroyCommandPool(device_, transfer_pool_, nullptr);
        vkDestroyDevice(device_, nullptr);
    }
    if (messenger_) {
        auto fn =
            (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(instance_, "vkDestroyDebugUtilsMessengerEXT");
        if (fn) fn(instance_, messenger_, nullptr);
    }
    if (instance_) vkDestroyInstance(instance_, nullptr);
}

VkCommandBuffer Context::begin_one_shot() {
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    VkCommandBuffer cb;
    VK_CHECK(vkAllocateCommandBuffers(device_, &ai, &cb));
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    VK_CHECK(vkBeginCommandBuffer(cb, &bi));
    return cb;
}

void Context::submit_wait(VkCommandBuffer cb, bool free) {
    try {
        submit(cb, fence_);
        wait(fence_);
    } catch (...) {
        if (free) vkFreeCommandBuffers(device_, pool_, 1, &cb);
        throw;
    }
    if (free) vkFreeCommandBuffers(device_, pool_, 1, &cb);
}

const char* copy_queue_name(CopyQueue q) {
    return q == CopyQueue::transfer ? "transfer" : q == CopyQueue::split ? "split" : "in_step";
}

void Context::set_copy_queue(CopyQueue q) {
    KILN_CHECK(q == CopyQueue::in_step || info_.timeline_semaphore, "device '", info_.name,
               "' lacks timelineSemaphore, which copies in their own batches need");
    KILN_CHECK(q != CopyQueue::transfer || transfer_queue_, "no transfer queue was made for device '", info_.name,
               "' (KILN_TRANSFER_QUEUE=1 when the context is made, on a device with a transfer-only family)");
    copy_queue_ = q;
}

void Context::set_sharing(VkBufferCreateInfo& bi) const {
    if (transfer_queue_) {
        bi.sharingMode = VK_SHARING_MODE_CONCURRENT;
        bi.queueFamilyIndexCount = 2;
        bi.pQueueFamilyIndices = families_;
    } else {
        bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    }
}

void Context::submit(const VkCommandBuffer* cbs, uint32_t count, VkFence fence) {
    VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.commandBufferCount = count;
    si.pCommandBuffers = cbs;
    submit(queue_, &si, 1, fence);
}

void Context::submit(VkQueue queue, const VkSubmitInfo* batches, uint32_t count, VkFence fence) {
    if (lost_) KILN_FAIL_AS(device_lost, "the Vulkan device '", info_.name, "' was lost (VK_ERROR_DEVICE_LOST)");
    // The test hook: n more submissions succeed, then the device is "lost".
    for (int64_t n = faults_.lose_device_after.load(); n >= 0;)
        if (faults_.lose_device_after.compare_exchange_weak(n, n - 1)) {
            if (n > 0) break;
            lost_ = true;
            KILN_FAIL_AS(device_lost, "the Vulkan device '", info_.name,
                         "' was lost (VK_ERROR_DEVICE_LOST, injected by the test hook)");
        }
    VkResult r = vkQueueSubmit(queue, count, batches, fence);
    if (r == VK_ERROR_DEVICE_LOST) lost_ = true;
    VK_CHECK(r);
}

void Context::wait(VkFence fence) {
    VkResult r = vkWaitForFences(device_, 1, &fence, VK_TRUE, UINT64_MAX);
    if (r == VK_ERROR_DEVICE_LOST) lost_ = true;
    VK_CHECK(r);
    VK_CHECK(vkResetFences(device_, 1, &fence));
}

bool Context::reserve_memory(uint64_t bytes) {
    const uint64_t limit = faults_.memory_limit.load();
    const uint64_t now = memory_bytes_ += bytes;
    if (limit && now > limit) {
        memory_bytes_ -= bytes;
        return false;
    }
    return true;
}

}  // namespace kiln::vk
