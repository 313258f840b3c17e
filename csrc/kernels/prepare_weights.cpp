// prepare_weights: the load-time layouts of the matmul kernels' weights (see prepare_weights.h).
#include "kernels/prepare_weights.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <new>
#include <string>

#include "formats/dequantize.h"
#include "kernels/matmul.h"
#include "kernels/matmul_kernels.h"
#include "kernels/parallel.h"
#include "util/error.h"
#include "util/half.h"

namespace ossa {

namespace {
constexpr std::align_val_t k_align{64};
constexpr int64_t k_piece_groups = 16;  // 16-row groups per work item: 256 rows
}  // namespace

namespace {
constexpr size_t k_huge = size_t{2} << 20;
// n bytes (n >= k_huge) of anonymous memory at a 2 MiB boundary, advised for huge pages; returns
// the mapping's size through `mapped`.
uint8_t* map_huge(size_t n, size_t& mapped) {
  mapped = (n + 4095) / 4096 * 4096;
  void* p =
      ::mmap(nullptr, mapped + k_huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  const uintptr_t start = (at + k_huge - 1) / k_huge * k_huge;
  if (start > at) ::munmap(p, start - at);
  const uintptr_t end = at + mapped + k_huge;
  if (end > start + mapped) ::munmap(reinterpret_cast<void*>(start + mapped), end - start - mapped);
  ::madvise(reinterpret_cast<void*>(start), mapped, MADV_HUGEPAGE);  // advice only: may fail
  return reinterpret_cast<uint8_t*>(start);
}
}  // namespace

AlignedBytes::AlignedBytes(size_t n) : p_(nullptr, Free{0}), n_(n) {
  if (n >= k_huge) {
    size_t mapped = 0;
    p_.reset(map_huge(n, mapped));
    p_.get_deleter().mapped = mapped;
    return;
  }
  p_.reset(static_cast<uint8_t*>(::operator new(std::max<size_t>(n, 1), k_align)));
}
void AlignedBytes::Free::operator()(uint8_t* p) const noexcept {
  if (mapped != 0)
    ::munmap(p, mapped);
  else
    ::operator delete(p, k_align);
}

size_t bf16_compute_bytes(const TensorView& w) {
  return static_cast<size_t>((w.rows + 15) / 16 * 16 * w.cols * 2);  // tiles: rows rounded up to 16
}

namespace {

void check_bf16_compute(const TensorView& w) {
  if (w.cols % 32 != 0)
    throw ModelError("dtype bfloat16: a matrix row of " + std::to_string(w.cols) +
                     " values is not a multiple of 32");
}

// Groups [g_begin, g_end) of 16 rows of w's bfloat16 copy: tiles (amx) or row-major BF16.
void bf16_groups(const TensorView& w, uint8_t* out, bool amx, int64_t g_begin, int64_t g_end) {
  if (amx) return amx_repack_bf16_rounded(w, out, g_begin, g_end);
  uint16_t* dst = reinterpret_cast<uint16_t*>(out);
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = g_begin * 16; r < std::min(w.rows, g_end * 16); ++r) {
    dequantize_row(w, r, row.data());
    for (int64_t k = 0; k < w.cols; ++k)
      dst[r * w.cols + k] = f32_to_bf16(row[static_cast<size_t>(k)]);
  }
}

TensorView bf16_view(const TensorView& w, uint8_t* out, bool amx) {
  TensorView bf = w;
  bf.bf16_compute = true;
  if (amx) {
    bf.packed = out;
    return bf;
  }
  bf.type = DType::BF16;
  bf.data = out;
  bf.row_bytes = static_cast<size_t>(w.cols * 2);
  bf.packed = nullptr;
  return bf;
}

}  // namespace

TensorView make_bf16_compute(const TensorView& w, uint8_t* out, bool amx) {
  check_bf16_compute(w);
  amx = amx && (amx_available() || bf16dp_available());
  parallel_for((w.rows + 15) / 16, 8, parallel_threads(),
               [&](int64_t begin, int64_t end, int) { bf16_groups(w, out, amx, begin, end); });
  return bf16_view(w, out, amx);
}

bool prepare_weights(const std::vector<TensorView*>& matrices, bool bf16_compute, bool amx,
                     PreparedWeights& out, bool quantized_activations) {
  for (const TensorView* v : matrices)  // (W8A8's activations are the model's own quantization)
    if (v->act_quant != k_act_quant_none && (bf16_compute || quantized_activations))
      throw ModelError(std::string("a folder whose activations are quantized (compressed-tensors "
                                   "W8A8 / FP8) runs with its own activation quantization: ") +
                       (bf16_compute ? "dtype bfloat16" : "quantized_activations") +
                       " is not supported for it");
  // Without AMX, amx still repacks the int8 types (amx_i8_type: Q4_K, Q6_K, Q8_0, ...) for the
  // VNNI / AVX2 int8 kernels, and Q2_K / Q3_K for the VNNI loop where the build has it (not for
  // bfloat16).
  const bool i8_only = amx && !amx_available() && !bf16_compute && i8_avx2_available();
  // bfloat16 without AMX: the tile layout where VDPBF16PS takes it (bf16dp_available).
  const bool bf16_tiles = bf16_compute && amx && (amx_available() || bf16dp_available());
  amx = amx && amx_available();
  if (!bf16_compute && !amx && !i8_only) return false;
  // Which matrices get a copy, and the work items: (matrix, first group) pieces of all of them.
  struct Job {
    TensorView* view;
    TensorView src;
    uint8_t* dst;
  };
  std::vector<Job> jobs;
  for (TensorView* v : matrices) {
    if (v->empty() || v->type == DType::BITNET) continue;  // (BitNet's int8 path in every mode)
    size_t bytes = 0;
    if (bf16_compute) {
      check_bf16_compute(*v);
      bytes = bf16_compute_bytes(*v);
    } else {
      const bool i8 = amx_i8_type(v->type);
      bytes = amx || i8 || amx_q23k_type(v->type) ? amx_repacked_bytes(*v) : 0;
    }
    if (bytes == 0) continue;
    out.buffers.emplace_back(bytes);
    jobs.push_back(Job{v, *v, out.buffers.back().data()});
  }
  std::vector<std::pair<int64_t, int64_t>> pieces;  // (job, first group)
  for (size_t j = 0; j < jobs.size(); ++j)
    for (int64_t g = 0; g < (jobs[j].src.rows + 15) / 16; g += k_piece_groups)
      pieces.emplace_back(static_cast<int64_t>(j), g);
  parallel_for(static_cast<int64_t>(pieces.size()), 1, parallel_threads(),
               [&](int64_t begin, int64_t end, int) {
                 for (int64_t p = begin; p < end; ++p) {
                   const Job& job = jobs[static_cast<size_t>(pieces[static_cast<size_t>(p)].first)];
                   const int64_t g0 = pieces[static_cast<size_t>(p)].second;
                   const int64_t g1 = std::min((job.src.rows + 15) / 16, g0 + k_piece_groups);
                   if (bf16_compute)
                     bf16_groups(job.src, job.dst, bf16_tiles, g0, g1);
                   else
                     amx_repack_groups(job.src, job.dst, g0, g1, quantized_activations);
                 }
               });
  for (Job& job : jobs) {
    if (bf16_compute) {
      *job.view = bf16_view(job.src, job.dst, bf16_tiles);
    } else {
      job.view->packed = job.dst;
    }
  }
  return amx && !jobs.empty();
}

}  // namespace ossa
