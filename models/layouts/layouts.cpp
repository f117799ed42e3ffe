// inspect() and open_component(): a component's tensors under diffusers' names, read through a mapping of the file
// (never the whole file: each read touches the tensor's pages, then drops them from the resident set).
#include "models/layouts/layouts.h"

#include <algorithm>
#include <cstring>

#include "models/layouts/layout_map.h"
#include "runtime/core/error.h"

namespace kiln::layouts {

namespace {

using detail::Entry;
using detail::Op;

class LayoutSet final : public TensorSet {
public:
    LayoutSet(detail::Container c, std::vector<Entry> entries, std::string source)
        : c_(std::move(c)), entries_(std::move(entries)), source_(std::move(source)) {
        for (const Entry& e : entries_) infos_.push_back(e.info);
        for (const auto& f : c_.files) files_.push_back(MappedFile::open(f));
    }
    const std::vector<TensorInfo>& tensors() const override { return infos_; }
    const TensorInfo* find(const std::string& name) const override {
        const Entry* e = entry(name);
        return e ? &e->info : nullptr;
    }
    Tensor read(const std::string& name) const override;
    Mapped view(const std::string& name) const override;
    std::string source() const override { return source_; }

private:
    const Entry* entry(const std::string& name) const {
        auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                                   [](const Entry& e, const std::string& n) { return e.info.name < n; });
        return it != entries_.end() && it->info.name == name ? &*it : nullptr;
    }
    const Entry& at(const std::string& name) const {
        const Entry* e = entry(name);
        KILN_CHECK(e, "missing tensor '", name, "' in ", source_);
        return *e;
    }
    // Bytes of rows [0, r) of a source tensor: rows are whole quantization blocks, so this is exact.
    uint64_t row_offset(const detail::Source& s, int64_t r) const { return s.nbytes / (uint64_t)s.shape[0] * r; }

    detail::Container c_;
    std::vector<Entry> entries_;
    std::vector<TensorInfo> infos_;
    std::vector<std::shared_ptr<const MappedFile>> files_;
    std::string source_;
};

Tensor LayoutSet::read(const std::string& name) const {
    const Entry& e = at(name);
    Tensor t(e.info.dtype, e.info.shape);  // zero-filled
    if (e.op == Op::zero) return t;
    const detail::Source& s = c_.tensors[e.src];
    const MappedFile& f = *files_[(size_t)s.file];
    switch (e.op) {
        case Op::copy:
        case Op::reshape:
            f.read(t.bytes.data(), s.nbytes, s.offset);
            break;
        case Op::rows:
            f.read(t.bytes.data(), t.bytes.size(), s.offset + row_offset(s, e.r0));
            break;
        case Op::zero:
            break;
        case Op::swap: {  // [a; b] -> [b; a]
            const uint64_t half = s.nbytes / 2;
            f.read(t.bytes.data(), half, s.offset + half);
            f.read(t.bytes.data() + half, half, s.offset);
            break;
        }
    }
    return t;
}

Mapped LayoutSet::view(const std::string& name) const {
    const Entry& e = at(name);
    if (e.op == Op::swap || e.op == Op::zero) return {};
    const detail::Source& s = c_.tensors[e.src];
    const uint64_t off = s.offset + (e.op == Op::rows ? row_offset(s, e.r0) : 0);
    return {files_[(size_t)s.file], off};
}

// A CLIP set with an identity text_projection added (see with_identity_projection).
class IdentityProjection final : public TensorSet {
public:
    explicit IdentityProjection(std::unique_ptr<TensorSet> base) : base_(std::move(base)) {
        infos_ = base_->tensors();
        const TensorInfo* emb = base_->find("text_model.embeddings.token_embedding.weight");
        KILN_CHECK(emb && emb->shape.size() == 2, base_->source(),
                   ": no text_model.embeddings.token_embedding.weight to size an identity text_projection");
        proj_ = {"text_projection.weight", DType::f32, {emb->shape[1], emb->shape[1]}};
        infos_.insert(std::upper_bound(infos_.begin(), infos_.end(), proj_,
                                       [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; }),
                      proj_);
    }
    const std::vector<TensorInfo>& tensors() const override { return infos_; }
    const TensorInfo* find(const std::string& name) const override {
        return name == proj_.name ? &proj_ : base_->find(name);
    }
    Tensor read(const std::string& name) const override {
        if (name != proj_.name) return base_->read(name);
        Tensor t(DType::f32, proj_.shape);
        for (int64_t r = 0; r < proj_.shape[0]; ++r) t.data<float>()[r * proj_.shape[0] + r] = 1.f;
        return t;
    }
    Mapped view(const std::string& name) const override { return name == proj_.name ? Mapped{} : base_->view(name); }
    std::string source() const override { return base_->source(); }

private:
    std::unique_ptr<TensorSet> base_;
    std::vector<TensorInfo> infos_;
    TensorInfo proj_;
};

// A set under prefixed names (see with_prefix).
class Prefixed final : public TensorSet {
public:
    Prefixed(std::unique_ptr<TensorSet> base, std::string prefix) : base_(std::move(base)), prefix_(std::move(prefix)) {
        for (TensorInfo t : base_->tensors()) {  // the order is kept: one prefix on every name
            t.name = prefix_ + t.name;
            infos_.push_back(std::move(t));
        }
    }
    const std::vector<TensorInfo>& tensors() const override { return infos_; }
    const TensorInfo* find(const std::string& name) const override {
        auto it = std::lower_bound(infos_.begin(), infos_.end(), name,
                                   [](const TensorInfo& t, const std::string& n) { return t.name < n; });
        return it != infos_.end() && it->name == name ? &*it : nullptr;
    }
    Tensor read(const std::string& name) const override { return base_->read(strip(name)); }
    Mapped view(const std::string& name) const override { return base_->view(strip(name)); }
    std::string source() const override { return base_->source(); }

private:
    std::string strip(const std::string& name) const {
        KILN_CHECK(name.compare(0, prefix_.size(), prefix_) == 0, "missing tensor '", name, "' in ", source());
        return name.substr(prefix_.size());
    }
    std::unique_ptr<TensorSet> base_;
    std::string prefix_;
    std::vector<TensorInfo> infos_;
};

std::string roles_of(const std::vector<detail::Group>& groups) {
    std::string s;
    for (const auto& g : groups) s += (s.empty() ? "" : ", ") + g.det.role;
    return s;
}

}  // namespace

