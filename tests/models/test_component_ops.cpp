// The component descriptors (models/core/component_ops.h) against the registry: every class with a forward graph has
// one, each kind once; the text-to-image transformers (and only they) tell the plan their shape; every synthetic
// architecture has example inputs. A new kind without its entry fails here rather than at a user's first call.
#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "models/core/component_ops.h"
#include "models/core/forward.h"
#include "models/registry/registry.h"

using namespace kiln;
using models::ComponentKind;
using models::Role;

TEST_CASE("Every class with a forward graph has one descriptor", "[models][component_ops]") {
    std::set<ComponentKind> kinds;
    for (const auto& c : models::component_classes()) {
        INFO(c.name);
        const models::ComponentOps* ops = models::find_component_ops(c.kind);
        if (c.role == Role::tokenizer) {
            CHECK(ops == nullptr);
            continue;
        }
        REQUIRE(ops != nullptr);
        CHECK(ops->kind == c.kind);
        CHECK(ops->prepare != nullptr);
        kinds.insert(c.kind);
    }
    // Each kind once across the three lists (find_component_ops returns the first: a second entry would be dead).
    std::map<ComponentKind, int> entries;
    for (const auto* part :
         {&models::transformer_component_ops(), &models::vae_component_ops(), &models::text_encoder_component_ops()})
        for (const auto& o : *part) ++entries[o.kind];
    CHECK(entries.size() == kinds.size());
    for (auto [kind, n] : entries) {
        INFO(models::class_name(kind));
        CHECK(n == 1);
        CHECK(kinds.count(kind) == 1);  // no entry for a kind the registry has no class of
    }
}

TEST_CASE("The text-to-image transformers, and only they, have a plan shape", "[models][component_ops]") {
    std::set<ComponentKind> t2i;
    for (const auto& f : models::families())
        if (f.text_to_image()) t2i.insert(f.transformer);
    REQUIRE(!t2i.empty());
    for (const auto& c : models::component_classes()) {
        const models::ComponentOps* ops = models::find_component_ops(c.kind);
        if (!ops) continue;
        INFO(c.name);
        CHECK((ops->plan_shape != nullptr) == (t2i.count(c.kind) == 1));
    }
}

TEST_CASE("Every synthetic architecture has example inputs", "[models][component_ops]") {
    REQUIRE(!models::synthetic_archs().empty());
    for (const auto& [name, arch] : models::synthetic_archs()) {
        INFO(name);
        const models::ComponentOps* ops = models::find_component_ops(arch.kind);
        REQUIRE(ops != nullptr);
        CHECK(ops->example != nullptr);
        // Small sides: the example inputs are host tensors only (no graph is built here).
        CHECK(!models::example_inputs(arch.cls, arch.config, 1, 4, 4).empty());
    }
    CHECK_THROWS_WITH(models::example_inputs("AutoencoderKL", {}, 1, 4, 4),
                      Catch::Contains("no example inputs for class 'AutoencoderKL'"));
    CHECK_THROWS_WITH(models::example_inputs("NoSuchModel", {}, 1, 4, 4),
                      Catch::Contains("no example inputs for class 'NoSuchModel'"));
}
