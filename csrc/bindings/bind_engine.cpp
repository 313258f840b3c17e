// ossa._core.Engine: the decode loop. Every blocking call releases the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <functional>

#include "engine/batch_builder.h"
#include "engine/engine.h"
#include "util/error.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

std::vector<ossa::EngineOutput> released(
    const std::function<std::vector<ossa::EngineOutput>()>& f) {
  nb::gil_scoped_release release;
  return f();
}

// A numpy array on memory the caller keeps alive for the call (no copy: rv_policy::reference).
template <typename T>
nb::object view(T* data, std::initializer_list<size_t> shape) {
  return nb::cast(nb::ndarray<nb::numpy, T>(data, shape, nb::handle()), nb::rv_policy::reference);
}

// A ConstraintHost implemented in Python (ossa.structured.ConstraintHost): one call per step with
// numpy views of the batch (valid only during the call) and the masks to fill in place. Runs on the
// engine's constraint worker, so it takes the GIL; Python errors become C++ ones inside it.
class PyConstraintHost final : public ossa::ConstraintHost {
 public:
  explicit PyConstraintHost(nb::object host) : host_(std::move(host)) {}
  ~PyConstraintHost() override {
    nb::gil_scoped_acquire gil;
    host_.reset();
  }

  void compute(const ossa::ConstraintBatch& b, uint32_t* masks,
               std::vector<std::string>& errors) override {
    nb::gil_scoped_acquire gil;
    try {
      const size_t n = b.size();
      auto* tokens = const_cast<int32_t*>(b.feed_tokens.data());
      nb::object result = host_.attr("compute")(
          view(const_cast<int64_t*>(b.handles.data()), {n}),
          view(const_cast<int32_t*>(b.children.data()), {n}),
          view(const_cast<int32_t*>(b.feed_offsets.data()), {n + 1}),
          view(tokens, {b.feed_tokens.size()}),
          view(const_cast<int64_t*>(b.released.data()), {b.released.size()}),
          view(reinterpret_cast<int32_t*>(masks), {n, static_cast<size_t>(b.words)}));
      if (!result.is_none())
        for (nb::handle item : result) {
          auto [row, message] = nb::cast<std::pair<size_t, std::string>>(item);
          if (row < errors.size()) errors[row] = message;
        }
    } catch (nb::python_error& e) {
      throw std::runtime_error(std::string("the constraint host failed: ") + e.what());
    } catch (const nb::cast_error& e) {
      throw std::runtime_error(std::string("the constraint host returned a malformed result: ") +
                               e.what());
    }
  }

 private:
  nb::object host_;
};

}  // namespace

