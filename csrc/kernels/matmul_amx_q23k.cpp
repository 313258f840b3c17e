// Q2_K and Q3_K on AMX-INT8 (many activation rows) and AVX512-VNNI (a few rows, decode): exact
// integer dot products of the weights' quants with the activations split into three int8 pieces per
// 64 values (amx_q23k_split_rows; the pieces of matmul_amx_i8.cpp, kernels/amx_i8_pieces.h):
// x = dsc 2^11 (a0 + a1 / 2^7 + a2 / 2^11) with dsc 2^11 = max|x| / 127 over the 64 values.
//
// Both types' weights are d * (v - m_g) for a byte v per value and an integer m_g per 16-value
// group g (d f16 per 256 values), once the scale is folded into the quant:
//   Q2_K  d sc_g q - dmin m_g (q 0..3, sc_g and m_g 4-bit): v = sc_g q (0..45); the minimum
//         has its own f16 dmin: mn_g = -(dmin m_g)
//   Q3_K  d sc_g q3 (q3 -4..3, sc_g -32..31): with u = q3 + 4 in 0..7, v = sc_g u and m_g = 4 sc_g
//         for sc_g >= 0, v = -sc_g (7 - u) and m_g = -3 sc_g for sc_g < 0 (v <= 224, the same
//         d sc_g q3); mn_g = -(d m_g)
// so per 64-value step b, activation row r and weight row n (mn_g exact in f32):
//
//   D = 2^11 (v . a0) + 16 (v . a1) + (v . a2)     exact int32 sums (Q3_K: f32(v . a0) 2^11 +
//                                                   f32(16 (v . a1) + (v . a2)), |D| < 2^32)
//   acc = fma(f32(D), d[n] * dsc[r][b], acc);  acc = fma(mn_g[n], f32(S_g) dsc[r][b], acc) for
//   the step's four groups, S_g the sum of the pieces' integers 2^11 a0 + 16 a1 + a2 over group g
//
// steps in order, y[r][n] = acc. The tile products (TDPBSUD, 16 rows at a time: one B tile of v,
// K = 64, times each piece) and the VNNI loop (VPDPBUSD on the unpacked v) compute the same
// integers and then run the same epilogue per element with the weight rows in the vector lanes,
// so a row's output is bitwise the same whichever kernel its batch takes (batch invariance), and
// the weights are exact (v, m_g and the scales are the file's values).
//
// Repacked layouts (amx_q23k_repack_groups), per group of 16 weight rows and super-block (256
// columns); Q2_K 1,344 bytes (16 x 84, the file's size), Q3_K 1,856 (the file has 1,760):
//   qs  8 blocks x 128 bytes: byte [h][4 n + i] of block j holds bits 0..1 of the quant
//       (q; Q3_K: u) of value 32 j + 16 h + 4 s + i of row n at bits 2 s (s < 4), so
//       (byte >> 2 s) & 3 is the VNNI / B-tile row 4 h + s (values 4 (4 h + s) .. + 3)
//   Q3_K: hb  8 blocks x 64 bytes: byte [4 n + i] of block j holds bit 2 of u of value
//       32 j + 16 h + 4 s + i at bit 4 h + s
//   sc  8 blocks x 32 bytes: [h][n] for group 2 j + h: Q2_K sc | m << 4 (the file's byte),
//       Q3_K sc_g as int8
//   d   16 f16, then (Q2_K) dmin 16 f16 (the rows').
// Rows past the matrix are zero.
#include <algorithm>
#include <cstring>

#include "kernels/amx_i8_pieces.h"
#include "kernels/amx_i8_rows.h"
#include "kernels/amx_tile_config.h"
#include "kernels/matmul_kernels.h"
#include "util/aligned.h"
#include "util/error.h"
#include "util/half.h"

#if defined(__AMX_INT8__) && defined(__AMX_TILE__) && defined(__AVX512VNNI__) && \
    defined(__AMX_BF16__) && defined(__AVX512BF16__) && defined(__linux__)
