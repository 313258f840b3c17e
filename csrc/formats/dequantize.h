#pragma once
// Scalar dequantization of stored rows to float32, following llama.cpp's block layouts. This is the
// loader's reference path (tests, conversions of small tensors), not a kernel: the matmul kernels
// dequantize in registers. Every value is an exact product of the block scale and the quant, plus
// at most one rounded addition, so the result does not depend on FMA contraction and equals the
// NumPy twin (ossa.reference.quants) bitwise.
#include <cstdint>

#include "formats/tensor.h"

namespace ossa {

// Dequantizes row `row` of `view` into out[0 .. view.cols), the columns as stored.
void dequantize_row(const TensorView& view, int64_t row, float* out);
// The same with a reordered matrix's columns put back in the input's order (TensorView::in_perm):
// the matrix the model multiplies.
void dequantize_row_logical(const TensorView& view, int64_t row, float* out);

}  // namespace ossa
