// The JSON text of configs: files read whole, and Python's json dialect (NaN, Infinity) read as standard JSON.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "converter/convert.h"
#include "runtime/core/error.h"

namespace kiln::converter {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string read_text(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    KILN_CHECK(f.good(), p.string(), ": cannot open");
    std::ostringstream ss;
    ss << f.rdbuf();
    KILN_CHECK(!f.bad(), p.string(), ": read failed");
    return ss.str();
}

json parse_json_object(const std::string& text, const std::string& where) {
    json j;
    try {
        j = json::parse(python_json_to_json(text));
    } catch (const std::exception& e) {
        KILN_FAIL(where, ": invalid JSON: ", e.what());
    }
    KILN_CHECK(j.is_object(), where, ": expected a JSON object");
    return j;
}

// Python's json (which diffusers uses) writes NaN, Infinity and -Infinity (e.g. DPMSolver's
// lambda_min_clipped); standard JSON has no such tokens. For validation they are read as null; the
// stored config text stays verbatim.
std::string python_json_to_json(const std::string& s) {
    std::string out;
    out.reserve(s.size());
    bool in_str = false;
    for (size_t i = 0; i < s.size(); ++i) {
        char ch = s[i];
        if (in_str) {
            out += ch;
            if (ch == '\\' && i + 1 < s.size())
                out += s[++i];
            else if (ch == '"')
                in_str = false;
            continue;
        }
        if (ch == '"') in_str = true;
        bool replaced = false;
        for (const char* tok : {"-Infinity", "Infinity", "NaN"}) {
            size_t n = std::char_traits<char>::length(tok);
            if (s.compare(i, n, tok) == 0) {
                out += "null";
                i += n - 1;
                replaced = true;
                break;
            }
        }
        if (!replaced) out += ch;
    }
    return out;
}

}  // namespace kiln::converter
