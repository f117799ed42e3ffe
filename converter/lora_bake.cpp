#include "converter/lora_bake.h"

#include <cmath>
#include <optional>
#include <ostream>

#include "models/layouts/lora.h"
#include "runtime/core/error.h"

namespace kiln::converter {

namespace {
using Terms = std::vector<std::pair<const layouts::LoraModule*, double>>;

// One component's tensors with its LoRA targets merged on read; the LoRA files (shared by the components) own the
// modules the terms point into.
class MergedSet : public layouts::TensorSet {
public:
    MergedSet(std::unique_ptr<layouts::TensorSet> set, std::shared_ptr<const std::vector<layouts::LoraFile>> files,
              std::map<std::string, Terms> terms)
        : set_(std::move(set)), files_(std::move(files)), terms_(std::move(terms)) {}
    const std::vector<layouts::TensorInfo>& tensors() const override { return set_->tensors(); }
    const layouts::TensorInfo* find(const std::string& name) const override { return set_->find(name); }
    Tensor read(const std::string& name) const override {
        auto it = terms_.find(name);
        return it == terms_.end() ? set_->read(name) : layouts::lora_merge(set_->read(name), it->second);
    }
    layouts::Mapped view(const std::string& name) const override {
        return terms_.count(name) ? layouts::Mapped{} : set_->view(name);
    }
    std::string source() const override { return set_->source() + " + LoRA"; }

private:
    std::unique_ptr<layouts::TensorSet> set_;
    std::shared_ptr<const std::vector<layouts::LoraFile>> files_;
    std::map<std::string, Terms> terms_;
};

layouts::LoraTargetFn target_of(const layouts::TensorSet* set) {
    return [set](const std::string& name) -> std::optional<Shape> {
        const layouts::TensorInfo* i = set->find(name);
        return i ? std::optional<Shape>(i->shape) : std::nullopt;
    };
}
}  // namespace

void merge_loras(const std::map<std::string, std::unique_ptr<layouts::TensorSet>*>& sets, const std::string& family,
                 const std::vector<std::pair<std::string, double>>& loras, bool allow_unmatched, std::ostream* log) {
    if (loras.empty()) return;
    std::string have;
    for (const auto& [name, set] : sets) have += (have.empty() ? "" : ", ") + name;
    KILN_CHECK(sets.count("transformer"), "--lora: no transformer to merge LoRAs into (converting ",
               have.empty() ? "no model component" : have, ")");
    layouts::LoraTargets targets;
    targets.transformer = target_of(sets.at("transformer")->get());
    for (const std::string& te : layouts::lora_text_encoders(family))
        if (sets.count(te)) targets.text_encoders[te] = target_of(sets.at(te)->get());
    targets.absent_why = "is not part of this conversion";
    auto files = std::make_shared<std::vector<layouts::LoraFile>>();
    for (const auto& [path, scale] : loras) {
        KILN_CHECK(std::isfinite(scale), "lora ", path, ": scale ", scale, " is not finite");
        files->push_back(layouts::read_lora(path, family, targets, allow_unmatched));
        const layouts::LoraFile& f = files->back();
        layouts::check_mergeable(
            f, [&](const std::string& c, const std::string& w) { return sets.at(c)->get()->find(w)->dtype; },
            "LoRAs merge into f32, f16 or bf16 weights only");
        if (!log) continue;
        *log << "kiln-convert: " << f.summary() << " (merged)\n";
        if (!f.unmatched.empty())
            *log << "kiln-convert: warning: lora " << path << ": " << f.unmatched.size()
                 << " keys match no module and are not applied, e.g. " << f.unmatched[0] << "\n";
        for (const std::string& d : f.dropped) *log << "kiln-convert: warning: lora " << path << ": " << d << "\n";
    }
    // Per component, weight name -> (module, user scale), in the order the files were given (pointers taken once
    // the vector no longer grows).
    std::map<std::string, std::map<std::string, Terms>> terms;
    for (size_t i = 0; i < files->size(); ++i)
        for (const layouts::LoraModule& m : (*files)[i].modules)
            terms[m.component][m.module + ".weight"].push_back({&m, loras[i].second});
    for (auto& [component, t] : terms) {
        std::unique_ptr<layouts::TensorSet>& set = *sets.at(component);
        set = std::make_unique<MergedSet>(std::move(set), files, std::move(t));
    }
}

}  // namespace kiln::converter
