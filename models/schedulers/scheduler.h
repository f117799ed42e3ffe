#pragma once
// Ports of diffusers 0.38's DDIMScheduler, DPMSolverMultistepScheduler, EulerDiscreteScheduler,
// EulerAncestralDiscreteScheduler, FlowMatchEulerDiscreteScheduler and SCMScheduler (whose step takes Sana-Sprint's
// raw transformer output: scm.cpp), built from a scheduler_config.json. Schedules
// are computed with numpy's float64 and torch's float32 behaviour so that timesteps and sigmas equal diffusers' own.
//
// Every step is a linear combination of a few buffers with coefficients computed on the CPU (StepCoefficients), so
// a device can run the update; Scheduler::step() is the host reference that applies them.
#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace kiln::sched {

// One step, per element:
//   x0   = x0_sample*sample + x0_model*model_output, clamped to [-x0_clip, x0_clip] when x0_clip > 0
//   prev = prev_sample*sample + prev_model*model_output + prev_x0*x0 + sum_k prev_history[k]*history[k]
//          + prev_noise*noise
// x0 is the scheduler's converted model output (DDIM's pred_original_sample; DPM-Solver's model_outputs entry:
// x0 for dpmsolver++, epsilon for dpmsolver). history[k] is the x0 of step (step_index-1-k). After the step, a
// multistep scheduler keeps x0 as the new history[0] and at most history_keep entries. noise is the step's
// standard-normal noise (DDIM with eta > 0: diffusers' variance_noise), drawn by the caller; prev_noise is 0 for a
// deterministic step.
struct StepCoefficients {
    double x0_sample = 0, x0_model = 0, x0_clip = 0;
    double prev_sample = 0, prev_model = 0, prev_x0 = 0, prev_noise = 0;
    std::array<double, 2> prev_history{0, 0};
    int history_used = 0;  // entries of history this step reads (0..2)
    int history_keep = 0;  // entries kept after the step (solver_order - 1 for DPM-Solver, else 0)
    bool needs_x0() const { return x0_clip > 0 || prev_x0 != 0 || history_keep > 0; }
};

// Applies c in float32 (coefficients rounded to float, as torch holds them): the host reference of the update.
// history[k] as above; x0_out (optional) receives x0; noise: the step's noise, needed when c.prev_noise != 0.
std::vector<float> apply_step(const StepCoefficients& c, const std::vector<float>& model_output,
                              const std::vector<float>& sample, const std::vector<const std::vector<float>*>& history,
                              std::vector<float>* x0_out = nullptr, const std::vector<float>* noise = nullptr);

class Scheduler {
public:
    virtual ~Scheduler() = default;

    // diffusers' set_timesteps(num_inference_steps[, mu]). mu only for flow matching with use_dynamic_shifting (and
    // DPM-Solver with use_dynamic_shifting); throws when required and missing, or given and not used. Resets the
    // multistep state.
    virtual void set_timesteps(int num_inference_steps, std::optional<double> mu = std::nullopt) = 0;

    // diffusers' set_timesteps(sigmas=..., mu=...): a custom sigma schedule. FlowMatchEulerDiscreteScheduler takes
    // one per step, without the final 0, as the Flux pipeline passes linspace(1, 1/N, N); EulerDiscreteScheduler
    // takes the whole schedule, its final sigma included (len - 1 steps, timesteps from _sigma_to_t), as diffusers'
    // Euler does. Others throw.
    virtual void set_sigmas(const std::vector<double>& sigmas, std::optional<double> mu = std::nullopt);

    // `scheduler.sigma_min = value` as ZImagePipeline does before set_timesteps (0: the schedule runs down to 0).
    // FlowMatchEulerDiscreteScheduler reads it in set_timesteps; the others have no use for it (as in diffusers,
    // where the assignment only adds an attribute).
    virtual void set_sigma_min(double) {}

    // diffusers' set_timesteps(timesteps=...): a custom schedule of training timesteps, one per step, as the PixArt
    // pipelines pass their `timesteps` argument; sigmas are interpolated at them. DPMSolverMultistepScheduler
    // (integer timesteps) and EulerDiscreteScheduler take one; others throw, as diffusers' retrieve_timesteps does.
    // Each must lie in [0, num_train_timesteps) and the list must decrease strictly: diffusers does not check
    // either, but nothing else is a denoising schedule (a repeated timestep divides by zero in DPM-Solver).
    virtual void set_custom_timesteps(const std::vector<double>& timesteps);

    // diffusers' set_begin_index(n) for the image-to-image pipelines, which loop over timesteps[n:] and step from
    // sigmas[n]: drops the first n timesteps and sigmas, so step i is diffusers' step n + i. Flow matching only.
    void set_begin_index(int n);

    const std::vector<double>& timesteps() const { return timesteps_; }  // diffusers' scheduler.timesteps, as float64
    const std::vector<double>& sigmas() const { return sigmas_; }        // float32 values; empty for DDIM
    int num_inference_steps() const { return (int)timesteps_.size(); }
    virtual double init_noise_sigma() const { return 1.0; }  // SCMScheduler: sigma_data (Sana-Sprint's scaling)
    // The transformer's timestep at a step where it is not the scheduler's timestep (SCMScheduler: the trigflow
    // sin(s) / (cos(s) + sin(s)), float32); nullopt: the pipeline's usual mapping of timesteps().
    virtual std::optional<float> transformer_timestep(int step_index) const { return std::nullopt; }
    // The final latents are divided by this before the VAE's scaling (SCMScheduler: sigma_data).
    virtual double final_latents_divisor() const { return 1.0; }

