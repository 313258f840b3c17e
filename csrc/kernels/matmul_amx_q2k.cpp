// Q2_K on AMX-INT8 (many activation rows) and AVX512-VNNI (a few rows, decode): exact integer dot
// products of the weights' quants with the activations' three int8 pieces of matmul_amx_i8.cpp
// (amx_i8_split_rows: each 32 values x = dsc * 2^11 * (a0 + a1 / 2^7 + a2 / 2^11)).
//
// A Q2_K weight is d sc_g q - dmin m_g, q in 0..3, sc_g and m_g 4-bit, per 16-value group g; d and
// dmin f16 per 256 values. The scale folds into the quant, u = sc_g q in 0..45 (a byte, built when
// the weights are unpacked), so per 32-value block b, activation row r and weight row n:
//
//   D = 2^11 (u . a0) + 16 (u . a1) + (u . a2)      int32, exact in any order (|D| < 2^29)
//   acc = fma(f32(D), d[n] * dsc[r][b], acc)
//   acc = fma(mn_0[n], f32(S_0) * dsc[r][b], acc);  acc = fma(mn_1[n], f32(S_1) * dsc[r][b], acc)
//
// blocks in order, y[r][n] = acc; mn_h = -(dmin m_h) (exact in f32) and S_h the sum of the row's
// pieces' integers 2^11 a0 + 16 a1 + a2 over the 16 values of group h (AmxActivations::
// i8_isum16). The tile products (TDPBSUD, 16 rows at a time: one B tile of u, K = 32, times each
// piece) and the VNNI loop (VPDPBUSD on the unpacked u) compute the same integers and then run the
// same epilogue per element (q2k_epilogue) with the weight rows in the vector lanes, so the output
// of a row is bitwise the same whichever kernel a batch takes (batch invariance), and the weights
// are exact (u and the scales are the file's values).
//
// Repacked layout (amx_q2k_repack_groups), the file's size: per group of 16 weight rows and
// super-block (256 columns), 1,344 bytes = 16 x 84:
//   qs  8 blocks x 128 bytes: byte [h][4 n + i] of block j holds q[n][32 j + 16 h + 4 s + i] at
//       bits 2 s (s < 4), so (byte >> 2 s) & 3 is the VNNI / B-tile row 4 h + s (k = 4 (4 h + s)
//       .. + 3 of the 16 rows)
//   sc  8 blocks x 32 bytes: [h][n] = sc | m << 4 of group 2 j + h (the file's scale bytes)
//   d   16 f16, dmin 16 f16 (the rows').
// Rows past the matrix are zero.
#include <algorithm>
#include <cstring>

#include "kernels/amx_i8_pieces.h"
#include "kernels/amx_tile_config.h"
#include "kernels/matmul_kernels.h"
#include "util/aligned.h"
#include "util/error.h"
#include "util/half.h"

#if defined(__AMX_INT8__) && defined(__AMX_TILE__) && defined(__AVX512VNNI__) && \
    defined(__AMX_BF16__) && defined(__AVX512BF16__) && defined(__linux__)
#define OSSA_HAVE_AMX_Q2K 1
#endif

