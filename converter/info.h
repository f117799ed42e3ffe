#pragma once
// `kiln info FILE`: a human summary of a Kiln model file.
#include <iosfwd>
#include <string>

namespace kiln {

// 1536 -> "1.5 KiB": sizes for people.
std::string human_bytes(double bytes);

// Prints components, classes, key config fields, parameter counts, dtype histogram, bytes per
// component and block layout of the Kiln model file at path. Throws kiln::Error if it is invalid.
void print_model_info(const std::string& path, std::ostream& os);

}  // namespace kiln
