#include "kernels/ops.h"

#include <cmath>

#include "kernels/vec_math.h"

namespace ossa {

void rmsnorm_row(const float* x, const float* w, int64_t n, float eps, float* out) {
  // Sum of squares in float64 (each square is exact there), in a fixed order: four 8-lane
  // accumulators over 32-element steps, combined as (a0 + a1) + (a2 + a3), lanes summed by the
  // reduction, then the tail in order. The scaling is float32, element by element.
  double ss = 0.0;
  int64_t i = 0;
#if defined(__AVX512F__)
  __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
  for (; i + 32 <= n; i += 32) {
    const __m512d v0 = _mm512_cvtps_pd(_mm256_loadu_ps(x + i)),
                  v1 = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
    const __m512d v2 = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 16)),
                  v3 = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 24));
    a0 = _mm512_fmadd_pd(v0, v0, a0);
    a1 = _mm512_fmadd_pd(v1, v1, a1);
    a2 = _mm512_fmadd_pd(v2, v2, a2);
    a3 = _mm512_fmadd_pd(v3, v3, a3);
  }
  ss = _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
#endif
  for (; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  int64_t j = 0;
  if (w == nullptr) {  // (weightless: x * inv alone)
    for (; j < n; ++j) out[j] = x[j] * inv;
    return;
  }
#if defined(__AVX512F__)
  const __m512 vinv = _mm512_set1_ps(inv);
  for (; j + 16 <= n; j += 16)
    _mm512_storeu_ps(out + j, _mm512_mul_ps(_mm512_loadu_ps(w + j),
                                            _mm512_mul_ps(_mm512_loadu_ps(x + j), vinv)));
#endif
  for (; j < n; ++j) out[j] = w[j] * (x[j] * inv);
}

void layernorm_row(const float* x, const float* w, int64_t n, float eps, float* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(n);
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - mean;
    ss += d * d;
  }
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  const float m = static_cast<float>(mean);
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] * ((x[i] - m) * inv);
}

void rope_cos_sin(int32_t position, const float* inv_freq, int head_dim, float* cs) {
  for (int i = 0; i < head_dim / 2; ++i) {
    const float angle = static_cast<float>(position) * inv_freq[i];
    cs[2 * i] = static_cast<float>(std::cos(static_cast<double>(angle)));
    cs[2 * i + 1] = static_cast<float>(std::sin(static_cast<double>(angle)));
  }
}

void rope_apply(float* x, int n_heads, int head_dim, RopeStyle style, const float* cs) {
  // Each rotated element is (a * c) - (b * s) or (a * s) + (b * c) with both products rounded first
  // (the build has -ffp-contract=off), the same in the vector paths and the scalar one.
  const int half = head_dim / 2;
#if defined(__AVX512F__)
  if (style == RopeStyle::Neox && half % 16 == 0 && half <= 128) {
    // cs holds (cos, sin) pairs: split them once for all heads.
    alignas(64) float cosv[128], sinv[128];
    const __m512i even =
        _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int i = 0; i < half; i += 16) {
      const __m512 lo = _mm512_loadu_ps(cs + 2 * i), hi = _mm512_loadu_ps(cs + 2 * i + 16);
      _mm512_store_ps(cosv + i, _mm512_permutex2var_ps(lo, even, hi));
      _mm512_store_ps(sinv + i, _mm512_permutex2var_ps(lo, odd, hi));
    }
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + static_cast<int64_t>(h) * head_dim;
      for (int i = 0; i < half; i += 16) {
        const __m512 a = _mm512_loadu_ps(v + i), b = _mm512_loadu_ps(v + half + i);
        const __m512 c = _mm512_load_ps(cosv + i), sn = _mm512_load_ps(sinv + i);
        _mm512_storeu_ps(v + i, _mm512_sub_ps(_mm512_mul_ps(a, c), _mm512_mul_ps(b, sn)));
        _mm512_storeu_ps(v + half + i, _mm512_add_ps(_mm512_mul_ps(a, sn), _mm512_mul_ps(b, c)));
      }
    }
    return;
  }
  if (style == RopeStyle::Interleaved && head_dim % 16 == 0) {
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + static_cast<int64_t>(h) * head_dim;
      for (int i = 0; i < head_dim; i += 16) {
        const __m512 xv = _mm512_loadu_ps(v + i),
                     pair = _mm512_loadu_ps(cs + i);  // (cos, sin) of 8 pairs
        const __m512 c = _mm512_moveldup_ps(pair), sn = _mm512_movehdup_ps(pair);
        const __m512 p = _mm512_mul_ps(xv, c);                            // a*c | b*c
        const __m512 q = _mm512_mul_ps(_mm512_permute_ps(xv, 0xB1), sn);  // b*s | a*s
        _mm512_storeu_ps(v + i,
                         _mm512_mask_blend_ps(0xAAAA, _mm512_sub_ps(p, q), _mm512_add_ps(q, p)));
      }
    }
    return;
  }
