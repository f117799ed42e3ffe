#pragma once
// `kiln info FILE`: a human summary of a Kiln model file.
#include <iosfwd>
#include <string>

namespace kiln {

// 1536 -> "1.5 KiB": sizes for people.
std::string human_bytes(double bytes);

// Prints components, classes, key config fields, parameter counts, dtype histogram, bytes per
// component and block layout of the Kiln model file at path. For a single file in another layout (a BFL Flux file,
// city96's GGUF, Stability's SD3 file, ...): its components, layouts and types, the published model it is, and what
// a generation still needs (hf_home: where the tokenizers are looked for). Throws kiln::Error if it is invalid.
void print_model_info(const std::string& path, std::ostream& os, const std::string& hf_home = "");

}  // namespace kiln
