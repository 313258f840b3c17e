#pragma once
// The weights of a Llama-family model, as views into the file(s) it came from.
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/tensor.h"

namespace ossa {

// Shapes (rows x cols), with q = n_head*head_dim, kv = n_head_kv*head_dim:
//   wq q x n_embd, wk/wv kv x n_embd, wo n_embd x q, bq/bk/bv 1 x (q|kv),
//   q_norm/k_norm 1 x head_dim, w_gate/w_up n_ff x n_embd, w_down n_embd x n_ff,
//   attn_norm/ffn_norm 1 x n_embd. Optional ones are empty().
struct LayerWeights {
  TensorView attn_norm, wq, wk, wv, wo, bq, bk, bv, q_norm, k_norm;
  TensorView ffn_norm, w_gate, w_up, w_down;
};

struct ModelWeights {
  TensorView tok_embd;     // n_vocab x n_embd
  TensorView output_norm;  // 1 x n_embd
  TensorView output;       // n_vocab x n_embd; equals tok_embd when tied
  std::vector<LayerWeights> layers;
};

// A loaded model. `storage` keeps the memory maps (and any converted buffers) alive.
struct Model {
  ModelConfig config;
  ModelWeights weights;
  std::string path;
  std::string format;  // "gguf" or "safetensors"
  std::shared_ptr<void> storage;
};

// Loads a GGUF file or a Hugging Face folder (config.json + *.safetensors). Throws ModelError
// naming the problem: unknown architecture, unsupported tensor type, missing tensor, shape mismatch,
// corrupt or truncated file.
std::shared_ptr<Model> load_model(const std::string& path);

}  // namespace ossa
