// kiln generate's flag table (apps/kiln/generate_flags.cpp): every row registered once with its help, listed by
// --help, and nothing registered outside it; values parsed into GenerateFlags, which flags were given (what a DiT
// model refuses), and the options every pipeline shares mapped from the flags.
#include <catch2/catch.hpp>
#include <set>

#include "apps/kiln/generate_flags.h"

using namespace kiln;
using namespace kiln::app;

namespace {
// A parsed command line ("" = no flags).
struct Parsed {
    CLI::App app;
    GenerateFlags f;
    explicit Parsed(const std::string& args) {
        add_generate_flags(app, f);
        app.parse(args, false);
    }
};
}  // namespace

TEST_CASE("kiln generate flag table: every flag registered once, with help, in --help", "[apps][flags]") {
    CLI::App app;
    GenerateFlags f;
    add_generate_flags(app, f);
    const auto& rows = generate_flags();
    REQUIRE(f.options.size() == rows.size());
    const std::string help = app.help();
    std::set<std::string> names;
    int text_lists = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
        const GenerateFlag& row = rows[i];
        INFO(row.names);
        const CLI::Option* op = f.options[i];
        REQUIRE(op);
        CHECK(names.insert(op->get_name()).second);
        CHECK(!op->get_description().empty());
        if (row.help) CHECK(op->get_description() == row.help);
        CHECK(help.find(op->get_name()) != std::string::npos);
        CHECK(help.find(op->get_description().substr(0, 40)) != std::string::npos);
        if (row.settings_key) {  // the text lists: one value per occurrence, text models only
            ++text_lists;
            CHECK(std::holds_alternative<std::vector<std::string> models::PromptOptions::*>(row.target));
            CHECK(row.one_per_prompt);
            CHECK(row.scope == FlagScope::text);
        }
    }
    CHECK(text_lists == 5);  // negative_prompt, prompt_2, prompt_3, negative_prompt_2, negative_prompt_3
    // Nothing registered outside the table (CLI11's own --help aside).
    for (const CLI::Option* op : app.get_options()) {
        INFO(op->get_name());
        CHECK((op->get_name() == "--help" || names.count(op->get_name()) == 1));
    }
}

TEST_CASE("kiln generate flag table: defaults, values, given flags", "[apps][flags]") {
    Parsed none("");
    CHECK(none.f.steps == 25);
    CHECK(none.f.guidance == 4.0);
    CHECK(none.f.images == 1);
    CHECK(none.f.out == "kiln.png");
    CHECK(none.f.mode == "regional");
    CHECK(none.f.noise_dtype == "f32");
    CHECK(!none.f.given("--steps"));
    CHECK(none.f.first_text_only_given().empty());

    Parsed p(
        "--steps 7 --prompt a --prompt 'b c' --negative-prompt n --prompt-3 t5 --seed 9 --host-loop --width 64 "
        "--images 2 -o x.png --noise-dtype bf16 --scheduler-config use_karras_sigmas=true --dump d.safetensors "
        "--vae-tiling --vae-tile-size 16 --mode full --scheduler ddim");
    const GenerateFlags& f = p.f;
    CHECK(f.steps == 7);
    CHECK(f.prompts == std::vector<std::string>{"a", "b c"});
    CHECK(f.texts.negatives == std::vector<std::string>{"n"});
    CHECK(f.texts.prompts_3 == std::vector<std::string>{"t5"});
    CHECK(f.texts.prompts_2.empty());
    CHECK(f.images == 2);
    CHECK(f.out == "x.png");
    CHECK(f.given("--steps"));
    CHECK(f.given("--images"));  // by its first long name
    CHECK(f.given("--output"));
    CHECK(!f.given("--guidance"));
    CHECK(f.first_text_only_given() == "--prompt");
    // The options every pipeline shares.
    const models::CommonOptions c = common_options(f);
    CHECK(c.seed == 9);
    CHECK(c.noise_dtype == DType::bf16);
    CHECK(c.host_loop);
    CHECK(c.keep_intermediates);  // --dump
    CHECK(c.tiled_vae);
    CHECK(c.vae_tile_size == 16);
    CHECK(c.mode == exec::Mode::full);
    CHECK(c.scheduler == "ddim");
    CHECK(c.scheduler_config == nlohmann::json{{"use_karras_sigmas", true}});
    CHECK(!c.latents_init);
    // DiT refuses the text models' flags first, then the sizes, each named as given.
    CHECK(Parsed("--width 64 --sigmas 1,0.5").f.first_text_only_given() == "--sigmas");
    CHECK(Parsed("--height 64 --steps 3").f.first_text_only_given() == "--height");
    CHECK(Parsed("--num-images-per-prompt 3").f.images == 3);
}

TEST_CASE("kiln generate flag table: the checks", "[apps][flags]") {
    CHECK_THROWS_AS(Parsed("--noise-dtype f64"), CLI::ValidationError);
    CHECK_THROWS_AS(Parsed("--clip-skip -1"), CLI::ValidationError);
    CHECK_THROWS_AS(Parsed("--transfer-queue 2"), CLI::ValidationError);
    CHECK(Parsed("--clip-skip 2").f.clip_skip == 2);
}
