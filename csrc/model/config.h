#pragma once
// The shape and hyper-parameters of a Llama-family model, from GGUF metadata or config.json.
#include <string>
#include <vector>

namespace ossa {

// How RoPE pairs the dimensions of a head.
//  Interleaved: pairs (2i, 2i+1). llama.cpp's convert permutes the Q/K rows of Llama-architecture
//               GGUF files so that this form gives HF's result; we use those files as they are.
//  Neox:        pairs (i, i + head_dim/2), Hugging Face's rotate_half (HF Llama, Qwen2/3 in any format).
enum class RopeStyle { Interleaved, Neox };

struct RopeScaling {
  std::string type = "none";  // "none", "linear", "llama3"
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position = 8192;
};

// Mixture of experts (Qwen3-MoE, Qwen2-MoE, Mixtral; model/moe.h): in the layers listed, the
// feed-forward is a router over n_expert experts of which each token uses its n_expert_used best.
// n_expert == 0 for a dense model.
struct MoeConfig {
  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_expert = 0;          // rows of each expert's gate and up matrices
  int n_ff_shared = 0;          // Qwen2-MoE's shared expert (0: none)
  bool norm_topk_prob = false;  // the chosen experts' weights renormalised to sum to 1
  std::vector<int> layers;      // the MoE layers, ascending (the others are dense)
  bool is_moe_layer(int layer) const;
};

struct ModelConfig {
  std::string arch;  // "llama", "qwen2", "qwen3", "mistral", "qwen3moe", "qwen2moe", "mixtral"
  int n_vocab = 0;
  int n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;  // may differ from n_embd / n_head (Qwen3, odd test models)
  int n_ff = 0;
  int n_ctx_train = 0;
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  RopeStyle rope_style = RopeStyle::Neox;
  bool qkv_bias = false;         // Qwen2
  bool qk_norm = false;          // Qwen3: RMSNorm over each head of q and k before RoPE
  bool tied_embeddings = false;  // output projection shares tok_embd
  MoeConfig moe;
};

}  // namespace ossa
