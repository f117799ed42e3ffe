// kiln-convert's writer: the planned components laid out as a Kiln file (the layout: converter/convert.cpp's head).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <thread>

#include "converter/info.h"
#include "converter/plan.h"
#include "runtime/core/error.h"
#include "runtime/core/platform.h"
#include "runtime/core/quant.h"

namespace kiln::converter {

namespace fs = std::filesystem;

namespace {
// Progress on stderr: a redrawn bar on a TTY, else a line at most every 5 s.
struct Progress {
    std::ostream* os;
    bool tty;
    std::chrono::steady_clock::time_point last_line = std::chrono::steady_clock::now();
    void operator()(size_t done, size_t total, uint64_t bytes) {
        if (!os) return;
        if (tty) {
            int w = 30, fill = (int)(w * done / std::max<size_t>(total, 1));
            *os << "\r[" << std::string(fill, '=') << std::string(w - fill, ' ') << "] " << done << "/" << total
                << " tensors, " << human_bytes((double)bytes) << "   " << (done == total ? "\n" : "") << std::flush;
        } else {  // not a terminal: a line at most every 5 s
            auto now = std::chrono::steady_clock::now();
            if (now - last_line > std::chrono::seconds(5) && done < total) {
                last_line = now;
                *os << "kiln-convert: " << done << "/" << total << " tensors ("
                    << done * 100 / std::max<size_t>(total, 1) << "%)\n"
                    << std::flush;
            }
        }
    }
};

// One tensor of c into w's layout (converted to it.out when written); returns its offset.
uint64_t add_tensor(GgufWriter& w, Component& c, const std::string& full, const Item& it, Summary& sum) {
    const layouts::TensorInfo* src = it.src;
    const layouts::TensorSet* set = c.set.get();
    DType to = it.out;
    sum.tensors++;
    sum.stored[to]++;
    return w.add_tensor(full, to, it.shape, [set, src, to](void* dst) {
        const Tensor t = set->read(src->name);
        kiln::convert(t.bytes.data(), t.dtype, dst, to, (size_t)t.numel());
    });
}

// A component's metadata, then its tensors: the loose ones, then each block kind run by run, checking that every
// run is laid out as base + i * stride (the runtime's contract).
void add_component(GgufWriter& w, Component& c, Summary& sum) {
    const std::string p = "kiln." + c.name + ".";
    w.set_string(p + "class", c.cls);
    w.set_string(p + "config", c.config_text);
    w.set_i64(p + "params", c.params);
    sum.params += c.params;
    if (c.tokenizer) write_tokenizer_files(w, c.name, c.files);
    if (c.scheduler || c.tokenizer) return;
    for (auto& it : c.loose) add_tensor(w, c, c.name + "." + it.rel, it, sum);
    std::vector<std::string> kind_names;
    for (auto& kp : c.kinds) {
        kind_names.push_back(kp.name);
        std::vector<int64_t> runs;
        for (auto& r : kp.runs) {
            std::vector<std::vector<uint64_t>> offs;
            for (int64_t i = r.first; i < r.first + r.count; ++i) {
                offs.emplace_back();
                for (auto& it : kp.blocks[(size_t)i])
                    offs.back().push_back(
                        add_tensor(w, c, c.name + "." + kp.name + "." + std::to_string(i) + "." + it.rel, it, sum));
            }
            // Blocks are identical, so with every tensor aligned the same way each block takes the same
            // bytes; check that the layout is exactly base + i*stride + rel (a runtime contract).
            r.base = offs[0].empty() ? w.data_size() : offs[0][0];
            uint64_t end = w.data_size();
            r.stride = r.count > 1 && !offs[1].empty()
                           ? offs[1][0] - r.base
                           : (end + kGgufAlignment - 1) / kGgufAlignment * kGgufAlignment - r.base;
            for (size_t i = 0; i < offs.size(); ++i)
                for (size_t k = 0; k < offs[i].size(); ++k)
                    KILN_CHECK(offs[i][k] == r.base + i * r.stride + (offs[0][k] - r.base),
                               "internal: block layout of ", kp.name, " is not uniform");
            runs.insert(runs.end(), {r.first, r.count, (int64_t)r.base, (int64_t)r.stride});
        }
        const std::string k = p + "blocks." + kp.name + ".";
        w.set_i64(k + "count", kp.count);
        w.set_i64_array(k + "runs", runs);
        if (kp.runs.size() == 1) {
            w.set_i64(k + "base", (int64_t)kp.runs[0].base);
            w.set_i64(k + "stride", (int64_t)kp.runs[0].stride);
        }
    }
    w.set_string_array(p + "blocks", kind_names);
}

// "q4_k 304, f16 10, f32 466": what the file stores, most tensors first.
std::string stored_list(const std::map<DType, size_t>& stored) {
    std::vector<std::pair<size_t, DType>> v;
    for (auto& [t, n] : stored) v.push_back({n, t});
    std::sort(v.rbegin(), v.rend());
    std::string s;
    for (auto& [n, t] : v) s += (s.empty() ? "" : ", ") + std::string(dtype_name(t)) + " " + std::to_string(n);
    return s.empty() ? "no tensors" : s;
}

}  // namespace

Summary write_kiln_file(std::vector<Component>& comps, GgufWriter& w, const std::string& name,
                        const std::string& out_path, const Options& opt, std::ostream* log,
                        std::chrono::steady_clock::time_point t0) {
    w.set_string("general.architecture", "kiln");
    w.set_string("general.name", name);
    w.set_u32("kiln.format_version", 1);
    std::vector<std::string> names;
    for (auto& c : comps) names.push_back(c.name);
    w.set_string_array("kiln.components", names);
    Summary sum;
    sum.components = names;
    for (auto& c : comps) add_component(w, c, sum);

    Progress prog{log, log && platform::is_terminal(stderr) && log == &std::cerr};
    uint64_t written = 0;
    const int delay_ms = opt.test_delay_ms;  // tests: a pause after each tensor (Options::test_delay_ms)
    w.on_tensor = [&](size_t done, size_t total) {
        written = w.data_size() * done / std::max<size_t>(total, 1);  // approximate, for display only
        prog(done, total, written);
        if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    };
    w.write(out_path);
    sum.bytes = fs::file_size(out_path);
    sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (log) {
        std::string cl;
        for (auto& n : names) cl += (cl.empty() ? "" : ", ") + n;
        char secs[32];
        std::snprintf(secs, sizeof secs, "%.2f", sum.seconds);
        *log << "kiln-convert: wrote " << out_path << ": " << cl << "; " << sum.tensors << " tensors, " << sum.params
             << " parameters, " << human_bytes((double)sum.bytes) << " (" << stored_list(sum.stored) << "), " << secs
             << " s\n";
    }
    return sum;
}

}  // namespace kiln::converter
