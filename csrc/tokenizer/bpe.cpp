#include "tokenizer/bpe.h"

#include <algorithm>

namespace ossa {

size_t StringHash::operator()(std::string_view s) const {
  // FNV-1a, 64-bit: the pieces are short, so a simple byte hash beats std::hash's setup cost.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return static_cast<size_t>(h ^ (h >> 29));
}

void MergeTable::reserve(size_t n) {
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  std::vector<Slot> old;
  old.swap(slots_);
  slots_.assign(cap, Slot{});
  count_ = 0;
  for (const Slot& s : old)
    if (s.key != k_empty)
      insert(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key & 0xFFFFFFFFu), s.rank,
             s.merged);
}

void MergeTable::grow() { reserve(std::max<size_t>(16, count_ * 2)); }

void MergeTable::insert(int32_t left, int32_t right, int32_t rank, int32_t merged) {
  if (slots_.empty() || 2 * (count_ + 1) > slots_.size()) grow();
  uint64_t key = pack(left, right);
  size_t mask = slots_.size() - 1;
  for (size_t i = hash(key) & mask;; i = (i + 1) & mask) {
    Slot& s = slots_[i];
    if (s.key == key) return;  // first merge of a pair wins, as in tokenizers
    if (s.key == k_empty) {
      s = Slot{key, rank, merged};
      ++count_;
      return;
    }
  }
}

namespace {

struct Symbol {
  int32_t id;
  int32_t prev, next;  // -1 at the ends; a merged-away symbol has id = -1
};

struct Candidate {
  int32_t rank, pos, merged;
  // std heap is a max-heap: the "largest" element must be the lowest rank, then the lowest
  // position.
  bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

void bpe_merge(const MergeTable& merges, std::vector<int32_t>& ids, std::vector<int32_t>& out) {
  const int32_t n = static_cast<int32_t>(ids.size());
  if (n <= 1) {
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  if (n == 2) {  // the common short case, without a heap
    int32_t rank, merged;
    if (merges.find(ids[0], ids[1], rank, merged))
      out.push_back(merged);
    else
      out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  thread_local std::vector<Symbol> sym;
  thread_local std::vector<Candidate> heap;
  sym.resize(n);
  heap.clear();
  for (int32_t i = 0; i < n; ++i) sym[i] = Symbol{ids[i], i - 1, i + 1 < n ? i + 1 : -1};
  auto push_pair = [&](int32_t pos) {
    int32_t next = sym[pos].next;
    if (next < 0) return;
    int32_t rank, merged;
    if (merges.find(sym[pos].id, sym[next].id, rank, merged)) {
      heap.push_back(Candidate{rank, pos, merged});
      std::push_heap(heap.begin(), heap.end());
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = sym[top.pos];
    if (left.id < 0 || left.next < 0) continue;
    // A stale candidate: the pair at pos changed since it was pushed (the same check as tokenizers:
    // the current pair must still merge into the same token).
    int32_t rank, merged;
    if (!merges.find(left.id, sym[left.next].id, rank, merged) || merged != top.merged) continue;
    int32_t right = left.next;
    left.id = top.merged;
    left.next = sym[right].next;
    sym[right].id = -1;
    if (left.next >= 0) sym[left.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

}  // namespace ossa