namespace ossa {

namespace {
constexpr int64_t k_sb_bytes = 1344;  // per 16 rows and 256 columns
constexpr int64_t k_sc_at = 1024, k_d_at = 1280, k_dmin_at = 1312;
}  // namespace

bool amx_q2k_type(DType t) { return t == DType::Q2_K; }

size_t amx_q2k_repacked_bytes(const TensorView& w) {
#if defined(OSSA_HAVE_AMX_Q2K)
  if (!amx_q2k_type(w.type) || w.cols % 256 != 0) return 0;
  return static_cast<size_t>((w.rows + 15) / 16 * (w.cols / 256) * k_sb_bytes);
#else
  (void)w;
  return 0;
#endif
}

void amx_q2k_repack_groups(const TensorView& w, uint8_t* out, int64_t g_begin, int64_t g_end) {
  OSSA_ASSERT(amx_q2k_type(w.type));
  const int64_t n_sb = w.cols / 256;
  for (int64_t g = g_begin; g < g_end; ++g) {
    uint8_t* group = out + g * n_sb * k_sb_bytes;
    std::memset(group, 0, static_cast<size_t>(n_sb * k_sb_bytes));
    for (int n = 0; n < 16 && g * 16 + n < w.rows; ++n) {
      const BlockQ2_K* row = reinterpret_cast<const BlockQ2_K*>(w.row(g * 16 + n));
      for (int64_t sb = 0; sb < n_sb; ++sb) {
        const BlockQ2_K& q = row[sb];
        uint8_t* at = group + sb * k_sb_bytes;
        for (int j = 0; j < 8; ++j) {
          // Value 32 j + l of the super-block: bits 2 (j % 4) of qs[32 (j / 4) + l].
          uint8_t v[32];
          for (int l = 0; l < 32; ++l) v[l] = (q.qs[32 * (j / 4) + l] >> (2 * (j % 4))) & 3;
          for (int h = 0; h < 2; ++h) {
            for (int i = 0; i < 4; ++i) {
              uint8_t byte = 0;
              for (int s = 0; s < 4; ++s)
                byte |= static_cast<uint8_t>(v[16 * h + 4 * s + i] << 2 * s);
              at[128 * j + 64 * h + 4 * n + i] = byte;
            }
            at[k_sc_at + 32 * j + 16 * h + n] = q.scales[2 * j + h];
          }
        }
        reinterpret_cast<uint16_t*>(at + k_d_at)[n] = q.d;
        reinterpret_cast<uint16_t*>(at + k_dmin_at)[n] = q.dmin;
      }
    }
  }
}

#if defined(OSSA_HAVE_AMX_Q2K)

void amx_q2k_split_rows(const float* x, int64_t cols, int64_t r_begin, int64_t r_end, int8_t* tiles,
                        float* scale, float* xs) {
  const int64_t nb = cols / 64;
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  for (int64_t r = r_begin; r < r_end; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* p = x + r * cols + 64 * b;
      __m512 v[4], mx = _mm512_setzero_ps();
      for (int h = 0; h < 4; ++h) {
        v[h] = _mm512_loadu_ps(p + 16 * h);
        mx = _mm512_max_ps(mx, _mm512_and_ps(v[h], abs_mask));
      }
      const float m = _mm512_reduce_max_ps(mx);
      const __m512 inv = _mm512_set1_ps(m > 0.0f ? 127.0f / m : 0.0f);
      const float dsc = m / 127.0f * 0x1p-11f;  // D counts units of 2^-11 (exact scaling)
      int8_t* t = tiles + ((r / 16) * nb + b) * 3072 + (r % 16) * 64;
      for (int h = 0; h < 4; ++h) {
        const __m512 whole =
            i8_pieces16(_mm512_mul_ps(v[h], inv), t + 16 * h, t + 1024 + 16 * h, t + 2048 + 16 * h);
        xs[r * (cols / 16) + 4 * b + h] = _mm512_reduce_add_ps(whole) * dsc;
      }
      scale[r * nb + b] = dsc;
    }
  }
}

