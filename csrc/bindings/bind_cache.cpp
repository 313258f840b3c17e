// Bindings for the block pool and KV-cache manager: used by the tests (C++ vs the Python twin) and
// the benchmarks; the engine drives them from C++.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "cache/block_pool.h"
#include "cache/kv_cache_manager.h"
#include "util/error.h"

namespace nb = nanobind;
using ossa::BlockPool;
using ossa::KVCacheManager;

namespace {

void check_block(const BlockPool& p, int32_t b) {
  if (b < 0 || b >= p.num_blocks)
    throw ossa::InputError("block id " + std::to_string(b) + " out of range");
}

void check_tokens(const BlockPool& p, const std::vector<int32_t>& t) {
  if (static_cast<int32_t>(t.size()) != p.block_size)
    throw ossa::InputError("a block holds " + std::to_string(p.block_size) + " tokens, got " +
                           std::to_string(t.size()));
}

}  // namespace

void bind_cache(nb::module_& m) {
  m.def(
      "hash_block_tokens",
      [](uint64_t parent, uint64_t extra_key, const std::vector<int32_t>& tokens) {
        return ossa::hash_block_tokens(parent, extra_key, tokens);
      },
      nb::arg("parent"), nb::arg("extra_key"), nb::arg("tokens"),
      "64-bit FNV-1a of (parent, extra_key, tokens) as little-endian bytes.");

  m.def("kv_block_bytes", &ossa::kv_block_bytes, nb::arg("n_layer"), nb::arg("n_head_kv"),
        nb::arg("head_dim"), nb::arg("block_size") = 16, nb::arg("dtype_bytes") = 2,
        "Bytes of one KV-cache block (K and V, all layers).");
  m.def("num_blocks_for_memory", &ossa::num_blocks_for_memory, nb::arg("memory_bytes"),
        nb::arg("n_layer"), nb::arg("n_head_kv"), nb::arg("head_dim"), nb::arg("block_size") = 16,
        nb::arg("dtype_bytes") = 2, "How many KV-cache blocks a byte budget holds.");
  m.def("watermark_blocks_for", &ossa::watermark_blocks_for, nb::arg("watermark"),
        nb::arg("num_blocks"),
        "floor(watermark * num_blocks): the blocks the scheduler keeps free when admitting.");
  m.attr("DEFAULT_WATERMARK") = ossa::k_default_watermark;

  nb::class_<BlockPool>(m, "BlockPool",
                        "KV-cache blocks: ref counts, LRU free queue, prefix-cache map.")
      .def(nb::init<int32_t, int32_t>(), nb::arg("num_blocks"), nb::arg("block_size"))
      .def_ro("num_blocks", &BlockPool::num_blocks)
      .def_ro("block_size", &BlockPool::block_size)
      .def_ro("num_free", &BlockPool::num_free)
      .def_ro("num_evictions", &BlockPool::num_evictions)
      .def("allocate",
           [](BlockPool& p) {
             if (p.num_free == 0) throw ossa::InputError("no free block");
             return p.allocate();
           })
      .def(
          "touch",
          [](BlockPool& p, int32_t b) {
            check_block(p, b);
            p.touch(b);
          },
          nb::arg("block"))
      .def(
          "release",
          [](BlockPool& p, int32_t b) {
            check_block(p, b);
            if (p.ref_count[b] == 0)
              throw ossa::InputError("block " + std::to_string(b) + " is not held");
            p.release(b);
          },
          nb::arg("block"))
      .def(
          "lookup",
          [](const BlockPool& p, uint64_t h, uint64_t parent, uint64_t extra,
             const std::vector<int32_t>& t) {
            check_tokens(p, t);
            return p.lookup(h, parent, extra, t);
          },
          nb::arg("hash"), nb::arg("parent"), nb::arg("extra_key"), nb::arg("tokens"))
      .def(
          "cache",
          [](BlockPool& p, int32_t b, uint64_t h, uint64_t parent, uint64_t extra,
             const std::vector<int32_t>& t) {
            check_block(p, b);
            check_tokens(p, t);
            return p.cache(b, h, parent, extra, t);
          },
          nb::arg("block"), nb::arg("hash"), nb::arg("parent"), nb::arg("extra_key"),
          nb::arg("tokens"))
      .def("free_queue", &BlockPool::free_queue)
      .def("ref_counts", [](const BlockPool& p) { return p.ref_count; })
      .def(
          "cached_blocks",
          [](const BlockPool& p) {
            std::vector<std::pair<int32_t, uint64_t>> out;
            for (int32_t b = 0; b < p.num_blocks; ++b)
              if (p.has_hash[b]) out.emplace_back(b, p.hash[b]);
            return out;
          },
          "(block, hash) of every block that carries a prefix-cache hash, by block id.");

  nb::class_<ossa::CacheStats>(m, "CacheStats")
      .def_ro("num_blocks", &ossa::CacheStats::num_blocks)
      .def_ro("num_free_blocks", &ossa::CacheStats::num_free_blocks)
      .def_ro("usage_percent", &ossa::CacheStats::usage_percent)
      .def_ro("prefix_queries", &ossa::CacheStats::prefix_queries)
      .def_ro("prefix_hits", &ossa::CacheStats::prefix_hits);

  nb::class_<KVCacheManager>(m, "KVCacheManager", "Block tables per sequence over a BlockPool.")
      .def(nb::init<int32_t, int32_t, bool, double>(), nb::arg("num_blocks"), nb::arg("block_size"),
           nb::arg("enable_prefix_caching") = true,
           nb::arg("watermark") = ossa::k_default_watermark)
      .def_prop_ro("watermark_blocks", &KVCacheManager::watermark_blocks)
      .def(
          "get_computed_blocks",
          [](KVCacheManager& kv, int32_t seq, const std::vector<int32_t>& tokens,
             uint64_t extra_key) {
            if (seq < 0) throw ossa::InputError("sequence ids must be >= 0");
            if (!kv.block_table(seq).empty())
              throw ossa::InputError("the sequence already holds blocks");
            std::vector<int32_t> hits;
            int32_t n = kv.get_computed_blocks(seq, tokens, extra_key, hits);
            return std::make_tuple(hits, n);
          },
          nb::arg("seq"), nb::arg("tokens"), nb::arg("extra_key") = 0,
          "(hit blocks, tokens they cover) for a sequence holding no blocks.")
      .def(
          "allocate_slots",
          [](KVCacheManager& kv, int32_t seq, int32_t num_computed, int32_t num_new,
             const std::vector<int32_t>& hits, bool apply_watermark) {
            if (seq < 0 || num_computed < 0 || num_new < 0)
              throw ossa::InputError("negative argument");
            const int32_t bs = kv.block_size();
            const auto& table = kv.block_table(seq);
            if (!hits.empty() &&
                (!table.empty() || num_computed != static_cast<int32_t>(hits.size()) * bs))
              throw ossa::InputError(
                  "hits are only taken by an empty sequence, with num_computed = their tokens");
            if (num_computed > static_cast<int32_t>(table.size() + hits.size()) * bs)
              throw ossa::InputError("num_computed exceeds the sequence's blocks");
            for (int32_t b : hits)
              if (b < 0 || b >= kv.num_blocks()) throw ossa::InputError("hit block out of range");
            std::vector<std::pair<int32_t, int32_t>> copies;
            bool ok = kv.allocate_slots(seq, num_computed, num_new, hits, apply_watermark, copies);
            return std::make_tuple(ok, copies);
          },
          nb::arg("seq"), nb::arg("num_computed"), nb::arg("num_new"),
          nb::arg("hits") = std::vector<int32_t>{}, nb::arg("apply_watermark") = false,
          "(ok, [(src, dst) copy-on-write block copies]).")
      .def(
          "cache_full_blocks",
          [](KVCacheManager& kv, int32_t seq, const std::vector<int32_t>& tokens,
             int32_t num_computed, uint64_t extra_key) {
            if (num_computed < 0 || num_computed > static_cast<int32_t>(tokens.size()) ||
                num_computed > static_cast<int32_t>(kv.block_table(seq).size()) * kv.block_size())
              throw ossa::InputError("num_computed out of range");
            kv.cache_full_blocks(seq, tokens, num_computed, extra_key);
          },
          nb::arg("seq"), nb::arg("tokens"), nb::arg("num_computed"), nb::arg("extra_key") = 0)
      .def(
          "free",
          [](KVCacheManager& kv, int32_t seq) {
            if (seq >= 0) kv.free(seq);
          },
          nb::arg("seq"))
      .def(
          "fork",
          [](KVCacheManager& kv, int32_t parent, int32_t child) {
            if (parent < 0 || child < 0 || parent == child)
              throw ossa::InputError("bad sequence ids");
            if (!kv.block_table(child).empty())
              throw ossa::InputError("the child already holds blocks");
            kv.fork(parent, child);
          },
          nb::arg("parent"), nb::arg("child"))
      .def(
          "block_table", [](const KVCacheManager& kv, int32_t seq) { return kv.block_table(seq); },
          nb::arg("seq"))
      .def("stats", &KVCacheManager::stats)
      .def_prop_ro("pool", &KVCacheManager::pool, nb::rv_policy::reference_internal);
}
