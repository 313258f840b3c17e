#include "engine/speculative.h"

#include <algorithm>

#include "engine/engine.h"
#include "util/error.h"

namespace ossa {

const char* spec_method_name(SpecMethod m) {
  return m == SpecMethod::Ngram ? "ngram" : m == SpecMethod::DraftModel ? "draft_model" : "none";
}

SpecMethod parse_spec_method(const std::string& name) {
  if (name == "ngram") return SpecMethod::Ngram;
  if (name == "draft_model") return SpecMethod::DraftModel;
  if (name == "none" || name.empty()) return SpecMethod::None;
  throw InputError("speculative_config method must be 'ngram' or 'draft_model', got '" + name +
                   "'");
}

void validate_speculative_config(const SpeculativeConfig& c) {
  if (c.method == SpecMethod::None) return;
  if (c.num_speculative_tokens < 1 || c.num_speculative_tokens > 64)
    throw InputError("speculative_config num_speculative_tokens must be in [1, 64], got " +
                     std::to_string(c.num_speculative_tokens));
  if (c.prompt_lookup_min < 1)
    throw InputError("speculative_config prompt_lookup_min must be >= 1, got " +
                     std::to_string(c.prompt_lookup_min));
  if (c.prompt_lookup_max < c.prompt_lookup_min)
    throw InputError("speculative_config prompt_lookup_max must be >= prompt_lookup_min (" +
                     std::to_string(c.prompt_lookup_min) + "), got " +
                     std::to_string(c.prompt_lookup_max));
  if (!(c.draft_cost >= 0 && c.draft_cost <= 1))
    throw InputError("speculative_config draft_cost must be in [0, 1], got " +
                     std::to_string(c.draft_cost));
  if (c.disable_by_batch_size != 0 && c.disable_by_batch_size < 2)
    throw InputError(
        "speculative_config disable_by_batch_size must be >= 2 (or 0 / None: never), got " +
        std::to_string(c.disable_by_batch_size));
}

void ngram_propose(std::span<const int32_t> tokens, int32_t min_n, int32_t max_n, int32_t k,
                   std::vector<int32_t>& out) {
  out.clear();
  const int64_t len = static_cast<int64_t>(tokens.size());
  if (k < 1) return;
  for (int64_t n = std::min<int64_t>(max_n, len - 1); n >= min_n; --n) {
    const int32_t* suffix = tokens.data() + (len - n);
    // An earlier occurrence starts at i <= len - n - 1, so at least one token follows it.
    for (int64_t i = len - n - 1; i >= 0; --i) {
      if (!std::equal(suffix, suffix + n, tokens.data() + i)) continue;
      const int64_t from = i + n, to = std::min<int64_t>(from + k, len);
      out.assign(tokens.begin() + from, tokens.begin() + to);
      return;
    }
  }
}

int32_t SpecControl::next(int32_t k_max, int32_t batch, double draft_cost) {
  const double alpha =
      (static_cast<double>(accepted) + 256.0) / (static_cast<double>(accepted + rejected) + 384.0);
  const double worth =
      static_cast<double>(batch) / (k_spec_cost_ratio + static_cast<double>(batch)) + draft_cost;
  int32_t k = 0;
  for (double p = alpha; k < k_max && p > worth; p *= alpha) ++k;
  if (k == 0 && ++idle >= k_spec_probe_interval) {
    idle = 0;
    k = 1;
  }
  return k;
}

void SpecControl::record(int32_t drafted, int32_t accepted_now) {
  accepted += 256 * static_cast<int64_t>(accepted_now) - accepted / 8;
  rejected += (accepted_now < drafted ? 256 : 0) - rejected / 8;
}

}  // namespace ossa

// -- the engine's side
// -------------------------------------------------------------------------------