void bind_engine(nb::module_& m) {
  using ossa::Engine;
  using ossa::EngineConfig;
  using ossa::GenerationParams;

  // The model's Batch as the engine builds it from a SchedulerOutput (tests compare it with the
  // twin's, reference/batch_builder.py).
  nb::class_<ossa::Batch>(m, "Batch", "One step's flat batch for the forward pass (model/batch.h).")
      .def_ro("token_ids", &ossa::Batch::token_ids)
      .def_ro("positions", &ossa::Batch::positions)
      .def_ro("slot_mapping", &ossa::Batch::slot_mapping)
      .def_ro("seq_start", &ossa::Batch::seq_start)
      .def_ro("context_len", &ossa::Batch::context_len)
      .def_ro("block_table_start", &ossa::Batch::block_table_start)
      .def_ro("block_tables", &ossa::Batch::block_tables)
      .def_ro("logits_rows", &ossa::Batch::logits_rows)
      .def_ro("state_slots", &ossa::Batch::state_slots);
  m.def(
      "build_batch",
      [](const ossa::SchedulerOutput& so, int32_t block_size) {
        ossa::Batch b;
        ossa::build_batch(so, block_size, b);
        return b;
      },
      nb::arg("scheduler_output"), nb::arg("block_size"),
      "The Batch of one scheduled step: one logits row per sampled token.");

  // Flat, as ossa.config fills it: the scheduler's fields are views of config.scheduler.
#define OSSA_SCHED_FIELD(name)                                       \
  def_prop_rw(                                                       \
      #name, [](const EngineConfig& c) { return c.scheduler.name; }, \
      [](EngineConfig& c, decltype(ossa::SchedulerConfig::name) v) { c.scheduler.name = v; })
  nb::class_<EngineConfig>(m, "EngineConfig")
      .def(nb::init<>())
      .OSSA_SCHED_FIELD(num_blocks)
      .OSSA_SCHED_FIELD(block_size)
      .OSSA_SCHED_FIELD(max_num_batched_tokens)
      .OSSA_SCHED_FIELD(max_num_seqs)
      .OSSA_SCHED_FIELD(max_model_len)
      .OSSA_SCHED_FIELD(enable_prefix_caching)
      .OSSA_SCHED_FIELD(watermark)
      .OSSA_SCHED_FIELD(num_state_slots)
      .def_prop_rw(
          "policy",
          [](const EngineConfig& c) {
            return c.scheduler.policy == ossa::SchedulePolicy::Priority ? "priority" : "fcfs";
          },
          [](EngineConfig& c, const std::string& p) {
            if (p == "fcfs")
              c.scheduler.policy = ossa::SchedulePolicy::Fcfs;
            else if (p == "priority")
              c.scheduler.policy = ossa::SchedulePolicy::Priority;
            else
              throw ossa::InputError("scheduling policy must be 'fcfs' or 'priority', got '" + p +
                                     "'");
          })
      .def_rw("seed", &EngineConfig::seed)
      .def_prop_rw(
          "kv_cache_dtype", [](const EngineConfig& c) { return ossa::kv_type_name(c.kv_type); },
          [](EngineConfig& c, const std::string& t) { c.kv_type = ossa::parse_kv_type(t); })
      .def_prop_rw(
          "spec_method",
          [](const EngineConfig& c) { return ossa::spec_method_name(c.speculative.method); },
          [](EngineConfig& c, const std::string& m) {
            c.speculative.method = ossa::parse_spec_method(m);
          },
          "Speculative decoding: 'none' or 'ngram'.")
      .def_prop_rw(
          "num_speculative_tokens",
          [](const EngineConfig& c) { return c.speculative.num_speculative_tokens; },
          [](EngineConfig& c, int32_t v) { c.speculative.num_speculative_tokens = v; })
      .def_prop_rw(
          "prompt_lookup_min",
          [](const EngineConfig& c) { return c.speculative.prompt_lookup_min; },
          [](EngineConfig& c, int32_t v) { c.speculative.prompt_lookup_min = v; })
      .def_prop_rw(
          "prompt_lookup_max",
          [](const EngineConfig& c) { return c.speculative.prompt_lookup_max; },
          [](EngineConfig& c, int32_t v) { c.speculative.prompt_lookup_max = v; })
      .def_prop_rw(
          "spec_disable_by_batch_size",
          [](const EngineConfig& c) { return c.speculative.disable_by_batch_size; },
          [](EngineConfig& c, int32_t v) { c.speculative.disable_by_batch_size = v; },
          "No speculation in a step when more sequences than this run (0: never).")
      .def_prop_rw(
          "spec_draft_cost", [](const EngineConfig& c) { return c.speculative.draft_cost; },
          [](EngineConfig& c, double v) { c.speculative.draft_cost = v; },
          "Method draft_model: a draft position's cost as a share of a target step.");
#undef OSSA_SCHED_FIELD

  nb::class_<GenerationParams>(m, "GenerationParams")
      .def(nb::init<>())
      .def_rw("sampling", &GenerationParams::sampling)
      .def_rw("max_tokens", &GenerationParams::max_tokens)
      .def_rw("n", &GenerationParams::n)
      .def_rw("priority", &GenerationParams::priority)
      .def_rw("stop", &GenerationParams::stop)
      .def_rw("include_stop_str_in_output", &GenerationParams::include_stop_str_in_output)
      .def_rw("skip_special_tokens", &GenerationParams::skip_special_tokens)
      .def_rw("prompt_logprobs", &GenerationParams::prompt_logprobs)
      .def_rw("constraint", &GenerationParams::constraint);

  nb::class_<ossa::TokenLogprobs>(m, "TokenLogprobs")
      .def_ro("token", &ossa::TokenLogprobs::token)
      .def_ro("logprob", &ossa::TokenLogprobs::logprob)
      .def_ro("rank", &ossa::TokenLogprobs::rank)
      .def_ro("top", &ossa::TokenLogprobs::top);

  nb::class_<ossa::CompletionDelta>(m, "CompletionDelta")
      .def_ro("index", &ossa::CompletionDelta::index)
      .def_ro("token_ids", &ossa::CompletionDelta::token_ids)
      .def_prop_ro("text",
                   [](const ossa::CompletionDelta& d) {
                     // Text is valid UTF-8 by construction (the detokenizer replaces bad bytes with
                     // U+FFFD).
                     return nb::str(d.text.data(), d.text.size());
                   })
      .def_ro("logprobs", &ossa::CompletionDelta::logprobs)
      .def_ro("cumulative_logprob", &ossa::CompletionDelta::cumulative_logprob)
      .def_ro("finish_reason", &ossa::CompletionDelta::finish_reason)
      .def_ro("stop_str", &ossa::CompletionDelta::stop_str)
      .def_ro("stop_token", &ossa::CompletionDelta::stop_token);

  nb::class_<ossa::EngineOutput>(m, "EngineOutput")
      .def_ro("request_id", &ossa::EngineOutput::request_id)
      .def_ro("completions", &ossa::EngineOutput::completions)
      .def_ro("finished", &ossa::EngineOutput::finished)
      .def_ro("has_prompt_logprobs", &ossa::EngineOutput::has_prompt_logprobs)
      .def_ro("prompt_logprobs", &ossa::EngineOutput::prompt_logprobs)
      .def_ro("num_prompt_tokens", &ossa::EngineOutput::num_prompt_tokens)
      .def_ro("num_cached_tokens", &ossa::EngineOutput::num_cached_tokens)
      .def_ro("arrival_time", &ossa::EngineOutput::arrival_time)
      .def_ro("first_scheduled_time", &ossa::EngineOutput::first_scheduled_time)
      .def_ro("first_token_time", &ossa::EngineOutput::first_token_time)
      .def_ro("finished_time", &ossa::EngineOutput::finished_time)
      .def_ro("error", &ossa::EngineOutput::error)
      .def_ro("num_drafts", &ossa::EngineOutput::num_drafts)
      .def_ro("num_draft_tokens", &ossa::EngineOutput::num_draft_tokens)
      .def_ro("num_accepted_tokens", &ossa::EngineOutput::num_accepted_tokens);

  nb::class_<Engine>(m, "Engine",
                     "The C++ decode loop (schedule, forward, sample, detokenize, stop checks).")
      .def(nb::init<std::shared_ptr<const ossa::Model>, std::shared_ptr<const ossa::Tokenizer>,
                    const EngineConfig&, std::shared_ptr<const ossa::Model>>(),
           "model"_a, "tokenizer"_a, "config"_a, "draft_model"_a.none() = nb::none(),
           "draft_model: the proposer of speculative_config method 'draft_model' (the target's "
           "vocabulary).")
      .def("add_request", &Engine::add_request, "request_id"_a, "prompt_token_ids"_a, "params"_a)
      .def("abort", &Engine::abort, "request_id"_a)
      .def("step", [](Engine& e) { return released([&] { return e.step(); }); })
      .def("run_to_completion",
           [](Engine& e) { return released([&] { return e.run_to_completion(); }); })
      .def("has_unfinished", &Engine::has_unfinished)
      .def(
          "set_constraint_host",
          [](Engine& e, nb::object host, bool overlap) {
            e.set_constraint_host(
                host.is_none() ? nullptr : std::make_shared<PyConstraintHost>(host), overlap);
          },
          "host"_a.none(), "overlap"_a = true,
          "Where constrained rows get their token masks: an object with compute(handles, "
          "children,\n"
          "feed_offsets, feed_tokens, released, masks) -> [(row, error)] "
          "(ossa.structured.ConstraintHost).\n"
          "overlap: compute on a worker thread while the forward pass runs.")
      .def("start", &Engine::start)
      .def("stop",
           [](Engine& e) {
             nb::gil_scoped_release release;
             e.stop();
           })
      .def_prop_ro("running", &Engine::running)
      .def(
          "get_outputs",
          [](Engine& e, double timeout_s) {
            return released([&] { return e.get_outputs(timeout_s); });
          },
          "timeout_s"_a = 0.0)
      .def_prop_ro("vocab_size", &Engine::vocab_size)
      .def_prop_ro(
          "config", [](const Engine& e) { return e.config(); },
          "A copy of the engine's EngineConfig (as built; changing it changes nothing).")
      .def("stats", [](const Engine& e) {
        ossa::EngineStats s = e.stats();
        nb::dict d;
        d["num_running"] = s.scheduler.num_running;
        d["num_waiting"] = s.scheduler.num_waiting;
        d["kv_usage_percent"] = s.scheduler.kv_usage_percent;
        d["prefix_queries"] = s.scheduler.prefix_queries;
        d["prefix_hits"] = s.scheduler.prefix_hits;
        d["num_preemptions"] = s.scheduler.num_preemptions;
        d["num_blocks"] = s.num_blocks;
        d["prompt_tokens"] = s.prompt_tokens;
        d["generation_tokens"] = s.generation_tokens;
        d["steps"] = s.steps;
        d["requests_finished"] = s.requests_finished;
        d["time_forward"] = s.time_forward;
        d["time_sample"] = s.time_sample;
        d["time_schedule"] = s.time_schedule;
        d["time_detokenize"] = s.time_detokenize;
        d["constraint_calls"] = s.constraint_calls;
        d["time_constraint"] = s.time_constraint;
        d["time_constraint_wait"] = s.time_constraint_wait;
        d["spec_num_drafts"] = s.spec.num_drafts;
        d["spec_num_draft_tokens"] = s.spec.num_draft_tokens;
        d["spec_num_accepted_tokens"] = s.spec.num_accepted_tokens;
        d["spec_accepted_per_pos"] = s.spec.accepted_per_pos;
        return d;
      });
}
