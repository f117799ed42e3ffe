#pragma once
// The single-file fixtures (tests/data/fixtures/<c>_pipeline_singlefile/, c = "flux" or "sd3"). Their .safetensors
// files (transformer, VAE, text encoders) are bitwise re-layouts of the diffusers folder <c>_pipeline, so they are not
// committed: they are written from that folder and io.json's key_map into the build tree, checked against io.json's
// sha256 (byte for byte what the Python safetensors writer made), and reused by later runs.
#include <string>

namespace kiln::test {

// The path of `file` of the case: the generated file for the re-laid safetensors (made on first use), else the
// committed one (io.json, the GGUF files, expected_*). Throws kiln::Error naming the file when a generated file's
// sha256 differs from io.json's.
std::string single_file(const std::string& c, const std::string& file);

// Writes the generated file `file` of case `c` to `path` (no cache, no check); for the generator's own test.
void write_single_file(const std::string& c, const std::string& file, const std::string& path);

// The lowercase hex SHA-256 of a file's bytes ("" when the tests were built without OpenSSL's libcrypto).
std::string file_sha256(const std::string& path);

}  // namespace kiln::test
