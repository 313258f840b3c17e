// Bindings for the scheduler: used by the tests (C++ vs the Python twin, step by step) and the
// benchmark; the engine drives the scheduler from C++.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>

#include "scheduler/scheduler.h"
#include "util/error.h"

namespace nb = nanobind;
using ossa::Request;
using ossa::Scheduler;
using ossa::SchedulerConfig;
using ossa::SchedulerOutput;

namespace {

ossa::SchedulePolicy parse_policy(const std::string& s) {
  if (s == "fcfs") return ossa::SchedulePolicy::Fcfs;
  if (s == "priority") return ossa::SchedulePolicy::Priority;
  throw ossa::InputError("policy must be 'fcfs' or 'priority', got '" + s + "'");
}

nb::tuple event_tuple(const ossa::FinishEvent& e) {
  return nb::make_tuple(e.request_id, e.child, std::string(ossa::finish_reason_name(e.reason)),
                        e.stop_token, e.request_done);
}

}  // namespace

void bind_scheduler(nb::module_& m) {
  nb::class_<SchedulerConfig>(m, "SchedulerConfig")
      .def(
          "__init__",
          [](SchedulerConfig* c, int32_t num_blocks, int32_t block_size,
             int32_t max_num_batched_tokens, int32_t max_num_seqs, int32_t max_model_len,
             const std::string& policy, bool enable_prefix_caching, double watermark,
             int32_t num_state_slots) {
            new (c) SchedulerConfig{
                num_blocks,     block_size,           max_num_batched_tokens, max_num_seqs,
                max_model_len,  parse_policy(policy), enable_prefix_caching,  watermark,
                num_state_slots};
          },
          nb::arg("num_blocks"), nb::arg("block_size") = 16,
          nb::arg("max_num_batched_tokens") = 2048, nb::arg("max_num_seqs") = 256,
          nb::arg("max_model_len") = 2048, nb::arg("policy") = "fcfs",
          nb::arg("enable_prefix_caching") = true, nb::arg("watermark") = ossa::k_default_watermark,
          nb::arg("num_state_slots") = 0)
      .def_rw("num_blocks", &SchedulerConfig::num_blocks)
      .def_rw("block_size", &SchedulerConfig::block_size)
      .def_rw("max_num_batched_tokens", &SchedulerConfig::max_num_batched_tokens)
      .def_rw("max_num_seqs", &SchedulerConfig::max_num_seqs)
      .def_rw("max_model_len", &SchedulerConfig::max_model_len)
      .def_rw("enable_prefix_caching", &SchedulerConfig::enable_prefix_caching)
      .def_rw("watermark", &SchedulerConfig::watermark)
      .def_rw("num_state_slots", &SchedulerConfig::num_state_slots);

  nb::class_<Request>(m, "Request")
      .def(
          "__init__",
          [](Request* r, int64_t id, std::vector<int32_t> prompt, int32_t max_tokens,
             int32_t min_tokens, std::vector<int32_t> eos_token_ids,
             std::vector<int32_t> stop_token_ids, bool ignore_eos, int32_t n, int32_t priority,
             uint64_t cache_salt) {
            new (r) Request{id,
                            std::move(prompt),
                            max_tokens,
                            min_tokens,
                            std::move(eos_token_ids),
                            std::move(stop_token_ids),
                            ignore_eos,
                            n,
                            priority,
                            cache_salt};
          },
          nb::arg("id"), nb::arg("prompt"), nb::arg("max_tokens") = 16, nb::arg("min_tokens") = 0,
          nb::arg("eos_token_ids") = std::vector<int32_t>{},
          nb::arg("stop_token_ids") = std::vector<int32_t>{}, nb::arg("ignore_eos") = false,
          nb::arg("n") = 1, nb::arg("priority") = 0, nb::arg("cache_salt") = 0)
      .def_rw("id", &Request::id)
      .def_rw("prompt", &Request::prompt)
      .def_rw("max_tokens", &Request::max_tokens)
      .def_rw("min_tokens", &Request::min_tokens)
      .def_rw("eos_token_ids", &Request::eos_token_ids)
      .def_rw("stop_token_ids", &Request::stop_token_ids)
      .def_rw("ignore_eos", &Request::ignore_eos)
      .def_rw("n", &Request::n)
      .def_rw("priority", &Request::priority)
      .def_rw("cache_salt", &Request::cache_salt);

  nb::class_<SchedulerOutput>(m, "SchedulerOutput",
                              "One step, per sequence: positions, draft, block table, samples "
                              "(build_batch turns it into the model's Batch).")
      .def_prop_ro("block_table_start",
                   [](const SchedulerOutput& o) { return o.block_table_start; })
      .def_prop_ro("block_tables", [](const SchedulerOutput& o) { return o.block_tables; })
      .def_prop_ro("num_tokens", [](const SchedulerOutput& o) { return o.num_tokens; })
      .def_prop_ro("num_samples", [](const SchedulerOutput& o) { return o.num_samples; })
      .def_prop_ro(
          "drafts",
          [](const SchedulerOutput& o) {
            std::vector<std::vector<int32_t>> v;
            for (size_t s = 0; s < o.seqs.size(); ++s) {
              const auto d = o.draft(s);
              v.emplace_back(d.begin(), d.end());
            }
            return v;
          },
          "The draft each sequence verifies this step (empty when none).")
      .def_prop_ro(
          "seqs",
          [](const SchedulerOutput& o) {
            nb::list out;
            for (const auto& s : o.seqs)
              out.append(nb::make_tuple(s.request_id, s.child, s.num_computed, s.num_tokens,
                                        s.num_samples));
            return out;
          },
          "(request_id, child, num_computed before, num_tokens scheduled, num_samples) per "
          "sequence.")
      .def_prop_ro(
          "num_draft",
          [](const SchedulerOutput& o) {
            std::vector<int32_t> v;
            for (const auto& s : o.seqs) v.push_back(s.num_draft);
            return v;
          },
          "Draft tokens each sequence verifies this step (speculative decoding).")
      .def_prop_ro(
          "state_slots",
          [](const SchedulerOutput& o) {
            std::vector<int32_t> v;
            for (const auto& s : o.seqs) v.push_back(s.state_slot);
            return v;
          },
          "Each sequence's recurrent state slot (-1 without num_state_slots).")
      .def_prop_ro(
          "state_copies", [](const SchedulerOutput& o) { return o.state_copies; },
          "(src, dst) state slots to copy before the forward (forks).")
      .def_prop_ro(
          "num_appended",
          [](const SchedulerOutput& o) {
            std::vector<int32_t> v;
            for (const auto& s : o.seqs) v.push_back(s.num_appended);
            return v;
          },
          "After update(): tokens each verifying sequence appended (its accepted run).")
      .def_prop_ro("block_copies", [](const SchedulerOutput& o) { return o.block_copies; })
      .def_prop_ro("preempted", [](const SchedulerOutput& o) { return o.preempted; })
      .def_prop_ro("finished_requests",
                   [](const SchedulerOutput& o) { return o.finished_requests; });

  nb::class_<ossa::SchedulerStats>(m, "SchedulerStats")
      .def_ro("num_running", &ossa::SchedulerStats::num_running)
      .def_ro("num_waiting", &ossa::SchedulerStats::num_waiting)
      .def_ro("kv_usage_percent", &ossa::SchedulerStats::kv_usage_percent)
      .def_ro("prefix_queries", &ossa::SchedulerStats::prefix_queries)
      .def_ro("prefix_hits", &ossa::SchedulerStats::prefix_hits)
      .def_ro("num_preemptions", &ossa::SchedulerStats::num_preemptions);

  nb::class_<Scheduler>(m, "Scheduler", "Continuous-batching scheduler over a paged KV cache.")
      .def(nb::init<const SchedulerConfig&>(), nb::arg("config"))
      .def("add_request", &Scheduler::add_request, nb::arg("request"))
      .def("abort", &Scheduler::abort, nb::arg("request_id"))
      .def("finish", &Scheduler::finish, nb::arg("request_id"), nb::arg("child"))
      .def(
          "set_draft",
          [](Scheduler& s, int64_t request_id, int32_t child, const std::vector<int32_t>& draft) {
            return s.set_draft(request_id, child, draft);
          },
          nb::arg("request_id"), nb::arg("child"), nb::arg("draft"))
      .def("schedule", &Scheduler::schedule, nb::rv_policy::reference_internal)
      .def(
          "update",
          [](Scheduler& s, const std::vector<int32_t>& tokens) {
            const auto& events = s.update(tokens);
            nb::list out;
            for (const auto& e : events) out.append(event_tuple(e));
            return out;
          },
          nb::arg("sampled_tokens"),
          "Returns (request_id, child, reason, stop_token, request_done) per finished child.")
      .def("has_unfinished", &Scheduler::has_unfinished)
      .def("stats", &Scheduler::stats)
      .def("block_table", &Scheduler::block_table, nb::arg("request_id"), nb::arg("child"))
      .def("tokens", &Scheduler::tokens, nb::arg("request_id"), nb::arg("child"))
      .def("running", &Scheduler::running)
      .def("waiting", &Scheduler::waiting)
      .def("ref_counts", [](const Scheduler& s) { return s.kv().pool().ref_count; })
      .def("free_queue", [](const Scheduler& s) { return s.kv().pool().free_queue(); })
      .def("cached_blocks",
           [](const Scheduler& s) {
             const auto& p = s.kv().pool();
             std::vector<std::pair<int32_t, uint64_t>> out;
             for (int32_t b = 0; b < p.num_blocks; ++b)
               if (p.has_hash[b]) out.emplace_back(b, p.hash[b]);
             return out;
           })
      .def(
          "bench_steps",
          [](Scheduler& s, int32_t n_steps, int32_t token) {
            // Drives n_steps of schedule() + update() with every sampled token = `token`, all in
            // C++ (the engine's view, no Python crossing per step). Returns the seconds taken.
            std::vector<int32_t> sampled;
            nb::gil_scoped_release release;
            auto t0 = std::chrono::steady_clock::now();
            for (int32_t i = 0; i < n_steps; ++i) {
              const SchedulerOutput& out = s.schedule();
              sampled.assign(static_cast<size_t>(out.num_samples), token);
              s.update(sampled);
            }
            return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          },
          nb::arg("n_steps"), nb::arg("token"));
}
