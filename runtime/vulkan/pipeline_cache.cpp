#include "runtime/vulkan/pipeline_cache.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtime/core/platform.h"
#include "runtime/vulkan/shader_table.h"

namespace kiln::vk {

namespace {
constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'P', 'C', '0', '1'};

// 64 bytes: magic, key, then the size and FNV-1a hash of the driver data that follows.
struct FileHeader {
    char magic[8];
    uint32_t vendor_id, device_id, driver_version, reserved;
    uint8_t uuid[VK_UUID_SIZE];
    uint64_t spirv_hash, data_size, data_hash;
};
static_assert(sizeof(FileHeader) == 64);

uint64_t fnv1a(const void* p, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

uint64_t spirv_set_hash() {
    uint64_t h = fnv1a("kiln-spirv", 10);
    for (size_t i = 0; i < kShaderCount; ++i) {
        h = fnv1a(kShaderTable[i].name, std::strlen(kShaderTable[i].name) + 1, h);
        h = fnv1a(kShaderTable[i].code, kShaderTable[i].words * 4, h);
    }
    return h;
}

std::string hex(const uint8_t* b, size_t n) {
    std::string s;
    char t[3];
    for (size_t i = 0; i < n; ++i) std::snprintf(t, sizeof t, "%02x", b[i]), s += t;
    return s;
}
}  // namespace

PipelineCacheKey pipeline_cache_key(VkPhysicalDevice pd) {
    VkPhysicalDeviceProperties p;
    vkGetPhysicalDeviceProperties(pd, &p);
    PipelineCacheKey k;
    k.vendor_id = p.vendorID;
    k.device_id = p.deviceID;
    k.driver_version = p.driverVersion;
    std::memcpy(k.uuid, p.pipelineCacheUUID, VK_UUID_SIZE);
    static const uint64_t h = spirv_set_hash();  // the embedded shaders never change within a process
    k.spirv_hash = h;
    return k;
}

std::string pipeline_cache_path(const PipelineCacheKey& key, const std::string& dir) {
    if (dir.empty()) return "";
    // One file per device: a driver update or a new Kiln build replaces it rather than adding one.
    char name[64];
    std::snprintf(name, sizeof name, "/pipelines-%04x-%04x.bin", key.vendor_id, key.device_id);
    return dir + name;
}

std::vector<char> read_pipeline_cache(const std::string& path, const PipelineCacheKey& key, std::string& status,
                                      bool& warn) {
    warn = false;
    std::vector<char> none;
    std::ifstream f(path, std::ios::binary);
    if (!f) return status = "missing", none;
    std::vector<char> file((std::istreambuf_iterator<char>(f)), {});
    auto bad = [&](bool foreign, const std::string& why) {
        warn = true;
        status = (foreign ? "foreign: " : "corrupt: ") + why;
        return none;
    };
    FileHeader h;
    if (file.size() < sizeof h) return bad(false, "shorter than its header");
    std::memcpy(&h, file.data(), sizeof h);
    if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) return bad(false, "not a Kiln pipeline cache");
    if (h.data_size != file.size() - sizeof h) return bad(false, "truncated or padded");
    const char* data = file.data() + sizeof h;
    if (fnv1a(data, h.data_size) != h.data_hash) return bad(false, "checksum mismatch");
    if (h.vendor_id != key.vendor_id || h.device_id != key.device_id) return bad(true, "written for another device");
    if (h.driver_version != key.driver_version || std::memcmp(h.uuid, key.uuid, VK_UUID_SIZE) != 0 ||
        h.spirv_hash != key.spirv_hash)
        return status = "stale", none;  // another driver or Kiln build: normal, replaced on exit
    // The driver's own header (VkPipelineCacheHeaderVersionOne) must name this device too.
    VkPipelineCacheHeaderVersionOne vh;
    if (h.data_size < sizeof vh) return bad(false, "driver data shorter than its header");
    std::memcpy(&vh, data, sizeof vh);
    if (vh.headerSize < sizeof vh || vh.headerSize > h.data_size ||
        vh.headerVersion != VK_PIPELINE_CACHE_HEADER_VERSION_ONE)
        return bad(false, "bad driver header");
    if (vh.vendorID != key.vendor_id || vh.deviceID != key.device_id ||
        std::memcmp(vh.pipelineCacheUUID, key.uuid, VK_UUID_SIZE) != 0)
        return bad(true, "driver header names vendor " + std::to_string(vh.vendorID) + " device " +
                             std::to_string(vh.deviceID) + " uuid " + hex(vh.pipelineCacheUUID, VK_UUID_SIZE));
    status = "loaded";
    return std::vector<char>(data, data + h.data_size);
}

bool write_pipeline_cache(const std::string& path, const PipelineCacheKey& key, const std::vector<char>& data,
                          std::string& why) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    if (ec) return why = "cannot create " + fs::path(path).parent_path().string() + ": " + ec.message(), false;
    FileHeader h{};
    std::memcpy(h.magic, kMagic, sizeof kMagic);
    h.vendor_id = key.vendor_id;
    h.device_id = key.device_id;
    h.driver_version = key.driver_version;
    std::memcpy(h.uuid, key.uuid, VK_UUID_SIZE);
    h.spirv_hash = key.spirv_hash;
    h.data_size = data.size();
    h.data_hash = fnv1a(data.data(), data.size());
    // The pid keeps two processes that exit together from writing the same temporary file.
    const std::string tmp = path + ".tmp" + std::to_string(platform::process_id());
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!f) return why = "cannot write " + tmp, false;
        f.write(reinterpret_cast<const char*>(&h), sizeof h);
        f.write(data.data(), (std::streamsize)data.size());
        f.flush();
        if (!f) {
            f.close();
            fs::remove(tmp, ec);
            return why = "cannot write " + tmp + " (disk full?)", false;
        }
    }
    fs::rename(tmp, path, ec);
    if (ec) {
        why = "cannot rename " + tmp + " to " + path + ": " + ec.message();
        fs::remove(tmp, ec);
        return false;
    }
    // Earlier Kiln builds named the file by pipelineCacheUUID alone (pipelines-<32 hex digits>.bin), without a
    // Kiln header; such files are never read again.
    for (auto it = fs::directory_iterator(fs::path(path).parent_path(), ec); !ec && it != fs::directory_iterator();
         it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.size() == 10 + 32 + 4 && name.rfind("pipelines-", 0) == 0 &&
            name.compare(name.size() - 4, 4, ".bin") == 0 &&
            name.find_first_not_of("0123456789abcdef", 10) == name.size() - 4) {
            std::error_code rm;
            fs::remove(it->path(), rm);
        }
    }
    return true;
}

}  // namespace kiln::vk
