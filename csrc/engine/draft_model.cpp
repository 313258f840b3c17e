#include "engine/draft_model.h"

#include <algorithm>
#include <limits>
#include <string>

#include "engine/batch_builder.h"
#include "util/error.h"

namespace ossa {

DraftModel::DraftModel(std::shared_ptr<const Model> model, int32_t num_blocks, int32_t block_size,
                       int32_t max_num_batched_tokens, KvType kv_type)
    : runner_(std::move(model), num_blocks, block_size, max_num_batched_tokens, kv_type),
      kv_(num_blocks, block_size, /*enable_prefix_caching=*/false, /*watermark=*/0.0),
      block_size_(block_size),
      max_tokens_(max_num_batched_tokens) {}

std::unique_ptr<DraftModel> make_draft_model(std::shared_ptr<const Model> draft,
                                             const Model& target, int32_t num_blocks,
                                             int32_t block_size, int32_t max_num_batched_tokens,
                                             KvType kv_type) {
  if (!draft)
    throw InputError("speculative_config method 'draft_model' needs a draft model (its 'model')");
  if (draft->config.n_vocab != target.config.n_vocab)
    throw InputError("speculative_config model: the draft's vocab_size " +
                     std::to_string(draft->config.n_vocab) + " differs from the target's " +
                     std::to_string(target.config.n_vocab));
  return std::make_unique<DraftModel>(std::move(draft), num_blocks, block_size,
                                      max_num_batched_tokens, kv_type);
}

void DraftModel::add(int64_t request, int32_t child, std::span<const int32_t> tokens, int32_t k) {
  OSSA_ASSERT(k >= 1 && !tokens.empty());
  Proposal p;
  p.request = request;
  p.child = child;
  p.tokens = tokens;
  p.k = k;
  props_.push_back(p);
}

std::span<const int32_t> DraftModel::draft(size_t i) const {
  return std::span<const int32_t>(drafts_.data() + i * stride_,
                                  static_cast<size_t>(props_[i].n_draft));
}

void DraftModel::release(int64_t request) {
  auto it = seqs_.lower_bound({request, std::numeric_limits<int32_t>::min()});
  while (it != seqs_.end() && it->first.first == request) {
    kv_.free(it->second.slot);
    free_slots_.push_back(it->second.slot);
    it = seqs_.erase(it);
  }
}

bool DraftModel::make_room(Proposal& p, int32_t num_computed, int32_t num_new) {
  while (!kv_.allocate_slots(p.seq->slot, num_computed, num_new, {}, false, copies_)) {
    // Free the least recently used sequence that does not propose this step.
    auto victim = seqs_.end();
    for (auto it = seqs_.begin(); it != seqs_.end(); ++it)
      if (it->second.last_used < step_ &&
          (victim == seqs_.end() || it->second.last_used < victim->second.last_used))
        victim = it;
    if (victim == seqs_.end()) return false;
    kv_.free(victim->second.slot);
    free_slots_.push_back(victim->second.slot);
    seqs_.erase(victim);
  }
  return true;
}

void DraftModel::run() {
  ++step_;
  int32_t k_max = 0;
  for (Proposal& p : props_) {
    auto [it, fresh] = seqs_.try_emplace({p.request, p.child});
    if (fresh) {
      if (free_slots_.empty()) {
        it->second.slot = next_slot_++;
      } else {
        it->second.slot = free_slots_.back();
        free_slots_.pop_back();
      }
    }
    it->second.last_used = step_;
    p.seq = &it->second;
    p.n_draft = 0;
    k_max = std::max(k_max, p.k);
  }
  stride_ = static_cast<size_t>(k_max);
  if (drafts_.size() < props_.size() * stride_) drafts_.resize(props_.size() * stride_);

  // Catch up: keep the common prefix of what the draft fed and the child's tokens (at least the
  // last token is fed again, for its logits), make room for it and the k - 1 draft positions.
  pieces_.clear();
  for (size_t i = 0; i < props_.size(); ++i) {
    Proposal& p = props_[i];
    Seq& s = *p.seq;
    const int32_t len = static_cast<int32_t>(p.tokens.size());
    const size_t common = static_cast<size_t>(
        std::mismatch(s.tokens.begin(), s.tokens.end(), p.tokens.begin(), p.tokens.end()).first -
        s.tokens.begin());
    const int32_t keep = std::min(static_cast<int32_t>(common), len - 1);
    kv_.trim(s.slot, keep);
    s.tokens.resize(static_cast<size_t>(keep));
    if (!make_room(p, keep, len + p.k - 1 - keep)) {
      p.seq = nullptr;  // no draft this step
      continue;
    }
    s.tokens.insert(s.tokens.end(), p.tokens.begin() + keep, p.tokens.end());
    pieces_.push_back(Piece{i, keep, len - keep, true});
  }
  feed();
  // d2..dk: one token a proposal a forward, batched.
  for (int32_t j = 1; j < k_max; ++j) {
    pieces_.clear();
    for (size_t i = 0; i < props_.size(); ++i) {
      Proposal& p = props_[i];
      if (p.seq == nullptr || p.k <= j) continue;
      const int32_t pos = static_cast<int32_t>(p.seq->tokens.size());
      p.seq->tokens.push_back(drafts_[i * stride_ + static_cast<size_t>(j - 1)]);
      pieces_.push_back(Piece{i, pos, 1, true});
    }
    feed();
  }
}

void DraftModel::feed() {
  chunk_.clear();
  int32_t used = 0;
  for (const Piece& piece : pieces_) {
    int32_t pos = piece.pos, left = piece.len;
    while (left > 0) {
      const int32_t take = std::min(left, max_tokens_ - used);
      chunk_.push_back(Piece{piece.prop, pos, take, piece.want && take == left});
      used += take;
      pos += take;
      left -= take;
      if (used == max_tokens_) {
        forward_chunk();
        chunk_.clear();
        used = 0;
      }
    }
  }
  if (used > 0) forward_chunk();
}

void DraftModel::forward_chunk() {
  Batch& b = batch_;
  b.clear();
  for (const Piece& piece : chunk_) {
    const Seq& s = *props_[piece.prop].seq;
    append_sequence(b, block_size_, s.tokens, {}, piece.pos, piece.len, kv_.block_table(s.slot));
    if (piece.want) b.logits_rows.push_back(b.n_tokens() - 1);
  }
  const size_t n_vocab = static_cast<size_t>(this->n_vocab());
  if (logits_.size() < b.logits_rows.size() * n_vocab)
    logits_.resize(b.logits_rows.size() * n_vocab);
  runner_.forward(b, logits_.data());
  size_t row = 0;
  for (const Piece& piece : chunk_) {
    if (!piece.want) continue;
    const float* l = logits_.data() + row++ * n_vocab;
    int32_t best = 0;
    float best_v = -std::numeric_limits<float>::infinity();
    for (size_t v = 0; v < n_vocab; ++v)
      if (l[v] > best_v) {  // NaN never compares greater
        best_v = l[v];
        best = static_cast<int32_t>(v);
      }
    Proposal& p = props_[piece.prop];
    drafts_[piece.prop * stride_ + static_cast<size_t>(p.n_draft++)] = best;
  }
}

}  // namespace ossa