FileInfo inspect(const std::string& path) {
    detail::Container c = detail::read_container(path);
    FileInfo info;
    info.path = path;
    info.container = c.kind;
    info.gguf_architecture = c.arch;
    for (const auto& t : c.tensors) ++info.dtype_counts[dtype_name(t.dtype)];
    for (const detail::Group& g : detail::detect(c)) {
        Detected d = g.det;
        d.n_tensors = detail::map_component(c, g).size();
        info.components.push_back(d);
    }
    return info;
}

std::unique_ptr<TensorSet> open_component(const std::string& path, const std::string& role) {
    detail::Container c = detail::read_container(path);
    std::vector<detail::Group> groups = detail::detect(c, role);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const detail::Group& g) { return g.det.role == role; });
    KILN_CHECK(it != groups.end(), path, " holds no ", role, " (it holds: ", roles_of(groups), ")");
    const Detected d = it->det;
    std::vector<Entry> entries = detail::map_component(c, *it);
    // Stability's SD3 file: its CLIP-L is used with an identity projection when it carries none (SAI's reference
    // code returns the unprojected pooled output; diffusers' loader sets text_projection = eye(hidden)).
    const bool sd3_file =
        std::any_of(groups.begin(), groups.end(), [](const detail::Group& g) { return g.det.family == "sd3"; });
    const std::string source = path + " (" + d.layout + ", " + d.role + ")";
    auto set = std::make_unique<LayoutSet>(std::move(c), std::move(entries), source);
    if (role == "clip_l" && sd3_file) return with_identity_projection(std::move(set));
    return set;
}

std::unique_ptr<TensorSet> with_prefix(std::unique_ptr<TensorSet> set, const std::string& prefix) {
    return std::make_unique<Prefixed>(std::move(set), prefix);
}

std::unique_ptr<TensorSet> with_identity_projection(std::unique_ptr<TensorSet> clip) {
    if (clip->find("text_projection.weight")) return clip;
    return std::make_unique<IdentityProjection>(std::move(clip));
}

}  // namespace kiln::layouts