namespace {

inline __m128i load16(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// The 8 vectors of u = sc q of half `half` (32 values: block 2 t + half) of 64-value step t of a
// super-block (u[k]: values 32 half + 4 k .. + 3 of the step for the 16 rows, rows 8 half + k of
// its B tile).
inline void unpack_u(const uint8_t* sb, int t, int half, __m512i* u) {
  const __m512i low2 = _mm512_set1_epi8(0x03);
  for (int h = 0; h < 2; ++h) {  // the block's 16-value groups
    const int j = 2 * t + half;
    const __m512i v = _mm512_load_si512(sb + 128 * j + 64 * h);
    // sc of row n in both 16-bit words of dword n: the word products sc * (q_lo + 256 q_hi) keep
    // each byte's sc * q (<= 45) in its byte.
    const __m512i sc = _mm512_and_si512(
        _mm512_cvtepu8_epi32(load16(sb + k_sc_at + 32 * j + 16 * h)), _mm512_set1_epi32(0x0F));
    const __m512i scw = _mm512_or_si512(sc, _mm512_slli_epi32(sc, 16));
    for (int s = 0; s < 4; ++s) {
      const __m512i q = _mm512_and_si512(s == 0 ? v : _mm512_srli_epi16(v, 2 * s), low2);
      u[4 * h + s] = _mm512_mullo_epi16(q, scw);
    }
  }
}

// -(dmin m) of the 16 rows for the 16-value groups of step t (exact: f16 times a 4-bit integer).
inline void mins(const uint8_t* sb, int t, __m512 neg_dmin, __m512* mn) {
  for (int h = 0; h < 4; ++h) {
    const __m512i m =
        _mm512_srli_epi32(_mm512_cvtepu8_epi32(load16(sb + k_sc_at + 64 * t + 16 * h)), 4);
    mn[h] = _mm512_mul_ps(_mm512_cvtepi32_ps(m), neg_dmin);
  }
}
inline __m512 load_f16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
}

// The epilogue both kernels run for one activation row and 64-value step: c_p = u . a_p (int32),
// xs the step's four f32(S_g) dsc.
inline __m512 q2k_epilogue(__m512i c0, __m512i c1, __m512i c2, __m512 d, const __m512* mn,
                           float dsc, const float* xs, __m512 acc) {
  const __m512i dd =
      _mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(c0, 11), _mm512_slli_epi32(c1, 4)), c2);
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dd), _mm512_mul_ps(d, _mm512_set1_ps(dsc)), acc);
  for (int h = 0; h < 4; ++h) acc = _mm512_fmadd_ps(mn[h], _mm512_set1_ps(xs[h]), acc);
  return acc;
}

inline void store_row(__m512 v, float* y, int64_t o, int64_t o_end) {
  const int n_valid = static_cast<int>(std::min<int64_t>(16, o_end - o));
  _mm512_mask_storeu_ps(y + o, static_cast<__mmask16>(n_valid == 16 ? 0xFFFF : (1u << n_valid) - 1),
                        v);
}

// The A tiles (a0, a1, a2: 16 rows x 64 bytes each) of 16-row block mb and step b.
inline const int8_t* a_tiles(const AmxActivations& x, int64_t nb, int64_t mb, int64_t b) {
  return x.q2k + (mb * nb + b) * 3072;
}

// ---- VNNI: a few activation rows at a time ---------------------------------------------------
template <int R>
void vnni_group(const uint8_t* group, const AmxActivations& x, int64_t r0, float* y, int64_t ldy,
                int64_t o0, int64_t o_end) {
  constexpr int NC = R <= 2 ? 2 : 1;  // accumulator chains per piece (integer sums: any order)
  const int64_t nb = x.cols / 64, n_sb = nb / 4, ng = x.cols / 16;
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t sbi = 0; sbi < n_sb; ++sbi) {
    const uint8_t* sb = group + sbi * k_sb_bytes;
    const __m512 d = load_f16(sb + k_d_at);
    const __m512 neg_dmin = _mm512_sub_ps(_mm512_setzero_ps(), load_f16(sb + k_dmin_at));
    for (int t = 0; t < 4; ++t) {
      const char* ahead = reinterpret_cast<const char*>(sb + 2 * k_sb_bytes);
      for (int l = 6 * t; l < std::min(6 * t + 6, 21); ++l)
        _mm_prefetch(ahead + 64 * l, _MM_HINT_T0);
      __m512 mn[4];
      mins(sb, t, neg_dmin, mn);
      const int64_t b = sbi * 4 + t;
      __m512i c[R][3][NC];
      for (int rr = 0; rr < R; ++rr)
        for (int p = 0; p < 3; ++p)
          for (int h = 0; h < NC; ++h) c[rr][p][h] = _mm512_setzero_si512();
      for (int half = 0; half < 2; ++half) {
        __m512i u[8];
        unpack_u(sb, t, half, u);
        for (int rr = 0; rr < R; ++rr) {
          const int64_t r = r0 + rr;
          const int8_t* a = a_tiles(x, nb, r / 16, b) + (r % 16) * 64 + 32 * half;
          for (int k = 0; k < 8; ++k)
            for (int p = 0; p < 3; ++p) {
              int32_t a4;
              std::memcpy(&a4, a + 1024 * p + 4 * k, 4);
              c[rr][p][k % NC] = _mm512_dpbusd_epi32(c[rr][p][k % NC], u[k], _mm512_set1_epi32(a4));
            }
        }
      }
      for (int rr = 0; rr < R; ++rr) {
        const int64_t r = r0 + rr;
        if constexpr (NC == 2)
          for (int p = 0; p < 3; ++p) c[rr][p][0] = _mm512_add_epi32(c[rr][p][0], c[rr][p][1]);
        acc[rr] = q2k_epilogue(c[rr][0][0], c[rr][1][0], c[rr][2][0], d, mn,
                               x.q2k_scale[r * nb + b], x.q2k_xs + r * ng + 4 * b, acc[rr]);
      }
    }
  }
  for (int rr = 0; rr < R; ++rr) store_row(acc[rr], y + (r0 + rr) * ldy, o0, o_end);
}

