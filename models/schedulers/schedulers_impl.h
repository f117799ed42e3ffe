#pragma once
// Internal to models/schedulers: one constructor per diffusers class, each in its own .cpp.
#include <memory>

#include "models/schedulers/sched_math.h"
#include "models/schedulers/scheduler.h"

namespace kiln::sched::detail {
std::unique_ptr<Scheduler> make_ddim(const Config& c);
std::unique_ptr<Scheduler> make_dpm_solver(const Config& c);
std::unique_ptr<Scheduler> make_euler(const Config& c);
std::unique_ptr<Scheduler> make_euler_ancestral(const Config& c);
std::unique_ptr<Scheduler> make_flow_match_euler(const Config& c);
std::unique_ptr<Scheduler> make_scm(const Config& c);
}  // namespace kiln::sched::detail