#define OSSA_HAVE_AMX_Q23K 1
#define OSSA_HAVE_Q23K_VNNI 1
#elif defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512F__)
// VNNI without AMX (matmul_amx_i8.cpp's OSSA_HAVE_I8_VNNI): the VNNI loop at every row count.
#define OSSA_HAVE_Q23K_VNNI 1
#endif

namespace ossa {

namespace {
template <bool Q3>
struct Layout {
  // per 16 rows and 256 columns (Q3_K: 1,824 and 32 bytes of padding, for 64-byte alignment)
  static constexpr int64_t sb_bytes = Q3 ? 1856 : 1344;
  static constexpr int64_t hb_at = 1024;  // Q3_K
  static constexpr int64_t sc_at = Q3 ? 1536 : 1024;
  static constexpr int64_t d_at = Q3 ? 1792 : 1280, dmin_at = 1312;  // dmin: Q2_K
};
int64_t sb_bytes(DType t) {
  return t == DType::Q3_K ? Layout<true>::sb_bytes : Layout<false>::sb_bytes;
}

// Bits 0..1 of 32 quants (the block's values) into the qs bytes of row n of a block.
void put_low_bits(const uint8_t* v, uint8_t* blk, int n) {
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 4; ++i) {
      uint8_t byte = 0;
      for (int s = 0; s < 4; ++s)
        byte |= static_cast<uint8_t>((v[16 * h + 4 * s + i] & 3) << 2 * s);
      blk[64 * h + 4 * n + i] = byte;
    }
}
}  // namespace

bool amx_q23k_type(DType t) { return t == DType::Q2_K || t == DType::Q3_K; }

size_t amx_q23k_repacked_bytes(const TensorView& w) {
#if defined(OSSA_HAVE_Q23K_VNNI)
  if (!amx_q23k_type(w.type) || w.cols % 256 != 0) return 0;
  return static_cast<size_t>((w.rows + 15) / 16 * (w.cols / 256) * sb_bytes(w.type));
#else
  (void)w;
  return 0;
#endif
}

void amx_q23k_repack_groups(const TensorView& w, uint8_t* out, int64_t g_begin, int64_t g_end) {
  OSSA_ASSERT(amx_q23k_type(w.type));
  const bool q3 = w.type == DType::Q3_K;
  const int64_t n_sb = w.cols / 256, bytes = sb_bytes(w.type);
  const int64_t sc_at = q3 ? Layout<true>::sc_at : Layout<false>::sc_at;
  const int64_t d_at = q3 ? Layout<true>::d_at : Layout<false>::d_at;
  for (int64_t g = g_begin; g < g_end; ++g) {
    uint8_t* group = out + g * n_sb * bytes;
    std::memset(group, 0, static_cast<size_t>(n_sb * bytes));
    for (int n = 0; n < 16 && g * 16 + n < w.rows; ++n) {
      for (int64_t sb = 0; sb < n_sb; ++sb) {
        uint8_t* at = group + sb * bytes;
        for (int j = 0; j < 8; ++j) {
          // Value 32 j + l of the super-block: bits 2 (j % 4) of qs[32 (j / 4) + l] (Q3_K: plus
          // 4 where bit j of hmask[l] is set, which makes u = q3 + 4).
          uint8_t v[32];
          if (q3) {
            const auto& q = reinterpret_cast<const BlockQ3_K*>(w.row(g * 16 + n))[sb];
            for (int l = 0; l < 32; ++l)
              v[l] = static_cast<uint8_t>(((q.qs[32 * (j / 4) + l] >> (2 * (j % 4))) & 3) |
                                          ((q.hmask[l] >> j) & 1) << 2);
            for (int h = 0; h < 2; ++h)
              at[sc_at + 32 * j + 16 * h + n] =
                  static_cast<uint8_t>(static_cast<int8_t>(q3_k_scale(q.scales, 2 * j + h)));
            for (int i = 0; i < 4; ++i) {
              uint8_t byte = 0;
              for (int h = 0; h < 2; ++h)
                for (int s = 0; s < 4; ++s)
                  byte |= static_cast<uint8_t>((v[16 * h + 4 * s + i] >> 2) << (4 * h + s));
              at[Layout<true>::hb_at + 64 * j + 4 * n + i] = byte;
            }
          } else {
            const auto& q = reinterpret_cast<const BlockQ2_K*>(w.row(g * 16 + n))[sb];
            for (int l = 0; l < 32; ++l) v[l] = (q.qs[32 * (j / 4) + l] >> (2 * (j % 4))) & 3;
            for (int h = 0; h < 2; ++h) at[sc_at + 32 * j + 16 * h + n] = q.scales[2 * j + h];
          }
          put_low_bits(v, at + 128 * j, n);
        }
        if (q3) {
          reinterpret_cast<uint16_t*>(at + d_at)[n] =
              reinterpret_cast<const BlockQ3_K*>(w.row(g * 16 + n))[sb].d;
        } else {
          const auto& q = reinterpret_cast<const BlockQ2_K*>(w.row(g * 16 + n))[sb];
          reinterpret_cast<uint16_t*>(at + d_at)[n] = q.d;
          reinterpret_cast<uint16_t*>(at + Layout<false>::dmin_at)[n] = q.dmin;
        }
      }
    }
  }
}

