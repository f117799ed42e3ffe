#pragma once
// kiln generate's arguments and files (generate_args.cpp).
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/tensor.h"

namespace kiln::app {

// --class-labels: comma-separated class ids or label names (model_index.json's id2label, synonyms split at commas).
std::vector<int> parse_labels(const std::string& s, const nlohmann::json& model_index);
// Writes one image file per image (NAME-0.png, ...; NAME-0.jpg for a .jpg path), or one grid / single image to
// `out`, in the format its extension names; `text`: the settings written into the file.
void write_images(const Tensor& im, const std::string& out, bool grid, int upscale, int quality,
                  const std::vector<std::pair<std::string, std::string>>& text);
// The non-empty lines of a prompt file ('-': stdin), each one generation of one prompt.
std::vector<std::vector<std::string>> read_prompt_file(const std::string& path);
// "1,0.5,0.25" -> numbers; "" -> none. An entry that is not a number names `flag` and the entry.
std::vector<double> parse_numbers(const std::string& list, const char* flag);
// "7,8,9" -> integers; "" -> none. An entry that is not an integer names `flag`, the entry and `what` it should be.
std::vector<int> parse_indices(const std::string& list, const char* flag, const char* what);
// KEY=VALUE items -> a JSON object; VALUE as JSON where it parses (true, 2, 0.5, "x", null), else as a string.
nlohmann::json parse_key_values(const std::vector<std::string>& items, const char* flag);

}  // namespace kiln::app
