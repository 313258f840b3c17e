#include "kernels/ops.h"

#include <cmath>
#include <numbers>

#include "kernels/vec_math.h"

namespace ossa {

void rmsnorm_row(const float* x, const float* w, int64_t n, float eps, float* out) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] * (x[i] * inv);
}

void rope_inv_freq(const ModelConfig& c, float* inv_freq) {
  const int half = c.head_dim / 2;
  const RopeScaling& s = c.rope_scaling;
  for (int i = 0; i < half; ++i) {
    double f = 1.0 / std::pow(static_cast<double>(c.rope_theta), 2.0 * i / c.head_dim);
    if (s.type == "linear") {
      f /= s.factor;
    } else if (s.type == "llama3") {
      // Hugging Face's _compute_llama3_parameters: long wavelengths are slowed by `factor`,
      // short ones kept, the band between interpolated.
      const double low_wavelen = s.original_max_position / s.low_freq_factor;
      const double high_wavelen = s.original_max_position / s.high_freq_factor;
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f /= s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (s.original_max_position / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        f = (1.0 - smooth) * f / s.factor + smooth * f;
      }
    }
    inv_freq[i] = static_cast<float>(f);
  }
}

void rope_cos_sin(int32_t position, const float* inv_freq, int head_dim, float* cs) {
  for (int i = 0; i < head_dim / 2; ++i) {
    const float angle = static_cast<float>(position) * inv_freq[i];
    cs[2 * i] = static_cast<float>(std::cos(static_cast<double>(angle)));
    cs[2 * i + 1] = static_cast<float>(std::sin(static_cast<double>(angle)));
  }
}

void rope_apply(float* x, int n_heads, int head_dim, RopeStyle style, const float* cs) {
  const int half = head_dim / 2;
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
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_loadu_ps(up + i)));
  }
#endif
  for (; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add_row(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace ossa