#if defined(OSSA_HAVE_Q23K_VNNI)

void amx_q23k_split_rows(const float* x, int64_t cols, int64_t r_begin, int64_t r_end,
                         int8_t* tiles, float* scale, float* xs) {
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

// The 8 vectors of v of half `half` (32 values: block 2 t + half) of 64-value step t of a
// super-block (v[k]: values 32 half + 4 k .. + 3 of the step for the 16 rows, rows 8 half + k of
// its B tile).
template <bool Q3>
inline void unpack_v(const uint8_t* sb, int t, int half, __m512i* v) {
  using L = Layout<Q3>;
  const __m512i low2 = _mm512_set1_epi8(0x03);
  const int j = 2 * t + half;
  [[maybe_unused]] __m512i hb;
  if constexpr (Q3) hb = _mm512_load_si512(sb + L::hb_at + 64 * j);
  for (int h = 0; h < 2; ++h) {  // the block's 16-value groups
    const __m512i bits = _mm512_load_si512(sb + 128 * j + 64 * h);
    const __m128i sc8 = load16(sb + L::sc_at + 32 * j + 16 * h);
    // The multiplier of row n in both 16-bit words of dword n: the word products keep each
    // byte's product (<= 224) in its byte.
    __m512i mul, flip = _mm512_setzero_si512();
    if constexpr (Q3) {
      const __m512i sc = _mm512_cvtepi8_epi32(sc8);
      mul = _mm512_abs_epi32(sc);
      flip = _mm512_maskz_mov_epi32(_mm512_cmplt_epi32_mask(sc, _mm512_setzero_si512()),
                                    _mm512_set1_epi32(0x07070707));
    } else {
      mul = _mm512_and_si512(_mm512_cvtepu8_epi32(sc8), _mm512_set1_epi32(0x0F));
    }
    mul = _mm512_or_si512(mul, _mm512_slli_epi32(mul, 16));
    for (int s = 0; s < 4; ++s) {
      __m512i q = _mm512_and_si512(s == 0 ? bits : _mm512_srli_epi16(bits, 2 * s), low2);
      if constexpr (Q3) {
        const int bit = 4 * h + s;  // u's bit 2, moved to bit 2 of each byte
        const __m512i hi = _mm512_and_si512(
            bit >= 2 ? _mm512_srli_epi16(hb, bit - 2) : _mm512_slli_epi16(hb, 2 - bit),
            _mm512_set1_epi8(0x04));
        q = _mm512_xor_si512(_mm512_or_si512(q, hi), flip);  // u, or 7 - u where sc < 0
      }
      v[4 * h + s] = _mm512_mullo_epi16(q, mul);
    }
  }
}

// mn_g for the 16 rows and the four 16-value groups of step t (exact: f16 times an integer of at
// most 8 bits); d and dmin of the super-block.
template <bool Q3>
inline void mins(const uint8_t* sb, int t, __m512 neg_dmin, __m512* mn) {
  using L = Layout<Q3>;
  for (int h = 0; h < 4; ++h) {
    const __m128i sc8 = load16(sb + L::sc_at + 64 * t + 16 * h);
    __m512i m;
    if constexpr (Q3) {
      const __m512i sc = _mm512_cvtepi8_epi32(sc8);  // m = 4 sc (sc >= 0) or -3 sc (sc < 0)
      m = _mm512_max_epi32(
          _mm512_slli_epi32(sc, 2),
          _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_add_epi32(sc, _mm512_slli_epi32(sc, 1))));
    } else {
      m = _mm512_srli_epi32(_mm512_cvtepu8_epi32(sc8), 4);
    }
    mn[h] = _mm512_mul_ps(_mm512_cvtepi32_ps(m), neg_dmin);
  }
}
inline __m512 load_f16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
}
struct Scales {
  __m512 d, neg_dmin;
};
template <bool Q3>
inline Scales sb_scales(const uint8_t* sb) {
  const __m512 d = load_f16(sb + Layout<Q3>::d_at);
  const __m512 dm = Q3 ? d : load_f16(sb + Layout<Q3>::dmin_at);
  return {d, _mm512_sub_ps(_mm512_setzero_ps(), dm)};
}

