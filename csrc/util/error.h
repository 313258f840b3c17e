#pragma once
// Errors that cross into Python. User input (model files, prompts, parameters) is validated at
// the edge and reported with these; internal invariants use OSSA_ASSERT.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace ossa {

// A model file or folder that cannot be loaded: corrupt, truncated, unsupported. Python:
// ossa.ModelError.
struct ModelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Invalid user input (parameters, token ids, prompts). Python: ValueError.
struct InputError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

}  // namespace ossa

#define OSSA_ASSERT(cond)                                                                     \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::fprintf(stderr, "ossa: internal assertion failed: %s at %s:%d\n", #cond, __FILE__, \
                   __LINE__);                                                                 \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)
