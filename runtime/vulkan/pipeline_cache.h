#pragma once
// The VkPipelineCache persisted between runs, one file per device in ContextOptions::cache_dir ($KILN_CACHE_DIR,
// else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln; KILN_PIPELINE_CACHE=0 turns it off: runtime/core/settings.h).
// File layout (little-endian): a 64-byte Kiln header, then the driver's cache data as
// vkGetPipelineCacheData returned it (which starts with VkPipelineCacheHeaderVersionOne).
// The Kiln header keys the data by vendor/device id, driver version, pipelineCacheUUID and a hash of
// the SPIR-V built into this binary; a file with another key is stale and replaced without a word,
// a damaged or foreign one is ignored with a warning. Nothing here throws.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/vulkan/loader.h"

namespace kiln::vk {

struct PipelineCacheKey {
    uint32_t vendor_id = 0, device_id = 0, driver_version = 0;
    uint8_t uuid[VK_UUID_SIZE] = {};
    uint64_t spirv_hash = 0;  // every embedded shader's name and code
};

PipelineCacheKey pipeline_cache_key(VkPhysicalDevice pd);

// The cache file of this key in folder `dir` ("" when dir is "": no cache folder).
std::string pipeline_cache_path(const PipelineCacheKey& key, const std::string& dir);

// The driver data stored at `path` for `key`; empty when there is none or it is unusable. `status`
// says what happened ("loaded", "missing", "stale", "corrupt: ...", "foreign: ..."); `warn` is true
// for corrupt and foreign files.
std::vector<char> read_pipeline_cache(const std::string& path, const PipelineCacheKey& key, std::string& status,
                                      bool& warn);

// Writes `data` for `key` to `path` atomically (a temporary file in the same folder, then rename).
// Returns false with `why` set on failure (read-only folder, full disk).
bool write_pipeline_cache(const std::string& path, const PipelineCacheKey& key, const std::vector<char>& data,
                          std::string& why);

}  // namespace kiln::vk
