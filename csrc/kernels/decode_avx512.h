#pragma once
// AVX-512 decoders for quantized weight blocks, shared by the f32 tile kernels (matmul_f32.cpp) and
// the AMX kernels (matmul_amx.cpp): one 32-element block of a weight row as two 16-lane f32 halves,
// each weight exactly fma(float(q), scale, min), the value transformers' dequantization gives.
// Include only inside `#if defined(__AVX512F__)` (after kernels/matmul_kernels.h), within namespace
// ossa's anonymous namespace of the including file.
inline float fsum16(__m512 v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  return hsum8(_mm256_add_ps(lo, hi));
}


inline __m128i load16(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

inline __m512 iota16() {
  return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

// Why the detour through memory: the decode kernels are bound by port 5 (vpmovzxbd, vpermps), and a
// broadcast from a register also runs there, while a broadcast from memory is a plain load. So the
// two f16 values at p (and the 6 bytes after them, ignored) are converted with one vcvtph2ps from
// memory, stored, and broadcast from the store.
struct F32Pair {
  __m512 first, second;
};
inline F32Pair scales_f32(const uint16_t* p) {
  alignas(16) float f[4];
  _mm_store_ps(f, _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  F32Pair out;
  asm("vbroadcastss %1, %0" : "=v"(out.first) : "m"(f[0]));
  asm("vbroadcastss %1, %0" : "=v"(out.second) : "m"(f[1]));
  return out;
}

// Elements 0..15 and 16..31 of a 32-element block, as f32.
struct Block32 {
  __m512 lo, hi;
};

// 4-bit quants become f32 through a 16-entry table, table[k] = fma(k, scale, min), indexed by the
// nibbles with vpermps (which reads only the low 4 bits of each index): the same value as widening
// the nibble and applying the FMA, for half the instructions.
inline Block32 nibbles_via_table(__m512i lo_idx, __m512i hi_idx, __m512 table) {
  return {_mm512_permutexvar_ps(lo_idx, table), _mm512_permutexvar_ps(hi_idx, table)};
}

template <DType T>
inline Block32 decode(const uint8_t* row, int64_t b) {
  if constexpr (T == DType::Q4_0 || T == DType::Q4_1) {
    // Q4_0 and Q4_1: element j is the low nibble of qs[j], element j + 16 the high nibble.
    __m512 table;
    const uint8_t* qs;
    if constexpr (T == DType::Q4_0) {
      const BlockQ4_0& w = reinterpret_cast<const BlockQ4_0*>(row)[b];
      const __m512 base = _mm512_sub_ps(iota16(), _mm512_set1_ps(8.0f));  // q - 8, exact
      table = _mm512_fmadd_ps(base, scales_f32(&w.d).first, _mm512_setzero_ps());
      qs = w.qs;
    } else {
      // d and m are adjacent: one conversion for both, broadcast back from the stack.
      const BlockQ4_1& w = reinterpret_cast<const BlockQ4_1*>(row)[b];
      const F32Pair dm = scales_f32(&w.d);
      table = _mm512_fmadd_ps(iota16(), dm.first, dm.second);
      qs = w.qs;
    }
    const __m512i e = _mm512_cvtepu8_epi32(load16(qs));
    return nibbles_via_table(e, _mm512_srli_epi32(e, 4), table);
  } else if constexpr (T == DType::Q8_0) {
    const BlockQ8_0& w = reinterpret_cast<const BlockQ8_0*>(row)[b];
    const __m512 d = scales_f32(&w.d).first, zero = _mm512_setzero_ps();
    const __m512 q0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load16(w.qs)));
    const __m512 q1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load16(w.qs + 16)));
    return {_mm512_fmadd_ps(q0, d, zero), _mm512_fmadd_ps(q1, d, zero)};
  } else if constexpr (T == DType::Q4_K) {
    // Sub-block `sub` of a 256-element super-block: 32 bytes of qs, low nibbles for even sub,
    // high nibbles for odd.
    const BlockQ4_K& w = reinterpret_cast<const BlockQ4_K*>(row)[b / 8];
    const int sub = static_cast<int>(b % 8);
    const uint8_t* q = w.qs + 32 * (sub / 2);
    __m512i e0 = _mm512_cvtepu8_epi32(load16(q)), e1 = _mm512_cvtepu8_epi32(load16(q + 16));
    if (sub % 2) e0 = _mm512_srli_epi32(e0, 4), e1 = _mm512_srli_epi32(e1, 4);
    int sc, m;
    q4_k_scale_min(sub, w.scales, sc, m);
    const float scale = _cvtsh_ss(w.d) * static_cast<float>(sc);
    const float min = -(_cvtsh_ss(w.dmin) * static_cast<float>(m));
    const __m512 table = _mm512_fmadd_ps(iota16(), _mm512_set1_ps(scale), _mm512_set1_ps(min));
    return nibbles_via_table(e0, e1, table);
  } else {
    static_assert(T == DType::Q6_K);
    // Sub-block sub = 4 * half + k: low 4 bits from ql (low nibbles for k < 2, high for k >= 2),
    // high 2 bits are bits 2k, 2k+1 of qh; value q6 - 32 with one scale per 16 elements.
    const BlockQ6_K& w = reinterpret_cast<const BlockQ6_K*>(row)[b / 8];
    const int sub = static_cast<int>(b % 8), half = sub / 4, k = sub % 4;
    const uint8_t* ql = w.ql + 64 * half + 32 * (k % 2);
    const uint8_t* qh = w.qh + 32 * half;
    const __m128i shift = _mm_cvtsi32_si128(2 * k);
    const __m512i m3 = _mm512_set1_epi32(3), k32 = _mm512_set1_epi32(32);
    const float d = _cvtsh_ss(w.d);
    const int8_t* sc = w.scales + 8 * half + 2 * k;
    __m512 out[2];
    for (int p = 0; p < 2; ++p) {
      __m512i l = _mm512_cvtepu8_epi32(load16(ql + 16 * p));
      l = k < 2 ? _mm512_and_si512(l, _mm512_set1_epi32(15)) : _mm512_srli_epi32(l, 4);
      const __m512i h = _mm512_and_si512(_mm512_srl_epi32(_mm512_cvtepu8_epi32(load16(qh + 16 * p)), shift), m3);
      const __m512i q = _mm512_sub_epi32(_mm512_or_si512(l, _mm512_slli_epi32(h, 4)), k32);
      out[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(d * static_cast<float>(sc[p])),
                               _mm512_setzero_ps());
    }
    return {out[0], out[1]};
  }
}

