#include "cache/block_pool.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace ossa {

namespace {
constexpr uint64_t k_fnv_offset = 0xcbf29ce484222325ull;
constexpr uint64_t k_fnv_prime = 0x100000001b3ull;

inline uint64_t fnv_bytes(uint64_t h, uint64_t value, int n_bytes) {
  for (int i = 0; i < n_bytes; ++i) {
    h ^= (value >> (8 * i)) & 0xff;
    h *= k_fnv_prime;
  }
  return h;
}

// Slot for a key: the hash is already well mixed in its high bits by FNV's multiply; fold them
// down.
inline uint64_t slot_of(uint64_t key, uint64_t mask) {
  return (key ^ (key >> 29) ^ (key >> 47)) & mask;
}
}  // namespace

uint64_t hash_block_tokens(uint64_t parent, uint64_t extra_key, std::span<const int32_t> tokens) {
  uint64_t h = k_fnv_offset;
  h = fnv_bytes(h, parent, 8);
  h = fnv_bytes(h, extra_key, 8);
  for (int32_t t : tokens) h = fnv_bytes(h, static_cast<uint32_t>(t), 4);
  return h;
}

void BlockHashMap::init(int32_t num_blocks) {
  uint64_t capacity = 16;
  while (capacity < 2 * static_cast<uint64_t>(num_blocks)) capacity *= 2;
  keys.assign(capacity, 0);
  values.assign(capacity, -1);
  mask = capacity - 1;
}

int32_t BlockHashMap::find(uint64_t key) const {
  for (uint64_t i = slot_of(key, mask);; i = (i + 1) & mask) {
    if (values[i] < 0) return -1;
    if (keys[i] == key) return values[i];
  }
}

void BlockHashMap::insert(uint64_t key, int32_t block) {
  uint64_t i = slot_of(key, mask);
  while (values[i] >= 0) i = (i + 1) & mask;
  keys[i] = key;
  values[i] = block;
}

void BlockHashMap::erase(uint64_t key) {
  uint64_t i = slot_of(key, mask);
  while (true) {
    if (values[i] < 0) return;
    if (keys[i] == key) break;
    i = (i + 1) & mask;
  }
  // Backward-shift deletion: pull later entries of the probe run into the hole when their home
  // slot does not lie cyclically in (hole, j].
  uint64_t hole = i;
  for (uint64_t j = (hole + 1) & mask; values[j] >= 0; j = (j + 1) & mask) {
    uint64_t home = slot_of(keys[j], mask);
    bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (!stays) {
      keys[hole] = keys[j];
      values[hole] = values[j];
      hole = j;
    }
  }
  values[hole] = -1;
}

void BlockHashMap::clear() { std::fill(values.begin(), values.end(), -1); }

BlockPool::BlockPool(int32_t num_blocks_, int32_t block_size_)
    : num_blocks(num_blocks_), block_size(block_size_), num_free(num_blocks_) {
  if (num_blocks < 1)
    throw InputError("num_blocks must be >= 1, got " + std::to_string(num_blocks));
  if (block_size < 1)
    throw InputError("block_size must be >= 1, got " + std::to_string(block_size));
  ref_count.assign(num_blocks, 0);
  prev.resize(num_blocks + 1);
  next.resize(num_blocks + 1);
  in_free_queue.assign(num_blocks, 1);
  // Initial queue: 0, 1, ..., num_blocks - 1, so fresh pools hand out ascending ids.
  for (int32_t b = 0; b <= num_blocks; ++b) {
    prev[b] = b == 0 ? num_blocks : b - 1;
    next[b] = b == num_blocks ? 0 : b + 1;
  }
  prev[num_blocks] = num_blocks - 1;
  has_hash.assign(num_blocks, 0);
  hash.assign(num_blocks, 0);
  parent_hash.assign(num_blocks, 0);
  extra_key.assign(num_blocks, 0);
  tokens.assign(static_cast<size_t>(num_blocks) * block_size, 0);
  cached.init(num_blocks);
}

void BlockPool::queue_remove(int32_t b) {
  next[prev[b]] = next[b];
  prev[next[b]] = prev[b];
  in_free_queue[b] = 0;
  --num_free;
}

void BlockPool::queue_push_back(int32_t b) {
  int32_t tail = prev[num_blocks];
  next[tail] = b;
  prev[b] = tail;
  next[b] = num_blocks;
  prev[num_blocks] = b;
  in_free_queue[b] = 1;
  ++num_free;
}

void BlockPool::evict_hash(int32_t b) {
  if (!has_hash[b]) return;
  if (cached.find(hash[b]) == b) cached.erase(hash[b]);
  has_hash[b] = 0;
  ++num_evictions;
}

int32_t BlockPool::allocate() {
  OSSA_ASSERT(num_free > 0);
  int32_t b = next[num_blocks];
  queue_remove(b);
  evict_hash(b);
  ref_count[b] = 1;
  return b;
}

void BlockPool::touch(int32_t b) {
  if (ref_count[b] == 0) queue_remove(b);
  ++ref_count[b];
}

void BlockPool::release(int32_t b) {
  OSSA_ASSERT(ref_count[b] > 0);
  if (--ref_count[b] == 0) queue_push_back(b);
}

int32_t BlockPool::lookup(uint64_t h, uint64_t parent, uint64_t extra,
                          std::span<const int32_t> block_tokens) const {
  int32_t b = cached.find(h);
  if (b < 0) return -1;
  if (parent_hash[b] != parent || extra_key[b] != extra) return -1;
  const int32_t* stored = tokens.data() + static_cast<size_t>(b) * block_size;
  if (std::memcmp(stored, block_tokens.data(), sizeof(int32_t) * block_size) != 0) return -1;
  return b;
}

bool BlockPool::cache(int32_t b, uint64_t h, uint64_t parent, uint64_t extra,
                      std::span<const int32_t> block_tokens) {
  OSSA_ASSERT(static_cast<int32_t>(block_tokens.size()) == block_size);
  if (has_hash[b] || cached.find(h) >= 0) return false;
  has_hash[b] = 1;
  hash[b] = h;
  parent_hash[b] = parent;
  extra_key[b] = extra;
  std::memcpy(tokens.data() + static_cast<size_t>(b) * block_size, block_tokens.data(),
              sizeof(int32_t) * block_size);
  cached.insert(h, b);
  return true;
}

std::vector<int32_t> BlockPool::free_queue() const {
  std::vector<int32_t> out;
  out.reserve(num_free);
  for (int32_t b = next[num_blocks]; b != num_blocks; b = next[b]) out.push_back(b);
  return out;
}

int32_t BlockPool::num_cached() const {
  int32_t n = 0;
  for (uint8_t x : has_hash) n += x;
  return n;
}

}  // namespace ossa
