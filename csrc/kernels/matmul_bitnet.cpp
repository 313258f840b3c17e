// BitNet b1.58's BitLinear (DType::BITNET), as transformers runs a packed checkpoint
// (integrations/bitnet.py, BitLinear): ternary weights w in {-1, 0, 1} with one scale per matrix
// (TensorView::scale, the checkpoint's weight_scale), times activations quantized per row to int8
// by their absolute maximum:
//
//   s = 127 * (1 / max(max_k |x_k|, 1e-5)),  q_k = round_half_even(x_k * s) clamped to [-128, 127]
//   y_o = float(sum_k q_k * w_ok) / (ws * s)
//
// every step in float32 as transformers computes it in a float32 model (the sums are integers,
// exact in float32 below 2^24). Here the sums are int32: VNNI's vpdpbusd multiplies the unsigned
// codes c = w + 1 (0, 1, 2) by q, and sum q w = sum q c - sum q. Every row count, tile and thread
// count gives the same bits (nothing is rounded before the final division).
//
// The storage (matmul_kernels.h, bitnet_byte): rows in groups of four, per 64 columns 16 bytes a
// row, byte b holding the codes of columns b, 16 + b, 32 + b and 48 + b in bits 0-1, 2-3, 4-5 and
// 6-7, so one 16-byte load broadcast to the four 128-bit lanes and shifted by 0 / 2 / 4 / 6 gives
// the 64 codes in column order; a group's four rows of 64 columns are one cache line, so a tile of
// the group streams the matrix in order.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/matmul_kernels.h"
#include "util/error.h"

