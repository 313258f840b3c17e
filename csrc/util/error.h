#pragma once
// Errors that cross into Python. User input (model files, prompts, parameters) is validated at
// the edge and reported with these; a component's contract with its caller is kept by OSSA_CHECK
// (a ContractError, never a crash); invariants of a component's own state use OSSA_ASSERT.
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

// A caller broke a component's contract: the engine or the scheduler was handed something the layer
// above guarantees never reaches it (user input is validated once, by ossa.input_processor). The
// cheap checks at their entry points throw this instead of corrupting state. Python: ValueError,
// its message starting "internal contract: ".
struct ContractError : InputError {
  explicit ContractError(const std::string& what) : InputError("internal contract: " + what) {}
};

}  // namespace ossa

// Throws ContractError(what) unless cond; `what` is only built when the check fails.
#define OSSA_CHECK(cond, what)                      \
  do {                                              \
    if (!(cond)) throw ::ossa::ContractError(what); \
  } while (0)

#define OSSA_ASSERT(cond)                                                                     \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::fprintf(stderr, "ossa: internal assertion failed: %s at %s:%d\n", #cond, __FILE__, \
                   __LINE__);                                                                 \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)
