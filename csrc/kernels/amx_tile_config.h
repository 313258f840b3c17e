#pragma once
// The 64-byte operand of LDTILECFG (palette 1): per tile, its bytes per row and its rows. One
// definition for every AMX kernel file (matmul_amx.cpp, matmul_amx_i8.cpp, matmul_amx_ext.cpp,
// matmul_amx_q23k.cpp; amx_bf16_groups.h loads the bf16 kernels' layout).
#include <cstdint>

namespace ossa {

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

}  // namespace ossa