void vnni_rows(const TensorView& w, const AmxActivations& x, int64_t r_begin, int64_t r_end,
               float* y, int64_t ldy, int64_t o_begin, int64_t o_end) {
  const int64_t n_sb = x.cols / 256;
  for (int64_t o0 = o_begin; o0 < o_end; o0 += 16) {
    const uint8_t* group = w.packed + (o0 / 16) * n_sb * k_sb_bytes;
    for (int64_t r = r_begin; r < r_end; r += 4) {
      const int64_t n = std::min<int64_t>(4, r_end - r);
      if (n == 1)
        vnni_group<1>(group, x, r, y, ldy, o0, o_end);
      else if (n == 2)
        vnni_group<2>(group, x, r, y, ldy, o0, o_end);
      else if (n == 3)
        vnni_group<3>(group, x, r, y, ldy, o0, o_end);
      else
        vnni_group<4>(group, x, r, y, ldy, o0, o_end);
    }
  }
}

// ---- AMX: 16 activation rows at a time --------------------------------------------------------
// Tiles 0-2: a0, a1, a2 (rows x 64 bytes); 3: B of u (16 rows of 64 bytes: K = 64); 4-6: C.
void load_tile_config(int rows) {
  TileConfig c;
  const uint8_t r = static_cast<uint8_t>(rows);
  for (int t = 0; t < 7; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = t == 3 ? 16 : r;
  }
  _tile_loadconfig(&c);
}

thread_local AlignedVector<uint8_t> t_btiles;