namespace ossa {

int64_t bitnet_prepared_floats(int64_t cols) { return k_bitnet_header + cols / 4; }

void bitnet_prepare_row(const float* x, int64_t cols, float* out) {
  float m = 0.0f;
  for (int64_t k = 0; k < cols; ++k) m = std::max(m, std::fabs(x[k]));
  // (torch's 127 / tensor is 127 * reciprocal(tensor): two roundings, as here)
  const float s = 127.0f * (1.0f / std::max(m, 1e-5f));
  int8_t* q = reinterpret_cast<int8_t*>(out + k_bitnet_header);
  int32_t sum = 0;
  for (int64_t k = 0; k < cols; ++k) {
    float r = std::nearbyint(x[k] * s);  // (ties to even, as torch.round)
    r = r > 127.0f ? 127.0f : r < -128.0f ? -128.0f : r;
    if (r != r) r = 0.0f;  // (a NaN input: transformers' result is NaN either way)
    q[k] = static_cast<int8_t>(r);
    sum += q[k];
  }
  std::memset(out, 0, sizeof(float) * k_bitnet_header);
  out[0] = s;
  std::memcpy(out + 1, &sum, sizeof(sum));
}

void bitnet_pack_row(const int8_t* w, int64_t row, int64_t cols, uint8_t* data) {
  for (int64_t b = 0; b < cols / 64; ++b)
    for (int i = 0; i < 16; ++i) {
      uint8_t v = 0;
      for (int l = 0; l < 4; ++l)
        v |= static_cast<uint8_t>((w[64 * b + 16 * l + i] + 1) << (2 * l));
      data[bitnet_byte(row, 64 * b + i, cols)] = v;
    }
}

int8_t bitnet_weight(const uint8_t* data, int64_t row, int64_t col, int64_t cols) {
  const int shift = static_cast<int>(2 * ((col % 64) / 16));
  return static_cast<int8_t>(((data[bitnet_byte(row, col, cols)] >> shift) & 3) - 1);
}

namespace {

// BitLinear's float(sum) / (ws * s); AutoBitLinear's (its sum of x's dequantized values q / s)
// times ws: float(sum) / s * ws.
inline float finish(int32_t dot, const float* prepared, const TensorView& w) {
  int32_t sum;
  std::memcpy(&sum, prepared + 1, sizeof(sum));
  const float d = static_cast<float>(dot - sum);
  return w.scale_mul ? d / prepared[0] * w.scale : d / (w.scale * prepared[0]);
}

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512F__)
// The 64 codes of a 16-byte group, in column order.
inline __m512i codes64(const uint8_t* p, __m512i shifts, __m512i three) {
  const __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm512_and_si512(_mm512_srlv_epi16(v, shifts), three);
}

// Lines of the stream asked for ahead of the one being read (into L2). 2B-4T shape, decode, 2
// threads (benchmarks/bitnet.py's step; 28 ms of it the bf16 output): no prefetch 76 ms a token,
// 8 lines 70, 16 67, 32 67, 64 62, 96-128 59-61, 256 62.
constexpr int64_t k_ahead = 96;

// A group's four weight rows (its bytes from g) x RT activation rows. (Two groups a tile for one
// activation row, two streams, measured slower on the 2B-4T shape: 66 against 61 ms a token.)
template <int RT>
void tile(const uint8_t* g, const float* const* x, int64_t cols, int32_t* dots) {
  const __m512i shifts =
      _mm512_set_epi64(0x0006000600060006, 0x0006000600060006, 0x0004000400040004,
                       0x0004000400040004, 0x0002000200020002, 0x0002000200020002, 0, 0);
  const __m512i three = _mm512_set1_epi8(3);
  __m512i acc[4][RT];
  for (int o = 0; o < 4; ++o)
    for (int r = 0; r < RT; ++r) acc[o][r] = _mm512_setzero_si512();
  const int8_t* q[RT];
  for (int r = 0; r < RT; ++r) q[r] = reinterpret_cast<const int8_t*>(x[r] + k_bitnet_header);
  for (int64_t b = 0; b < cols / 64; ++b) {
    prefetch_l2(g + 64 * (b + k_ahead));  // (past the group's end: the next groups' lines)
    __m512i qv[RT];
    for (int r = 0; r < RT; ++r) qv[r] = _mm512_loadu_si512(q[r] + 64 * b);
    for (int o = 0; o < 4; ++o) {
      const __m512i c = codes64(g + 64 * b + 16 * o, shifts, three);
      for (int r = 0; r < RT; ++r) acc[o][r] = _mm512_dpbusd_epi32(acc[o][r], c, qv[r]);
    }
  }
  for (int o = 0; o < 4; ++o)
    for (int r = 0; r < RT; ++r) dots[o * RT + r] = _mm512_reduce_add_epi32(acc[o][r]);
}

// The dots of a group's four rows by rt activation rows (1..4): [4][rt].
void group_dots(const uint8_t* g, const float* const* x, int rt, int64_t cols, int32_t* dots) {
  switch (rt) {
    case 1:
      return tile<1>(g, x, cols, dots);
    case 2:
      return tile<2>(g, x, cols, dots);
    case 3:
      return tile<3>(g, x, cols, dots);
    default:
      return tile<4>(g, x, cols, dots);
  }
}
#else
void group_dots(const uint8_t* g, const float* const* x, int rt, int64_t cols, int32_t* dots) {
  for (int o = 0; o < 4; ++o)
    for (int r = 0; r < rt; ++r) {
      const int8_t* q = reinterpret_cast<const int8_t*>(x[r] + k_bitnet_header);
      int32_t acc = 0;
      for (int64_t k = 0; k < cols; ++k) acc += q[k] * (bitnet_weight(g, o, k, cols) + 1);
      dots[o * rt + r] = acc;
    }
}
#endif

}  // namespace

void bitnet_rows(const TensorView& w, const float* prepared, int64_t stride, int64_t r_begin,
                 int64_t r_end, float* y, int64_t ldy, int64_t o_begin, int64_t o_end) {
  constexpr int k_rt = 4;
  OSSA_ASSERT(o_begin % 4 == 0 && w.rows % 4 == 0);
  const float* x_rows[k_rt];
  int32_t dots[4 * k_rt];
  for (int64_t r0 = r_begin; r0 < r_end; r0 += k_rt) {
    const int rt = static_cast<int>(std::min<int64_t>(k_rt, r_end - r0));
    for (int r = 0; r < rt; ++r) x_rows[r] = prepared + (r0 + r) * stride;
    for (int64_t o = o_begin; o < o_end; o += 4) {
      const int mo = static_cast<int>(std::min<int64_t>(4, o_end - o));
      group_dots(w.data + (o / 4) * w.cols, x_rows, rt, w.cols, dots);
      for (int i = 0; i < mo; ++i)
        for (int r = 0; r < rt; ++r)
          y[(r0 + r) * ldy + o + i] = finish(dots[i * rt + r], x_rows[r], w);
    }
  }
}

}  // namespace ossa
