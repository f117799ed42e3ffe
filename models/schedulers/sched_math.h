#pragma once
// Internal to models/schedulers: the numpy / torch behaviours the diffusers schedulers rely on, reproduced with the
// same dtypes (numpy float64 schedules, torch float32 tensors), and a typed reader for scheduler_config.json.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

// Schedules must round like numpy and torch do: no contraction of a*b+c into a fused multiply-add (GCC in ISO mode,
// which this project builds with, does not contract; clang does unless told). Where torch itself fuses, the code
// calls std::fma explicitly.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

namespace kiln::sched::detail {

// ---- numpy (float64) ----
double np_round(double x);                                                // round half to even, like np.round
std::vector<double> np_linspace(double start, double stop, int64_t num);  // endpoint=True
std::vector<double> np_arange(double start, double stop, double step);    // float arange: start + i*(second-start)
// np.interp(x, arange(len(fp)), fp) in float64.
double np_interp(double x, const std::vector<float>& fp);

// ---- torch (float32) ----
std::vector<float> torch_linspace_f32(double start, double end, int64_t steps);
std::vector<float> torch_cumprod_f32(const std::vector<float>& x);  // CPU kernel accumulates in double

// ---- sigma schedules shared by the schedulers ----
// diffusers' _sigma_to_t: fractional training index of sigma by linear interpolation in log-sigma. log_sigmas is the
// float32 array numpy holds (ascending); the float32 comparisons and weights follow numpy's value-based casting.
double sigma_to_t(double sigma, const std::vector<float>& log_sigmas);
// The same for a float32 sigma (an element of a float32 array): numpy takes its log in float32.
double sigma_to_t_f32(float sigma, const std::vector<float>& log_sigmas);
std::vector<double> karras_sigmas(double sigma_min, double sigma_max, int64_t n);  // rho = 7
std::vector<double> exponential_sigmas(double sigma_min, double sigma_max,
                                       int64_t n);  // exp(linspace(log max, log min))

// ---- the Euler family (EulerDiscreteScheduler, EulerAncestralDiscreteScheduler) ----
// set_timesteps' float32 timesteps for timestep_spacing linspace / leading / trailing.
std::vector<float> euler_timesteps(const std::string& spacing, int64_t num_train_timesteps, int n,
                                   int64_t steps_offset);
// init_noise_sigma: max(sigmas), or sqrt(max^2 + 1) with leading spacing (float32).
double euler_init_noise_sigma(const std::vector<double>& sigmas, const std::string& spacing);
// The training sigmas sqrt((1 - a) / a) of alphas_cumprod, float32.
std::vector<float> vp_sigmas(const std::vector<float>& alphas_cumprod);
// The sigmas before set_timesteps: the training sigmas flipped, plus a final 0 (init_noise_sigma reads them).
std::vector<double> euler_initial_sigmas(const std::vector<float>& train_sigmas);
// scale_model_input's divisor sqrt(sigma^2 + 1) of step i (float32); `who` names the scheduler in errors.
float euler_input_divisor(const std::vector<double>& sigmas, int i, const std::string& who);

// Reads scheduler_config.json values with diffusers' defaults; every error names the field and its value.
class Config {
public:
    Config(const nlohmann::json& j, std::string cls);
    const std::string& cls() const { return cls_; }

    bool has(const std::string& key) const;       // present and not null
    bool has_null(const std::string& key) const;  // present and null (None given explicitly)
    bool boolean(const std::string& key, bool def) const;
    int64_t integer(const std::string& key, int64_t def) const;
    double number(const std::string& key, double def) const;         // accepts "Infinity", "-Infinity", "NaN"
    std::optional<double> opt_number(const std::string& key) const;  // null or absent -> nullopt
    std::string string(const std::string& key, const std::string& def) const;
    std::optional<std::vector<double>> number_list(const std::string& key) const;
    std::string value_str(const std::string& key) const;  // the raw value as JSON text, for messages

    // The value of a string field, checked against the accepted set.
    std::string choice(const std::string& key, const std::string& def, const std::set<std::string>& accepted) const;
    [[noreturn]] void reject(const std::string& key, const std::string& why) const;

    // Records every key looked up from now on into *keys (the fields this class reads; null: stop).
    void track(std::set<std::string>* keys) { read_ = keys; }

private:
    const nlohmann::json* find(const std::string& key) const;
    const nlohmann::json& j_;
    std::string cls_;
    std::set<std::string>* read_ = nullptr;
};

// The training noise schedule of the DDPM-family schedulers (DDIM, DPM-Solver, Euler): float32 like diffusers'
// torch tensors. Honours num_train_timesteps, beta_start, beta_end, beta_schedule, trained_betas,
// rescale_betas_zero_snr.
struct TrainSchedule {
    int64_t num_train_timesteps = 1000;
    std::vector<float> betas, alphas_cumprod;
};
TrainSchedule make_train_schedule(const Config& c);

}  // namespace kiln::sched::detail
