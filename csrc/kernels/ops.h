#pragma once
// Row-wise kernels of the forward pass. Each works on one row at a time with a fixed operation
// order, so a row's result never depends on the rows around it.
#include <cstdint>

namespace ossa {

// How RoPE pairs the dimensions of a head.
//  Interleaved: pairs (2i, 2i+1). llama.cpp's convert permutes the Q/K rows of Llama-architecture
//               GGUF files so that this form gives HF's result; we use those files as they are.
//  Neox:        pairs (i, i + head_dim/2), Hugging Face's rotate_half (HF Llama, Qwen2/3 in any
//               format).
enum class RopeStyle { Interleaved, Neox };

// out[i] = w[i] * (x[i] / sqrt(mean(x^2) + eps)); the mean is summed in double, in index order.
// w == nullptr: no weight (out[i] = x[i] / sqrt(...)).
void rmsnorm_row(const float* x, const float* w, int64_t n, float eps, float* out);

// LayerNorm without a bias (Cohere): out[i] = w[i] * ((x[i] - mean) / sqrt(var + eps)), the mean
// and the variance (of x - mean) summed in double in index order; the scaling float32.
void layernorm_row(const float* x, const float* w, int64_t n, float eps, float* out);

// cos/sin of position * inv_freq[i]: cs[2i] = cos, cs[2i+1] = sin, i < head_dim/2.
void rope_cos_sin(int32_t position, const float* inv_freq, int head_dim, float* cs);

// Rotates n_heads heads of one token in place (x is [n_heads, head_dim]).
void rope_apply(float* x, int n_heads, int head_dim, RopeStyle style, const float* cs);

// out[i] = silu(gate[i]) * up[i].
void swiglu_row(const float* gate, const float* up, int64_t n, float* out);

// x[i] = relu(x[i])^2, in place (Nemotron-H's feed-forward activation, relu2).
void relu2_row(float* x, int64_t n);
// x[i] = max(x[i], 0), in place (OPT's feed-forward activation).
void relu_row(float* x, int64_t n);

// xIELU in place (Apertus), with the applied parameters (alpha_p = softplus of the stored one,
// alpha_n = beta + softplus of the stored one): x > 0: alpha_p x^2 + beta x; else
// (expm1(min(x, eps)) - x) alpha_n + beta x; f32, in transformers' order.
void xielu_row(float* x, int64_t n, float alpha_p, float alpha_n, float beta, float eps);

// x[i] = silu(x[i]) = x[i] / (1 + exp(-x[i])), in place (swiglu_row's exp).
void silu_row(float* x, int64_t n);

// out[i] = gelu_tanh(gate[i]) * up[i] (GeGLU, Gemma; PyTorch's gelu(approximate="tanh")), computed
// as g * sigmoid(2u) with u = sqrt(2/pi) (g + 0.044715 g^3), which equals 0.5 g (1 + tanh(u)).
void geglu_row(const float* gate, const float* up, int64_t n, float* out);

// x[i] = gelu_tanh(x[i]), in place (geglu_row's formula without the up factor; StarCoder2).
void gelu_tanh_row(float* x, int64_t n);

// x[i] = gelu(x[i]) = 0.5 x (1 + erf(x / sqrt 2)), exact, in place (GPT-NeoX's and Falcon's
// "gelu").
void gelu_erf_row(float* x, int64_t n);

// The gated activation of a feed-forward: SwiGLU (Llama family) or GeGLU (Gemma).
enum class Glu { Silu, GeluTanh, Relu2 };
// out[i] = relu(gate[i])^2 * up[i] (BitNet's relu2 gate; out may alias gate).
void relu2_glu_row(const float* gate, const float* up, int64_t n, float* out);
inline void glu_row(Glu glu, const float* gate, const float* up, int64_t n, float* out) {
  if (glu == Glu::GeluTanh)
    geglu_row(gate, up, n, out);
  else if (glu == Glu::Relu2)
    relu2_glu_row(gate, up, n, out);
  else
    swiglu_row(gate, up, n, out);
}

// x[i] += y[i].
void add_row(float* x, const float* y, int64_t n);

}  // namespace ossa
