#pragma once
// Byte-pair encoding of one pre-tokenized piece, merging by rank exactly as Hugging Face
// `tokenizers` does: always the lowest-ranked pair, leftmost first, found with a heap over a linked
// list of symbols (O(n log n) per piece, so one long piece -- SentencePiece-style models do not
// pre-split -- stays fast).
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ossa {

// Deliberately not noexcept: libstdc++ then keeps each node's hash code (it recomputes the hash of
// every node it walks past for a noexcept hash it thinks fast), which made walking the buckets most
// of building a 49k-token tokenizer.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const;
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// (left id, right id) -> (rank, merged id), open addressing.
class MergeTable {
 public:
  void reserve(size_t n);
  void insert(int32_t left, int32_t right, int32_t rank, int32_t merged);
  // Returns false if the pair has no merge.
  bool find(int32_t left, int32_t right, int32_t& rank, int32_t& merged) const {
    if (slots_.empty()) return false;
    uint64_t key = pack(left, right);
    size_t mask = slots_.size() - 1;
    for (size_t i = hash(key) & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.key == k_empty) return false;
      if (s.key == key) {
        rank = s.rank;
        merged = s.merged;
        return true;
      }
    }
  }
  size_t size() const { return count_; }

 private:
  static constexpr uint64_t k_empty = ~uint64_t{0};
  struct Slot {
    uint64_t key = k_empty;
    int32_t rank = 0, merged = 0;
  };
  static uint64_t pack(int32_t a, int32_t b) {
    return (uint64_t{static_cast<uint32_t>(a)} << 32) | static_cast<uint32_t>(b);
  }
  static size_t hash(uint64_t k) { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 17); }
  void grow();
  std::vector<Slot> slots_;
  size_t count_ = 0;
};

// Merges symbol ids in place (the initial symbols of one piece) and appends the result to out.
void bpe_merge(const MergeTable& merges, std::vector<int32_t>& symbols, std::vector<int32_t>& out);

}  // namespace ossa
