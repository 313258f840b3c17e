#pragma once
// Weights laid out for the kernels that will multiply them, once per matrix when a model loads
// (moved here from the loader: which layout a kernel reads is the kernels' business).
//
//  - AMX (amx on and amx_available()): Q4_0 / Q4_1 / Q8_0 / BF16 matrices repacked into bf16 tile
//    form, Q4_K / Q6_K into the int8 tile form (kernels/matmul_amx.cpp, matmul_amx_i8.cpp);
//    TensorView::packed points at the copy, the file's bytes stay for everything else.
//  - dtype "bfloat16": every matrix dequantized and rounded to bf16 (make_bf16_compute).
//  - otherwise nothing: the f32 kernels read the file's blocks in place.
//
// Every matrix of a model is prepared in one parallel pass over 256-row pieces of all of them, into
// buffers that are never zero-filled first (each byte is written once), so loading costs about one
// read of the file and one write of the copies.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "formats/tensor.h"

namespace ossa {

// 64-byte aligned bytes, not initialized. From 2 MiB on, an anonymous mapping aligned to 2 MiB and
// advised for transparent huge pages: the repacked weights are written once at load and then
// streamed by every decode step, so 4 KiB pages cost ~one fault per page at load (~0.5 s of system
// time for the 1B Q4_K_M file's repack) and TLB misses in every step.
class AlignedBytes {
 public:
  explicit AlignedBytes(size_t n);
  uint8_t* data() const { return p_.get(); }
  size_t size() const { return n_; }

 private:
  struct Free {
    size_t mapped = 0;  // bytes of the mapping (0: from operator new)
    void operator()(uint8_t* p) const noexcept;
  };
  std::unique_ptr<uint8_t, Free> p_;
  size_t n_ = 0;
};

// Owns the copies the prepared views point into (keep it alive as long as the views).
struct PreparedWeights {
  std::vector<AlignedBytes> buffers;
};

// Prepares `matrices` in place for the kernels (views of empty matrices are skipped): bf16_compute
// is dtype "bfloat16"; amx asks for the AMX layouts where the CPU has AMX; quantized_activations
// (the model's 8-bit activation mode) picks the layout of the types whose AVX2 kernel depends on it
// (Q4_0 / Q4_1: amx_i8_takes_i16; a bf16_compute copy ignores it).
// Returns whether any matrix now runs the AMX kernels. ModelError as make_bf16_compute throws it.
bool prepare_weights(const std::vector<TensorView*>& matrices, bool bf16_compute, bool amx,
                     PreparedWeights& out, bool quantized_activations = false);

// dtype "bfloat16": W dequantized and rounded to bf16 (ties to even) once, into `out`
// (bf16_compute_bytes(w) bytes, 64-byte aligned, kept alive by the caller): AMX tiles when amx (and
// amx_available()), else a row-major BF16 copy for the f32 kernels. Returns the view to multiply
// instead of w (bf16_compute set: its activations are rounded to bf16 too, products accumulated in
// f32). ModelError if a row is not a multiple of 32 values.
size_t bf16_compute_bytes(const TensorView& w);
TensorView make_bf16_compute(const TensorView& w, uint8_t* out, bool amx);

}  // namespace ossa
