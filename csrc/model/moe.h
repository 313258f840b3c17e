#pragma once
// Mixture-of-experts feed-forward (Qwen3-MoE, Qwen2-MoE, Mixtral): weights, loading and forward.
//
// A MoE layer replaces the dense SwiGLU with n_expert small SwiGLUs ("experts") and a router:
//
//   h       = rmsnorm(x, ffn_norm)
//   p       = softmax(h @ router^T)                      [n_expert] per token
//   chosen  = the n_expert_used largest logits; equal logits: the lower expert index first
//   w_j     = p[chosen_j] (divided by their sum with norm_topk_prob)
//   x      += sum_j w_j * expert_{chosen_j}(h)           (j in ascending expert index)
//             + sigmoid(h . shared_gate_inp) * shared(h)  (Qwen2-MoE's shared expert, when present)
//
// The expert matmuls of a step are grouped by expert: the rows routed to expert e are gathered
// into one block and multiplied once by e's weights. The matmul gives each row the result it would
// have alone (kernels/matmul.h), and a token sums its experts in a fixed order, so a token's output
// never depends on which other tokens share its experts: batch invariance as in the dense layers.
//
// Expert weights are views into the file: GGUF's 3-D tensors (ffn_gate_exps: [n_expert, n_ff,
// n_embd]) sliced per expert, HF's per-expert tensors as they are. Only the AMX repack (or dtype
// bfloat16's copy) makes a per-expert copy, as it does for every dense matrix.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "formats/tensor.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "model/config.h"
#include "util/aligned.h"

namespace ossa {

struct ForwardState;
struct LayerWeights;
class GGUFFile;
struct JsonValue;

// gate/up: n_ff x n_embd, down: n_embd x n_ff (n_ff_expert, or n_ff_shared for the shared expert).
struct ExpertWeights {
  TensorView w_gate, w_up, w_down;
  TensorView b_gate, b_up, b_down;  // gpt-oss's biases (1 x n_ff, 1 x n_ff, 1 x n_embd; F32)
  bool empty() const { return w_up.empty(); }  // (relu2 experts have no gate)
};

struct MoeWeights {
  TensorView router;  // n_expert x n_embd; multiplied exactly (f32 activations, never repacked)
  TensorView router_bias;  // 1 x n_expert F32 (gpt-oss); empty otherwise
  std::vector<ExpertWeights> experts;
  ExpertWeights shared;        // Qwen2-MoE's shared expert; empty otherwise
  TensorView shared_gate_inp;  // 1 x n_embd F32: the shared expert's sigmoid gate (none: weight 1)
  TensorView selection_bias;   // 1 x n_expert F32 (ERNIE 4.5 MoE); empty otherwise
  TensorView expert_scale;     // 1 x n_expert F32: a chosen expert's weight times it (Gemma 4)
  bool active() const { return !router.empty(); }
};

// The matrices of a MoE layer the matmuls multiply (experts and shared expert, not the router,
// which stays as stored so routing sees exact f32 products): f(TensorView&).
template <class F>
void for_each_moe_matrix(MoeWeights& m, F&& f) {
  for (ExpertWeights& e : m.experts)
    for (TensorView* v : {&e.w_gate, &e.w_up, &e.w_down}) f(*v);
  if (!m.shared.empty())
    for (TensorView* v : {&m.shared.w_gate, &m.shared.w_up, &m.shared.w_down}) f(*v);
}

// ---- loading ----------------------------------------------------------------------------------

// The loader's access to the file's tensors: whether one exists, and one taken with its shape
// checked (rows == 1: a vector, converted to F32; a missing tensor throws ModelError).
struct TensorSource {
  std::function<bool(const std::string& name)> has;
  std::function<TensorView(const std::string& name, const std::string& canonical, int64_t rows,
                           int64_t cols)>
      take;
  // A buffer of `bytes` owned by the model (4-byte aligned), for rearranged copies.
  std::function<uint8_t*(size_t bytes)> alloc;
  // The same rows as F32 (a converted copy unless stored so): bias rows, which add_bias reads.
  std::function<TensorView(const TensorView&)> to_f32;
  // A U8 tensor of exactly this shape, as its bytes (HF MXFP4 blocks / scales); ModelError else.
  std::function<const uint8_t*(const std::string& name, const std::vector<int64_t>& shape)> take_u8;
  // A folder's tensor's stored shape (empty where unknown), to tell a stack's orientation.
  std::function<std::vector<int64_t>(const std::string& name)> shape;
};

// The MoE keys of a GGUF file ({arch}.expert_count, ...) or of a config.json (num_experts, ...)
// into c.moe; a dense model leaves it empty. MoE layers: in GGUF those with a router tensor
// (`has`), in config.json those decoder_sparse_step and mlp_only_layers name. ModelError for
// inconsistent values.
void read_moe_config_gguf(ModelConfig& c, const GGUFFile& g,
                          const std::function<bool(const std::string&)>& has,
                          const std::string& path);
void read_moe_config_hf(ModelConfig& c, const JsonValue& cfg, const std::string& path);

// Experts read in place from two 3-D stacks: gate_up [n * 2F, E] (each expert's gate rows, then its
// up rows) and down [n * E, F].
void view_expert_stacks(const TensorView& gu, const TensorView& d, int64_t n, int64_t F, int64_t E,
                        MoeWeights& out);

// Layer `layer`'s router, experts and shared expert (GGUF or HF names), as views into the file.
void build_moe_layer(const ModelConfig& c, int layer, bool gguf, const TensorSource& src,
                     MoeWeights& out);

// ---- forward ----------------------------------------------------------------------------------

// Work buffers of the MoE layers, sized once by plan (no allocation during a step). A step's tokens
// are routed in passes of up to `pass_tokens`, which bounds these buffers for long prefills.
struct MoeBuffers {
  int pass_tokens = 0;
  std::vector<float> logits;               // [pass, n_expert] router logits
  std::vector<int32_t> chosen;             // [pass, n_expert_used] experts, ascending
  std::vector<float> weight;               // [pass, n_expert_used] their weights
  std::vector<int32_t> group_start, fill;  // [n_expert + 1]: each expert's first grouped row
  std::vector<int32_t> active;             // [n_expert]: the experts with rows in this pass
  std::vector<int32_t> row_of;             // [pass, n_expert_used]: (token, j) -> grouped row
  AlignedVector<float> in, mid, out;   // grouped rows: [pass * k, n_embd | n_ff_expert | n_embd]
  AlignedVector<float> up;             // gpt-oss: the up products beside mid's gate products
  std::vector<BlockQ8> in_q8, mid_q8;  // the same rows as 8-bit blocks (quantized activations)
  AlignedVector<float> shared_mid, shared_out;  // [pass, n_ff_shared | n_embd]
  std::vector<float> shared_gate;               // [pass]

  void plan(const ModelConfig& c, int max_tokens);
};

// Where a model departs from the usual MoE feed-forward (Gemma 4: experts beside a dense MLP): the
// experts' input norm (default L.ffn_norm), the router's input rows [n, n_embd] (default: the
// experts' input), the experts' weighted sum written to out [n, n_embd] instead of added to x, and
// their activation.
struct MoeCall {
  const float* norm = nullptr;
  const float* router_in = nullptr;
  float* out = nullptr;
  Glu glu = Glu::Silu;
};

// x += the MoE feed-forward of layer L for the step's n tokens (s.x in, s.h as scratch).
void moe_forward(ForwardState& s, const LayerWeights& L, int n, int threads,
                 const MoeCall& call = {});

}  // namespace ossa
