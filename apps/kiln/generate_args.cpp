// kiln generate's arguments and files: class labels, prompt files, number lists, KEY=VALUE settings, and the
// image files it writes.
#include "apps/kiln/generate_args.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "apps/kiln/png.h"
#include "runtime/core/error.h"

namespace kiln::app {

std::vector<int> parse_labels(const std::string& s, const nlohmann::json& model_index) {
    std::vector<int> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        KILN_CHECK(!item.empty(), "--class-labels: empty entry in '", s, "'");
        char* end = nullptr;
        long v = std::strtol(item.c_str(), &end, 10);
        if (*end == '\0') {
            out.push_back((int)v);
            continue;
        }
        // A label name: look it up in model_index.json's id2label, as diffusers' DiT pipeline's get_label_ids does.
        bool found = false;
        if (model_index.contains("id2label"))
            for (auto& [id, name] : model_index["id2label"].items()) {
                // ImageNet labels list synonyms: "tench, Tinca tinca" (diffusers' DiT pipeline splits them the same
                // way).
                std::stringstream names(name.is_string() ? name.get<std::string>() : "");
                std::string part;
                while (!found && std::getline(names, part, ','))
                    if (part.erase(0, part.find_first_not_of(' ')) == item) out.push_back(std::stoi(id)), found = true;
            }
        KILN_CHECK(found, "--class-labels: '", item, "' is neither a number nor a label of this model");
    }
    // A model that names its classes (model_index.json id2label) only knows those.
    if (model_index.contains("id2label") && model_index["id2label"].is_object())
        for (int id : out)
            KILN_CHECK(model_index["id2label"].contains(std::to_string(id)), "--class-labels: class ", id,
                       " is not one of this model's ", model_index["id2label"].size(), " labels (see `kiln info`)");
    return out;
}

// Writes one image file per image (NAME-0.png, ...; NAME-0.jpg for a .jpg path), or one grid / single image to
// `out`, in the format its extension names.
void write_images(const Tensor& im, const std::string& out, bool grid, int upscale, int quality,
                  const std::vector<std::pair<std::string, std::string>>& text) {
    const int B = (int)im.shape[0], H = (int)im.shape[1], W = (int)im.shape[2], C = (int)im.shape[3];
    if (grid || B == 1) {
        Tensor gimg = B == 1 ? im : make_grid(im, std::min(B, 10));
        write_image(out, gimg.data<float>(), (int)gimg.shape[1], (int)gimg.shape[2], C, upscale, text, quality);
        std::fprintf(stderr, "wrote %s\n", out == "-" ? "the PNG to standard output" : out.c_str());
        return;
    }
    KILN_CHECK(out != "-", "-o -: ", B, " images do not fit one standard output (add --grid)");
    const std::string ext = image_extension(out), base = out.substr(0, out.size() - ext.size());
    for (int b = 0; b < B; ++b) {
        std::string p = base + "-" + std::to_string(b) + (ext.empty() ? ".png" : ext);
        write_image(p, im.data<float>() + (size_t)b * H * W * C, H, W, C, upscale, text, quality);
        std::fprintf(stderr, "wrote %s\n", p.c_str());
    }
}

// The non-empty lines of a prompt file ('-': stdin), each one generation of one prompt.
std::vector<std::vector<std::string>> read_prompt_file(const std::string& path) {
    std::ifstream f;
    std::istream* in = &std::cin;
    if (path != "-") {
        f.open(path, std::ios::binary);
        KILN_CHECK(f.good(), path, ": cannot open the prompt file");
        in = &f;
    }
    std::vector<std::vector<std::string>> jobs;
    std::string line;
    while (std::getline(*in, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") != std::string::npos) jobs.push_back({line});
    }
    KILN_CHECK(!jobs.empty(), path, ": no prompt in the prompt file");
    return jobs;
}

std::vector<double> parse_numbers(const std::string& list, const char* flag) {
    std::vector<double> out;
    std::stringstream ss(list);
    for (std::string item; std::getline(ss, item, ',');) {
        char* end = nullptr;
        const double v = std::strtod(item.c_str(), &end);
        KILN_CHECK(!item.empty() && end && *end == 0, flag, ": '", item, "' is not a number");
        out.push_back(v);
    }
    return out;
}

std::vector<int> parse_indices(const std::string& list, const char* flag, const char* what) {
    std::vector<int> out;
    std::stringstream ss(list);
    for (std::string item; std::getline(ss, item, ',');) {
        char* end = nullptr;
        errno = 0;
        const long v = std::strtol(item.c_str(), &end, 10);
        KILN_CHECK(!item.empty() && end && *end == 0 && errno == 0 && v >= INT_MIN && v <= INT_MAX, flag, ": '", item,
                   "' is not ", what);
        out.push_back((int)v);
    }
    return out;
}

nlohmann::json parse_key_values(const std::vector<std::string>& items, const char* flag) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& item : items) {
        const size_t eq = item.find('=');
        KILN_CHECK(eq != std::string::npos && eq > 0, flag, " '", item, "': expected KEY=VALUE");
        const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
        nlohmann::json v = nlohmann::json::parse(value, nullptr, false);
        out[key] = v.is_discarded() ? nlohmann::json(value) : v;
    }
    return out;
}

}  // namespace kiln::app