namespace ossa {

void Engine::verify_rows(const SchedulerOutput& so, size_t si, size_t next) {
  const ScheduledSeq& s = so.seqs[si];
  RequestState& r = *requests_.at(s.request_id);
  ChildState& c = r.children[s.child];
  const int32_t* draft = so.draft(si).data();
  // Row k is output index n_out + k, as plain decoding samples it: the outputs then d1..dk.
  const size_t n_out = c.output_tokens.size();
  c.verify_tokens.assign(c.output_tokens.begin(), c.output_tokens.end());
  c.verify_tokens.insert(c.verify_tokens.end(), draft, draft + s.num_draft);
  for (int32_t k = 0; k < s.num_samples; ++k) {
    rows_[next + k] =
        row_input(r, s.child, std::span<const int32_t>(c.verify_tokens.data(), n_out + k));
    row_child_[next + k] = {s.request_id, s.child};
  }
}

void Engine::record_verification(const ScheduledSeq& s, const int32_t* draft,
                                 const int32_t* sampled) {
  auto it = requests_.find(s.request_id);
  if (it == requests_.end()) return;
  RequestState& r = *it->second;
  // Drafts accepted: those equal to the draw at their position, up to the first that is not, among
  // the tokens the run appended.
  int32_t accepted = 0;
  while (accepted < std::min(s.num_appended, s.num_draft) && sampled[accepted] == draft[accepted])
    ++accepted;
  r.children[s.child].spec.record(s.num_draft, accepted);
  ++r.num_drafts;
  r.num_draft_tokens += s.num_draft;
  r.num_accepted_tokens += accepted;
  SpecStats& st = stats_.spec;
  ++st.num_drafts;
  st.num_draft_tokens += s.num_draft;
  st.num_accepted_tokens += accepted;
  for (int32_t j = 0; j < accepted; ++j) ++st.accepted_per_pos[j];
}

void Engine::propose_drafts(const SchedulerOutput& so) {
  const SpeculativeConfig& sc = config_.speculative;
  // Above the threshold no child drafts: the next step decodes plainly (tokens never depend on k).
  if (sc.disable_by_batch_size > 0 && scheduler_.stats().num_running > sc.disable_by_batch_size)
    return;
  int32_t batch = 0;  // sequences that decoded this step
  for (const ScheduledSeq& s : so.seqs)
    batch += s.num_samples > 0 ? (s.num_draft > 0 ? 1 : s.num_samples) : 0;
  if (draft_model_) draft_model_->clear();
  for (const ScheduledSeq& s : so.seqs) {
    if (s.num_samples == 0) continue;
    auto it = requests_.find(s.request_id);
    if (it == requests_.end()) continue;
    RequestState& r = *it->second;
    if (r.params.constraint >= 0) continue;  // constrained requests do not speculate
    const int32_t n_children = s.num_samples > 1 && s.num_draft == 0 ? s.num_samples : 1;
    for (int32_t k = 0; k < n_children; ++k) {
      const int32_t child = n_children > 1 ? k : s.child;
      ChildState& c = r.children[child];
      if (c.finished) continue;
      const int32_t n_out = static_cast<int32_t>(c.output_tokens.size());
      const int32_t n_tokens = static_cast<int32_t>(r.prompt.size()) + n_out;
      // A run appends at most k + 1 tokens: none past max_tokens or max_model_len.
      const int32_t limit = std::min({c.spec.next(sc.num_speculative_tokens, batch, sc.draft_cost),
                                      r.params.max_tokens - n_out - 1,
                                      config_.scheduler.max_model_len - n_tokens - 1});
      if (limit <= 0) continue;
      if (draft_model_) {
        draft_model_->add(r.key, child, scheduler_.tokens(r.key, child), limit);
        continue;
      }
      ngram_propose(scheduler_.tokens(r.key, child), sc.prompt_lookup_min, sc.prompt_lookup_max,
                    limit, draft_);
      if (!draft_.empty()) scheduler_.set_draft(r.key, child, draft_);
    }
  }
  if (!draft_model_ || draft_model_->size() == 0) return;
  draft_model_->run();
  for (size_t i = 0; i < draft_model_->size(); ++i) {
    std::span<const int32_t> d = draft_model_->draft(i);
    if (!d.empty()) scheduler_.set_draft(draft_model_->request(i), draft_model_->child(i), d);
  }
}

}  // namespace ossa
