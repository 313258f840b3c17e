#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based RNG. A draw is a pure function of (key, counter), so the sampler keys it by the
// request's seed and counts by (stream, step): a request's step t gets the same number whatever
// else is in the batch, on any thread, in C++ and in ossa.reference.rng alike.
#include <array>
#include <cstdint>

namespace ossa {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

inline PhiloxCounter philox4x32_10(PhiloxCounter ctr, PhiloxKey key) {
  constexpr uint32_t k_mul0 = 0xD2511F53u, k_mul1 = 0xCD9E8D57u;
  constexpr uint32_t k_weyl0 = 0x9E3779B9u, k_weyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += k_weyl0;
      key[1] += k_weyl1;
    }
    const uint64_t p0 = uint64_t{k_mul0} * ctr[0];
    const uint64_t p1 = uint64_t{k_mul1} * ctr[2];
    const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
  }
  return ctr;
}

// The sampler's uniform draw in [0, 1) for (seed, stream, step):
//   key = (seed lo, seed hi), counter = (step lo, step hi, stream lo, stream hi),
//   u = (((x0 << 32) | x1) >> 11) * 2^-53 with x = philox4x32_10(counter, key).
// `stream` separates requests sharing a seed (e.g. the n > 1 children of one request).
inline double philox_uniform(uint64_t seed, uint64_t stream, uint64_t step) {
  const PhiloxCounter x = philox4x32_10(
      {uint32_t(step), uint32_t(step >> 32), uint32_t(stream), uint32_t(stream >> 32)},
      {uint32_t(seed), uint32_t(seed >> 32)});
  const uint64_t bits = ((uint64_t{x[0]} << 32) | x[1]) >> 11;
  return double(bits) * 0x1.0p-53;
}

}  // namespace ossa
