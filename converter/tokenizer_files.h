#pragma once
// Tokenizer folders (transformers layout) inside a Kiln model file. The files are kept verbatim:
//   kiln.C.files            string array, the file names (sorted)
//   kiln.C.file_encodings   string array, one per file: "utf8" (the string is the file) or "base64"
//                           (binary files such as spiece.model: GGUF readers such as @huggingface/gguf
//                           decode strings as UTF-8, so non-UTF-8 bytes would not survive them)
//   kiln.C.file.<name>      string, the file's contents in that encoding
#include <map>
#include <string>
#include <vector>

namespace kiln {
class GgufFile;
class GgufWriter;
}  // namespace kiln

namespace kiln::converter {

using FileMap = std::map<std::string, std::string>;  // file name -> bytes

// The files a Kiln tokenizer reads; others in a tokenizer folder (tokenizer.json) are not stored.
const std::vector<std::string>& tokenizer_file_names();

// Reads and validates a tokenizer folder for class `cls` (a CLIP tokenizer: vocab.json + merges.txt;
// a T5 tokenizer: spiece.model; a Gemma tokenizer: tokenizer.model); every *.json must be a JSON object. Throws
// kiln::Error naming the folder/file and problem. `skipped` receives other files in the folder that are not stored.
FileMap read_tokenizer_dir(const std::string& dir, const std::string& cls, std::vector<std::string>* skipped);

// The tokenizer class a folder implies: tokenizer_config.json's tokenizer_class, else from its files.
std::string tokenizer_class_of_dir(const std::string& dir);
bool is_supported_tokenizer(const std::string& cls);

void write_tokenizer_files(GgufWriter& w, const std::string& component, const FileMap& files);
// The files of tokenizer component `component` of a Kiln file, byte-exact. Throws if it has none.
FileMap read_tokenizer_files(const GgufFile& f, const std::string& component);

std::string base64_encode(const std::string& bytes);
std::string base64_decode(const std::string& text, const std::string& where);  // throws on bad input
bool is_utf8(const std::string& s);

}  // namespace kiln::converter
