#include "models/core/generate_options.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "runtime/core/error.h"

namespace kiln::models {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string number(double v) {
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    // The shortest form that reads back the same (0.1, not 0.10000000000000001).
    for (int prec = 1; prec <= 17; ++prec) {
        char s[32];
        std::snprintf(s, sizeof s, "%.*g", prec, v);
        if (std::strtod(s, nullptr) == v) return s;
    }
    return buf;
}
}  // namespace

const std::vector<FloatRange>& float_ranges() {
    using O = FloatOption;
    static const std::vector<FloatRange> v = {
        {O::guidance, "guidance", 0, kInf, false, "the guidance scale; 1 or less is no guidance"},
        {O::true_cfg_scale, "true_cfg_scale", 0, kInf, true, "Flux's true CFG: above 1 is on, 1 off"},
        {O::strength, "strength", 0, 1, true, "how far the image in is noised"},
        {O::eta, "eta", 0, kInf, false, "DDIM's eta: 0 is deterministic, 1 DDPM's variance"},
        {O::skip_layer_guidance_scale, "skip_layer_guidance_scale", -kInf, kInf, false, "skip-layer guidance scale"},
        {O::skip_layer_guidance_start, "skip_layer_guidance_start", 0, 1, false, "a fraction of the steps"},
        {O::skip_layer_guidance_stop, "skip_layer_guidance_stop", 0, 1, false, "a fraction of the steps"},
        {O::sigma, "sigmas", 0, kInf, false, "noise levels"},
        {O::timestep, "timesteps", 0, kInf, false, "training timesteps"},
        {O::lora_scale, "lora scale", -kInf, kInf, false, "a LoRA's weight"},
        {O::cfg_truncation, "cfg_truncation", -kInf, kInf, false,
         "Z-Image: guidance stops where (1000 - t) / 1000 exceeds it; 1 or more: never"},
        {O::cfg_normalization, "cfg_normalization", 0, kInf, false,
         "Z-Image: the guided prediction's norm capped at this times the prompt's; 0 = off, 1 = diffusers' True"},
    };
    return v;
}

const FloatRange& float_range(FloatOption o) {
    for (const auto& r : float_ranges())
        if (r.option == o) return r;
    KILN_FAIL("internal: float option ", (int)o, " has no range");
}

std::string float_problem(FloatOption o, double v, const std::string& what) {
    const FloatRange& r = float_range(o);
    const std::string name = (what.empty() ? std::string(r.name) : what) + " is " + number(v);
    if (!std::isfinite(v)) return name + ": not a finite number (" + r.meaning + ")";
    if ((r.lo_open ? v > r.lo : v >= r.lo) && v <= r.hi) return "";
    return name + ": outside " + (r.lo_open || std::isinf(r.lo) ? "(" : "[") + number(r.lo) + ", " + number(r.hi) +
           (std::isinf(r.hi) ? ")" : "]") + " (" + r.meaning + ")";
}

void check_float(FloatOption o, double v, const std::string& what) {
    const std::string problem = float_problem(o, v, what);
    KILN_CHECK(problem.empty(), problem);
}

}  // namespace kiln::models