// The epilogue both kernels run for one activation row and 64-value step: c_p = v . a_p (int32),
// xs the step's four f32(S_g) dsc.
template <bool Q3>
inline __m512 epilogue(__m512i c0, __m512i c1, __m512i c2, __m512 d, const __m512* mn, float dsc,
                       const float* xs, __m512 acc) {
  const __m512i c12 = _mm512_add_epi32(_mm512_slli_epi32(c1, 4), c2);
  __m512 dd;
  if constexpr (Q3)  // |v . a0| < 2^21: 2^11 of it may pass 2^31
    dd = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c0), _mm512_set1_ps(2048.0f), _mm512_cvtepi32_ps(c12));
  else
    dd = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(c0, 11), c12));
  acc = _mm512_fmadd_ps(dd, _mm512_mul_ps(d, _mm512_set1_ps(dsc)), acc);
  for (int h = 0; h < 4; ++h) acc = _mm512_fmadd_ps(mn[h], _mm512_set1_ps(xs[h]), acc);
  return acc;
}

// The A tiles (a0, a1, a2: 16 rows x 64 bytes each) of 16-row block mb and step b.
inline const int8_t* a_tiles(const AmxActivations& x, int64_t nb, int64_t mb, int64_t b) {
  return x.q23k + (mb * nb + b) * 3072;
}