    // scale_model_input(x, timesteps()[step_index]) in place: x / model_input_divisor(step_index).
    void scale_model_input(std::vector<float>& x, int step_index) const;
    virtual float model_input_divisor(int step_index) const { return 1.0f; }  // Euler: sqrt(sigma^2 + 1), float32

    // The coefficients of step step_index. Steps run in order: the first after set_timesteps may start anywhere
    // (img2img), each later one must be the next index. Advances the multistep state; call once per step (step()
    // calls it).
    virtual StepCoefficients plan_step(int step_index) = 0;

    // One step: prev_sample from model_output and sample, keeping the history a multistep solver needs. noise: the
    // step's standard-normal noise where the step draws one (draws_noise()), else ignored.
    std::vector<float> step(const std::vector<float>& model_output, int step_index, const std::vector<float>& sample,
                            const std::vector<float>* noise = nullptr);

    // diffusers' step(eta=...): DDIMScheduler's eta, the weight of the DDPM variance (0: deterministic DDIM, 1:
    // DDPM's). Only DDIM takes it (takes_eta()); others throw. With eta > 0 every step draws noise: diffusers'
    // randn_tensor(model_output.shape, generator) after the initial latents, so the caller passes it to step().
    virtual bool takes_eta() const { return false; }
    virtual void set_eta(double eta);
    // The steps add noise the caller draws (StepCoefficients::prev_noise): DDIM with eta > 0, Euler ancestral,
    // DPM-Solver's SDE variants, flow matching's stochastic_sampling.
    virtual bool draws_noise() const { return false; }
    // The dtype diffusers draws that noise in: the model output's (the pipeline's dtype; DDIM, Euler ancestral), or
    // always float32 (DPM-Solver's SDE variants).
    virtual bool step_noise_f32() const { return false; }

    int order() const { return 1; }                    // diffusers' class attribute `order` (1 for all six)
    const std::string& name() const { return name_; }  // diffusers' class name
    int64_t num_train_timesteps() const { return num_train_timesteps_; }

protected:
    void check_step_index(int step_index);  // range and in-order checks shared by plan_step implementations
    // set_custom_timesteps' checks (above); integers: the scheduler's timesteps are int64 (DPM-Solver).
    void check_custom_timesteps(const std::vector<double>& timesteps, bool integers) const;
    void reset_state();

    std::string name_;
    int64_t num_train_timesteps_ = 1000;
    std::vector<double> timesteps_, sigmas_;
    int last_step_ = -1;                       // last planned step index, -1 after set_timesteps
    std::vector<std::vector<float>> history_;  // newest first (DPM-Solver's model_outputs)
};

// Builds the scheduler named by config["_class_name"] (or class_override: a diffusers class name or an alias from
// supported_schedulers(), e.g. "euler" with a model's betas). Every config field that changes the math is honoured
// or rejected with a kiln::Error naming the field and its value; fields no scheduler uses are ignored.
std::unique_ptr<Scheduler> make_scheduler(const nlohmann::json& config);
std::unique_ptr<Scheduler> make_scheduler(const nlohmann::json& config, const std::string& class_override);
// config with each field of overrides (a JSON object; null or {}: none) replacing its own, as diffusers'
// from_config(config, **overrides) sees it. A '_' field (e.g. _class_name) is an error: the class is chosen by name.
nlohmann::json with_overrides(const nlohmann::json& config, const nlohmann::json& overrides);
// The same with diffusers' from_config(config, **overrides): each override replaces the config's field (class_override
// "" keeps config's class). An override the class does not read, or a '_' field, is an error naming the fields it
// reads: a misspelt use_karras_sigmas must not pass silently.
std::unique_ptr<Scheduler> make_scheduler(const nlohmann::json& config, const std::string& class_override,
                                          const nlohmann::json& overrides);
// Class names, then aliases, then presets: a class with config fields, under other front ends' sampler names
// (dpm++2m-karras, dpm++2m-sde, dpm++2m-sde-karras, euler-karras).
std::vector<std::string> supported_schedulers();

// scheduler_config.json text -> json. diffusers writes Python's non-standard Infinity / -Infinity / NaN (e.g.
// lambda_min_clipped); they are read as the strings "Infinity", "-Infinity", "NaN", which the scheduler accepts.
nlohmann::json parse_scheduler_config(const std::string& text);
nlohmann::json load_scheduler_config(const std::string& path);

// Flux / SD3 pipelines' mu for dynamic shifting: linear in image_seq_len through (base_seq_len, base_shift) and
// (max_seq_len, max_shift).
double calculate_shift(int64_t image_seq_len, int64_t base_seq_len = 256, int64_t max_seq_len = 4096,
                       double base_shift = 0.5, double max_shift = 1.15);
// FLUX.2's compute_empirical_mu (pipeline_flux2.py): a2 * seq + b2 past 4300 image tokens, else linear in the step
// count between the fitted lines of 10 and 200 steps.
double empirical_mu(int64_t image_seq_len, int num_steps);

}  // namespace kiln::sched
