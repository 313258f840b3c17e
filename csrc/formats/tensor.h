#pragma once
// Weight tensors as they sit in the model file, viewed in place.
//
// Every weight is a row-major matrix (a vector is one row). For GGUF files ne[0] is the
// contiguous dimension, so rows = ne[1], cols = ne[0]; for safetensors shape [rows, cols].
// Quantized rows are sequences of blocks (llama.cpp's layouts), so a row is row_bytes long:
//
//   data ──> | row 0: block 0 | block 1 | ... | row 1: block 0 | ... |
//
#include <cstddef>
#include <cstdint>
#include <string>

namespace ossa {

// Values follow ggml's type ids so a GGUF tensor type maps directly.
enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  IQ1_M = 29,
  BF16 = 30,
  MXFP4 = 39,
  // Not a GGUF type: BitNet b1.58's ternary matrices as transformers' BitLinear stores them (a
  // folder's packed uint8 weight and weight_scale), repacked at load (kernels/matmul_bitnet.cpp:
  // 2 bits per value, 16 bytes per 64 columns; TensorView::scale the matrix's scale).
  BITNET = 1000,
  // Not a GGUF type: a folder's FP8 (E4M3) matrix with its block scales (transformers'
  // FineGrainedFP8: quant_method "fp8", weight_scale_inv per 128 x 128 block or per tensor),
  // repacked at load into rows of 128-value blocks, each its f32 scale then 128 E4M3 bytes
  // (132 bytes); a weight is fl32(e4m3 * scale), the value transformers dequantizes to.
  FP8 = 1001,
};

struct DTypeTraits {
  int block_elems;  // elements per block (1 for plain floats)
  int block_bytes;  // bytes per block
};

// Throws ModelError for a type ossa does not support, naming it.
DTypeTraits dtype_traits(DType type);
bool dtype_supported(uint32_t ggml_type);
const char* dtype_name(DType type);
std::string ggml_type_name(uint32_t ggml_type);  // also names types ossa does not support

struct TensorView {
  DType type = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* data = nullptr;  // owned by the model's storage
  size_t row_bytes = 0;           // bytes of one row
  // The same weights repacked for the AMX kernels (kernels/matmul_amx.cpp), owned by the model's
  // storage; null when not repacked.
  const uint8_t* packed = nullptr;
  // bfloat16 compute (load_model with dtype "bfloat16"): this matrix multiplies activations rounded
  // to bf16, its weights rounded to bf16 too (in `packed` on AMX, else `data` is a BF16 copy).
  bool bf16_compute = false;
  // BITNET: the matrix's weight_scale (its products are divided by it, or with scale_mul multiplied
  // by it: transformers' BitLinear and AutoBitLinear; kernels/matmul_bitnet.cpp).
  float scale = 0.0f;
  bool scale_mul = false;
  // Activation quantization of a compressed-tensors W8A8 matrix (act_quant_* below): each input row
  // quantized per token and dequantized (kernels/matmul.cpp: act_quantize_rows) before the product.
  uint8_t act_quant = 0;
  float act_scale = 0.0f;  // (static activation quantization: the scale; 0: per token)
  // A GPTQ act-order (desc_act) matrix stored with its columns reordered so that its groups are
  // contiguous: stored column j multiplies input element in_perm[j] (kernels/matmul.cpp gathers
  // each input row so before the product; dequantize_row_logical puts the columns back). Null:
  // none.
  const int32_t* in_perm = nullptr;

  bool empty() const { return data == nullptr; }
  size_t nbytes() const { return row_bytes * static_cast<size_t>(rows); }
  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
};

// TensorView::act_quant: none, int8 per token (s = max |x| / 127.5, q = round-half-even(x / s)
// clamped to [-128, 127]), FP8 E4M3 per token (s = max |x| / 448, x / s clamped to +-448 and
// rounded to E4M3); the matrix multiplies q * s (compressed-tensors' dynamic token quantization).
constexpr uint8_t k_act_quant_none = 0, k_act_quant_int8 = 1, k_act_quant_fp8 = 2;

// The byte of a BITNET matrix of `cols` columns holding value (row, col), in bits 2 ((col % 64) /
// 16) and up (kernels/matmul_kernels.h has the layout: rows in groups of four, 16 bytes a row per
// 64 columns).
inline size_t bitnet_byte(int64_t row, int64_t col, int64_t cols) {
  return static_cast<size_t>((row / 4) * cols + 64 * (col / 64) + 16 * (row % 4) + col % 16);
}

}  // namespace ossa