// ---- VNNI: a few activation rows at a time ---------------------------------------------------
// Both halves of a 64-value step are unpacked once for the R rows, then each row's three piece sums
// run over the 64 values (integer sums: any order and chain split give the same value) and go
// straight into its epilogue.
template <bool Q3, int R>
void vnni_group(const uint8_t* group, const AmxActivations& x, int64_t r0, float* y, int64_t ldy,
                int64_t o0, int64_t o_end) {
  constexpr int NC = R <= 2 ? 2 : 1;  // accumulator chains per piece
  const int64_t nb = x.cols / 64, n_sb = nb / 4, ng = x.cols / 16;
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t sbi = 0; sbi < n_sb; ++sbi) {
    const uint8_t* sb = group + sbi * Layout<Q3>::sb_bytes;
    const Scales ds = sb_scales<Q3>(sb);
    for (int t = 0; t < 4; ++t) {
      const char* ahead = reinterpret_cast<const char*>(sb + 2 * Layout<Q3>::sb_bytes);
      constexpr int lines = Layout<Q3>::sb_bytes / 64, per = (lines + 3) / 4;
      for (int l = per * t; l < std::min(per * t + per, lines); ++l) prefetch_l2(ahead + 64 * l);
      __m512 mn[4];
      mins<Q3>(sb, t, ds.neg_dmin, mn);
      const int64_t b = sbi * 4 + t;
      __m512i u[2][8];
      unpack_v<Q3>(sb, t, 0, u[0]);
      unpack_v<Q3>(sb, t, 1, u[1]);
      for (int rr = 0; rr < R; ++rr) {
        const int64_t r = r0 + rr;
        const int8_t* a = a_tiles(x, nb, r / 16, b) + (r % 16) * 64;
        __m512i c[3][NC];
        for (int p = 0; p < 3; ++p)
          for (int h = 0; h < NC; ++h) c[p][h] = _mm512_setzero_si512();
        for (int half = 0; half < 2; ++half)
          for (int k = 0; k < 8; ++k)
            for (int p = 0; p < 3; ++p) {
              int32_t a4;
              std::memcpy(&a4, a + 1024 * p + 32 * half + 4 * k, 4);
              c[p][k % NC] = _mm512_dpbusd_epi32(c[p][k % NC], u[half][k], _mm512_set1_epi32(a4));
            }
        if constexpr (NC == 2)
          for (int p = 0; p < 3; ++p) c[p][0] = _mm512_add_epi32(c[p][0], c[p][1]);
        acc[rr] = epilogue<Q3>(c[0][0], c[1][0], c[2][0], ds.d, mn, x.q23k_scale[r * nb + b],
                               x.q23k_xs + r * ng + 4 * b, acc[rr]);
      }
    }
  }
  for (int rr = 0; rr < R; ++rr) store_row(acc[rr], y + (r0 + rr) * ldy, o0, o_end);
}

template <bool Q3>
void vnni_rows(const TensorView& w, const AmxActivations& x, int64_t r_begin, int64_t r_end,
               float* y, int64_t ldy, int64_t o_begin, int64_t o_end) {
  const int64_t n_sb = x.cols / 256;
  for (int64_t o0 = o_begin; o0 < o_end; o0 += 16) {
    const uint8_t* group = w.packed + (o0 / 16) * n_sb * Layout<Q3>::sb_bytes;
    // 8 rows at a time share each unpacked step, then the rest 4 or fewer at a time.
    for (int64_t r = r_begin; r < r_end;) {
      const int64_t n = r_end - r >= 8 ? 8 : std::min<int64_t>(4, r_end - r);
      if (n == 1)
        vnni_group<Q3, 1>(group, x, r, y, ldy, o0, o_end);
      else if (n == 2)
        vnni_group<Q3, 2>(group, x, r, y, ldy, o0, o_end);
      else if (n == 3)
        vnni_group<Q3, 3>(group, x, r, y, ldy, o0, o_end);
      else if (n == 4)
        vnni_group<Q3, 4>(group, x, r, y, ldy, o0, o_end);
      else
        vnni_group<Q3, 8>(group, x, r, y, ldy, o0, o_end);
      r += n;
    }
  }
}

#if defined(OSSA_HAVE_AMX_Q23K)
// ---- AMX: 16 activation rows at a time --------------------------------------------------------
// Tiles 0-2: a0, a1, a2 (rows x 64 bytes); 3: B of v (16 rows of 64 bytes: K = 64); 4-6: C.
void load_tile_config(int rows) {
  TileConfig c;
  const uint8_t r = static_cast<uint8_t>(rows);
  for (int t = 0; t < 7; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = t == 3 ? 16 : r;
  }
  _tile_loadconfig(&c);
}