void amx_rows(const TensorView& w, const AmxActivations& x, int64_t r_begin, int64_t r_end,
              float* y, int64_t ldy, int64_t o_begin, int64_t o_end) {
  const int64_t nb = x.cols / 64, n_sb = nb / 4, ng = x.cols / 16;
  const int mr = static_cast<int>(std::min<int64_t>(16, x.n_rows));
  const size_t need = static_cast<size_t>(nb * 1024);
  if (t_btiles.size() < need) t_btiles.assign(need, 0);
  uint8_t* btiles = t_btiles.data();
  load_tile_config(mr);
  alignas(64) int32_t cbuf[4][3][256];
  for (int64_t o0 = o_begin; o0 < o_end; o0 += 16) {
    const uint8_t* group = w.packed + (o0 / 16) * n_sb * k_sb_bytes;
    for (int64_t m0 = r_begin; m0 < r_end; m0 += 16) {
      const int rows = static_cast<int>(std::min<int64_t>(mr, r_end - m0));
      __m512 acc[16];
      for (int m = 0; m < 16; ++m) acc[m] = _mm512_setzero_ps();
      const bool first = m0 == r_begin;
      auto product = [&](int64_t b) {
        uint8_t* bt = btiles + b * 1024;
        if (first) {
          const uint8_t* sb = group + (b / 4) * k_sb_bytes;
          if (b % 4 == 0) {
            const char* ahead = reinterpret_cast<const char*>(sb + k_sb_bytes);
            for (int l = 0; l < 21; ++l) _mm_prefetch(ahead + 64 * l, _MM_HINT_T0);
          }
          for (int half = 0; half < 2; ++half) {
            __m512i u[8];
            unpack_u(sb, static_cast<int>(b % 4), half, u);
            for (int k = 0; k < 8; ++k) _mm512_store_si512(bt + 512 * half + 64 * k, u[k]);
          }
        }
        const int8_t* a = a_tiles(x, nb, m0 / 16, b);
        _tile_loadd(0, a, 64);
        _tile_loadd(1, a + 1024, 64);
        _tile_loadd(2, a + 2048, 64);
        _tile_loadd(3, bt, 64);
        _tile_zero(4);
        _tile_zero(5);
        _tile_zero(6);
        _tile_dpbsud(4, 0, 3);
        _tile_dpbsud(5, 1, 3);
        _tile_dpbsud(6, 2, 3);
        int32_t* c = cbuf[b & 3][0];
        _tile_stored(4, c, 64);
        _tile_stored(5, c + 256, 64);
        _tile_stored(6, c + 512, 64);
      };
      auto scale = [&](int64_t b) {
        const uint8_t* sb = group + (b / 4) * k_sb_bytes;
        const __m512 d = load_f16(sb + k_d_at);
        const __m512 neg_dmin = _mm512_sub_ps(_mm512_setzero_ps(), load_f16(sb + k_dmin_at));
        __m512 mn[4];
        mins(sb, static_cast<int>(b % 4), neg_dmin, mn);
        const int32_t* c = cbuf[b & 3][0];
        const float* dsc = x.q2k_scale + m0 * nb + b;
        const float* xs = x.q2k_xs + m0 * ng + 4 * b;
#pragma GCC unroll 16
        for (int m = 0; m < 16; ++m) {
          if (m >= rows) break;
          acc[m] = q2k_epilogue(_mm512_load_si512(c + 16 * m), _mm512_load_si512(c + 256 + 16 * m),
                                _mm512_load_si512(c + 512 + 16 * m), d, mn, dsc[m * nb],
                                xs + m * ng, acc[m]);
        }
      };
      // Step b's C tiles are scaled two steps later, once their stores have landed.
      for (int64_t b = 0; b < nb; ++b) {
        product(b);
        if (b >= 2) scale(b - 2);
      }
      for (int64_t b = std::max<int64_t>(0, nb - 2); b < nb; ++b) scale(b);
      for (int m = 0; m < rows; ++m) store_row(acc[m], y + (m0 + m) * ldy, o0, o_end);
    }
  }
  _tile_release();
}

// Rows below this go through the VNNI loop (the same results).
constexpr int64_t k_vnni_rows = 4;

}  // namespace

void amx_q2k_compute(const TensorView& w, const AmxActivations& x, int64_t r_begin, int64_t r_end,
                     float* y, int64_t ldy, int64_t o_begin, int64_t o_end) {
  OSSA_ASSERT(r_begin % 16 == 0 && o_begin % 16 == 0 && x.q2k != nullptr && x.cols % 256 == 0);
  if (r_end - r_begin < k_vnni_rows) return vnni_rows(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
  amx_rows(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
}

#else  // no AMX-INT8 / VNNI in this build: nothing is repacked for it

void amx_q2k_split_rows(const float*, int64_t, int64_t, int64_t, int8_t*, float*, float*) {
  throw ModelError("amx int8 matmul: not built");
}
void amx_q2k_compute(const TensorView&, const AmxActivations&, int64_t, int64_t, float*, int64_t,
                     int64_t, int64_t) {
  throw ModelError("amx int8 matmul: not built");
}

#endif

}  // namespace ossa