#endif
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const int a = style == RopeStyle::Neox ? i : 2 * i;
      const int b = style == RopeStyle::Neox ? i + half : 2 * i + 1;
      const float c = cs[2 * i], s = cs[2 * i + 1];
      const float x0 = v[a], x1 = v[b];
      const float p0 = x0 * c, p1 = x1 * s, p2 = x0 * s, p3 = x1 * c;
      v[a] = p0 - p1;
      v[b] = p2 + p3;
    }
  }
}

void swiglu_row(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
#if defined(__AVX512F__)
  // 16 lanes with a polynomial exp (kernels/vec_math.h); the tail uses the scalar formula.
  const __m512 one = _mm512_set1_ps(1.0f);
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
    _mm512_storeu_ps(
        out + i, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_loadu_ps(up + i)));
  }
#endif
  for (; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void relu2_glu_row(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float r = gate[i] > 0.0f ? gate[i] : 0.0f;
    out[i] = r * r * up[i];
  }
}

void relu_row(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void relu2_row(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] * x[i] : 0.0f;
}

void xielu_row(float* x, int64_t n, float alpha_p, float alpha_n, float beta, float eps) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    x[i] = v > 0.0f ? alpha_p * v * v + beta * v
                    : (std::expm1(std::min(v, eps)) - v) * alpha_n + beta * v;
  }
}

void silu_row(float* x, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 one = _mm512_set1_ps(1.0f);
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(x + i);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
    _mm512_storeu_ps(x + i, _mm512_div_ps(g, _mm512_add_ps(one, e)));
  }
#endif
  for (; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
}

// gelu_tanh(g) as g * sigmoid(2u), u = sqrt(2/pi) (g + 0.044715 g^3): one scalar and one 16-wide
// form, the same operations in the same order (geglu_row and gelu_tanh_row share them).
constexpr float k_gelu_c = 0.7978845608028654f, k_gelu_a = 0.044715f;  // sqrt(2/pi)

inline float gelu_tanh1(float g) {
  const float inner = g + k_gelu_a * ((g * g) * g);
  return g / (1.0f + std::exp((-2.0f * k_gelu_c) * inner));
}

#if defined(__AVX512F__)
inline __m512 gelu_tanh16(__m512 g) {
  const __m512 inner = _mm512_add_ps(
      g, _mm512_mul_ps(_mm512_set1_ps(k_gelu_a), _mm512_mul_ps(_mm512_mul_ps(g, g), g)));
  const __m512 e = exp16(_mm512_mul_ps(_mm512_set1_ps(-2.0f * k_gelu_c), inner));
  return _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}
#endif

void geglu_row(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(
        out + i, _mm512_mul_ps(gelu_tanh16(_mm512_loadu_ps(gate + i)), _mm512_loadu_ps(up + i)));
#endif
  for (; i < n; ++i) out[i] = gelu_tanh1(gate[i]) * up[i];
}

void gelu_erf_row(float* x, int64_t n) {
  constexpr float k_r = 0.70710678118654752f;  // 1 / sqrt(2)
  for (int64_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * k_r));
}

void gelu_tanh_row(float* x, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, gelu_tanh16(_mm512_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) x[i] = gelu_tanh1(x[i]);
}

void add_row(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace ossa