// The tile kernels of a type for amx_i8_rows.h's driver: per 64-value step b, the B tile of v
// (both halves, unpacked) built into bt, its products with the three A tiles, and the epilogue.
template <bool Q3>
struct Q23kTiles {
  static constexpr int64_t b_bytes = 1024;
  using CBuf = int32_t[3][256];  // v . a0, v . a1, v . a2
  static int64_t steps(int64_t cols) { return cols / 64; }
  static const uint8_t* group(const TensorView& w, int64_t cols, int64_t o0) {
    return w.packed + (o0 / 16) * (cols / 256) * Layout<Q3>::sb_bytes;
  }
  static const int8_t* a_tiles(const AmxActivations& x, int64_t nb, int64_t mb, int64_t b) {
    return ossa::a_tiles(x, nb, mb, b);
  }
  static void config(int rows) { load_tile_config(rows); }
  static void product(const uint8_t* group, int64_t b, bool build, uint8_t* bt, const int8_t* a,
                      CBuf& c) {
    if (build) {
      const uint8_t* sb = group + (b / 4) * Layout<Q3>::sb_bytes;
      if (b % 4 == 0) {
        const char* ahead = reinterpret_cast<const char*>(sb + Layout<Q3>::sb_bytes);
        for (int l = 0; l < Layout<Q3>::sb_bytes / 64; ++l)
          _mm_prefetch(ahead + 64 * l, _MM_HINT_T0);
      }
      for (int half = 0; half < 2; ++half) {
        __m512i u[8];
        unpack_v<Q3>(sb, static_cast<int>(b % 4), half, u);
        for (int k = 0; k < 8; ++k) _mm512_store_si512(bt + 512 * half + 64 * k, u[k]);
      }
    }
    int32_t* const out[3] = {c[0], c[1], c[2]};
    amx_three_pieces(a, 64, a + 1024, a + 2048, 64, bt, out);
  }
  static void scale(const uint8_t* group, int64_t b, const CBuf& c, const AmxActivations& x,
                    int64_t m0, int rows, __m512* acc) {
    const int64_t nb = x.cols / 64, ng = x.cols / 16;
    const uint8_t* sb = group + (b / 4) * Layout<Q3>::sb_bytes;
    const Scales ds = sb_scales<Q3>(sb);
    __m512 mn[4];
    mins<Q3>(sb, static_cast<int>(b % 4), ds.neg_dmin, mn);
    const float* dsc = x.q23k_scale + m0 * nb + b;
    const float* xs = x.q23k_xs + m0 * ng + 4 * b;
#pragma GCC unroll 16
    for (int m = 0; m < 16; ++m) {
      if (m >= rows) break;
      acc[m] = epilogue<Q3>(_mm512_load_si512(c[0] + 16 * m), _mm512_load_si512(c[1] + 16 * m),
                            _mm512_load_si512(c[2] + 16 * m), ds.d, mn, dsc[m * nb], xs + m * ng,
                            acc[m]);
    }
  }
};

// Rows below this go through the VNNI loop (the same results).
constexpr int64_t k_vnni_rows = 4;
#endif  // OSSA_HAVE_AMX_Q23K

}  // namespace

void amx_q23k_compute(const TensorView& w, const AmxActivations& x, int64_t r_begin, int64_t r_end,
                      float* y, int64_t ldy, int64_t o_begin, int64_t o_end) {
  OSSA_ASSERT(r_begin % 16 == 0 && o_begin % 16 == 0 && x.q23k != nullptr && x.cols % 256 == 0);
  const bool q3 = w.type == DType::Q3_K;
#if defined(OSSA_HAVE_AMX_Q23K)
  if (r_end - r_begin >= k_vnni_rows)
    return q3 ? amx_i8_tile_rows<Q23kTiles<true>>(w, x, r_begin, r_end, y, ldy, o_begin, o_end)
              : amx_i8_tile_rows<Q23kTiles<false>>(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
#endif
  // Few rows, or no AMX (the VNNI loop then takes every row count: one kernel, batch invariant).
  if (q3) return vnni_rows<true>(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
  vnni_rows<false>(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
}

#else  // no AMX-INT8 / VNNI in this build: nothing is repacked for it

void amx_q23k_split_rows(const float*, int64_t, int64_t, int64_t, int8_t*, float*, float*) {
  throw ModelError("amx int8 matmul: not built");
}
void amx_q23k_compute(const TensorView&, const AmxActivations&, int64_t, int64_t, float*, int64_t,
                      int64_t, int64_t) {
  throw ModelError("amx int8 matmul: not built");
}

#endif

}  // namespace ossa
