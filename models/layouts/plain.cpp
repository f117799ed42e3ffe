// The plain sets: a diffusers component's safetensors and a Kiln file's component, names unchanged.
#include <algorithm>

#include "models/layouts/layouts.h"
#include "runtime/core/error.h"
#include "runtime/core/gguf.h"
#include "runtime/core/safetensors.h"

namespace kiln::layouts {

namespace {
// Reads go through pread (peak memory one tensor); each shard is also mapped, on first view(), so that the executor
// can copy streamed weights straight from the page cache or, on unified memory, read them in place.
class SafetensorsSet : public TensorSet {
public:
    explicit SafetensorsSet(const std::string& path) : st_(SafeTensors::open(path)), path_(path) {
        for (auto& t : st_.tensors()) infos_.push_back({t.name, t.dtype, t.shape});
        std::sort(infos_.begin(), infos_.end(), [](auto& a, auto& b) { return a.name < b.name; });
        for (size_t i = 0; i < infos_.size(); ++i) index_[infos_[i].name] = i;
        maps_.resize(st_.files().size());
    }
    const std::vector<TensorInfo>& tensors() const override { return infos_; }
    const TensorInfo* find(const std::string& name) const override {
        auto it = index_.find(name);
        return it == index_.end() ? nullptr : &infos_[it->second];
    }
    Tensor read(const std::string& name) const override { return st_.read(name); }
    Mapped view(const std::string& name) const override {
        const SafeTensorInfo* t = st_.find(name);
        if (!t) return {};
        auto& m = maps_[(size_t)t->file];
        if (!m) {
            m = MappedFile::open(st_.files()[(size_t)t->file]);
            // The header was parsed from the file opened first; a file replaced or cut since then is not it.
            m->check();
        }
        if (t->offset + t->nbytes > m->size())
            KILN_FAIL_AS(io, m->path(), ": changed on disk since it was opened; open the model again");
        return {m, t->offset};
    }
    std::string source() const override { return path_; }

private:
    SafeTensors st_;
    std::string path_;
    std::vector<TensorInfo> infos_;
    std::map<std::string, size_t> index_;
    mutable std::vector<std::shared_ptr<const MappedFile>> maps_;  // per shard, mapped on first view()
};
// The file is mapped: tensors are read from the page cache (the pages dropped again once copied), and the executor
// may read them in place. Every read re-checks that the file was not changed or truncated.
class KilnSet : public TensorSet {
public:
    KilnSet(const std::string& path, const std::string& comp)
        : f_(GgufFile::open(path)), map_(MappedFile::open(path)), prefix_(comp + ".") {
        KILN_CHECK(map_->size() == f_.file_size(), path, ": the model file changed while it was opened");
        for (auto& t : f_.tensors())
            if (t.name.rfind(prefix_, 0) == 0) infos_.push_back({t.name.substr(prefix_.size()), t.dtype, t.shape});
        std::sort(infos_.begin(), infos_.end(), [](auto& a, auto& b) { return a.name < b.name; });
        for (size_t i = 0; i < infos_.size(); ++i) index_[infos_[i].name] = i;
    }
    const std::vector<TensorInfo>& tensors() const override { return infos_; }
    const TensorInfo* find(const std::string& name) const override {
        auto it = index_.find(name);
        return it == index_.end() ? nullptr : &infos_[it->second];
    }
    Tensor read(const std::string& name) const override {
        const GgufTensor& t = f_.at(prefix_ + name);
        Tensor out(t.dtype, t.shape);
        map_->read(out.bytes.data(), t.nbytes, t.offset);
        return out;
    }
    Mapped view(const std::string& name) const override {
        const GgufTensor* t = f_.find(prefix_ + name);
        return t ? Mapped{map_, t->offset} : Mapped{};
    }
    std::string source() const override { return f_.path() + " (" + prefix_.substr(0, prefix_.size() - 1) + ")"; }

private:
    GgufFile f_;
    std::shared_ptr<const MappedFile> map_;
    std::string prefix_;
    std::vector<TensorInfo> infos_;
    std::map<std::string, size_t> index_;
};
}  // namespace

std::unique_ptr<TensorSet> open_kiln_component(const std::string& path, const std::string& component) {
    return std::make_unique<KilnSet>(path, component);
}

std::unique_ptr<TensorSet> open_safetensors(const std::string& path) { return std::make_unique<SafetensorsSet>(path); }

}  // namespace kiln::layouts
