// ossa._core sampler bindings: SamplingParams (plain data), Sampler.sample / .logprobs over a
// float32 numpy batch, and the RNG and exp used by the reference twin's equality tests.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "sampling/sampler.h"
#include "util/error.h"
#include "util/philox.h"

namespace nb = nanobind;

namespace {

using Logits = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using Masks = nb::ndarray<const int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

template <typename T>
nb::ndarray<nb::numpy, T> to_numpy(std::vector<T>&& v, std::initializer_list<size_t> shape) {
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(heap->data(), shape, owner);
}

nb::tuple results_to_numpy(const std::vector<ossa::SampleResult>& res) {
  const size_t n = res.size(), k = ossa::k_max_logprobs;
  std::vector<int32_t> tokens(n), n_top(n), top_ids(n * k, -1);
  std::vector<float> logprobs(n), top_logprobs(n * k, 0.0f);
  for (size_t r = 0; r < n; ++r) {
    tokens[r] = res[r].token;
    logprobs[r] = res[r].logprob;
    n_top[r] = res[r].n_top;
    for (int j = 0; j < res[r].n_top; ++j) {
      top_ids[r * k + j] = res[r].top_ids[j];
      top_logprobs[r * k + j] = res[r].top_logprobs[j];
    }
  }
  return nb::make_tuple(to_numpy(std::move(tokens), {n}), to_numpy(std::move(logprobs), {n}),
                        to_numpy(std::move(top_ids), {n, k}),
                        to_numpy(std::move(top_logprobs), {n, k}), to_numpy(std::move(n_top), {n}));
}

}  // namespace

void bind_sampling(nb::module_& m) {
  using ossa::SamplingParams;
  nb::class_<SamplingParams>(
      m, "SamplingParams",
      "The C++ sampler's per-request parameters (build with ossa.SamplingParams.to_core).")
      .def(nb::init<>())
      .def_rw("temperature", &SamplingParams::temperature)
      .def_rw("top_k", &SamplingParams::top_k)
      .def_rw("top_p", &SamplingParams::top_p)
      .def_rw("min_p", &SamplingParams::min_p)
      .def_rw("repetition_penalty", &SamplingParams::repetition_penalty)
      .def_rw("frequency_penalty", &SamplingParams::frequency_penalty)
      .def_rw("presence_penalty", &SamplingParams::presence_penalty)
      .def_rw("seed", &SamplingParams::seed, nb::arg().none())
      .def_rw("logit_bias", &SamplingParams::logit_bias)
      .def_rw("allowed_token_ids", &SamplingParams::allowed_token_ids)
      .def_rw("bad_words", &SamplingParams::bad_words)
      .def_rw("min_tokens", &SamplingParams::min_tokens)
      .def_rw("stop_token_ids", &SamplingParams::stop_token_ids)
      .def_rw("eos_token_ids", &SamplingParams::eos_token_ids)
      .def_rw("ignore_eos", &SamplingParams::ignore_eos)
      .def_rw("logprobs", &SamplingParams::logprobs);
  m.def("validate_sampling_params", &ossa::validate_sampling_params, nb::arg("params"),
        nb::arg("vocab"), "Raise ValueError naming the first field out of range.");
  m.attr("MAX_LOGPROBS") = ossa::k_max_logprobs;

  nb::class_<ossa::Sampler>(m, "Sampler", "The batch sampler; holds per-thread scratch buffers.")
      .def(nb::init<>())
      .def(
          "sample",
          [](ossa::Sampler& self, Logits logits, const std::vector<const SamplingParams*>& params,
             const std::vector<std::vector<int32_t>>& prompt_token_ids,
             const std::vector<std::vector<int32_t>>& output_token_ids,
             const std::vector<uint64_t>& seeds, const std::vector<uint64_t>& streams,
             const std::vector<uint64_t>& steps, std::optional<Masks> token_masks) {
            const size_t n = logits.shape(0);
            const size_t words = (logits.shape(1) + 31) / 32;
            if (token_masks && (token_masks->shape(0) != n || token_masks->shape(1) != words))
              throw ossa::InputError(
                  "Sampler.sample: token_masks must be [n_rows, ceil(vocab / 32)] = [" +
                  std::to_string(n) + ", " + std::to_string(words) + "]");
            for (size_t len : {params.size(), prompt_token_ids.size(), output_token_ids.size(),
                               seeds.size(), streams.size(), steps.size()})
              if (len != n)
                throw ossa::InputError("Sampler.sample: every per-row list needs " +
                                       std::to_string(n) + " entries (one per logits row), got " +
                                       std::to_string(len));
            std::vector<ossa::RowInput> rows(n);
            for (size_t r = 0; r < n; ++r) {
              if (params[r] == nullptr)
                throw ossa::InputError("Sampler.sample: params must not be None");
              rows[r] = {params[r],
                         prompt_token_ids[r],
                         output_token_ids[r],
                         seeds[r],
                         streams[r],
                         steps[r],
                         token_masks
                             ? reinterpret_cast<const uint32_t*>(token_masks->data()) + r * words
                             : nullptr};
            }
            std::vector<ossa::SampleResult> out(n);
            {
              nb::gil_scoped_release release;
              self.sample(logits.data(), int(n), int(logits.shape(1)), rows, out);
            }
            return results_to_numpy(out);
          },
          nb::arg("logits"), nb::arg("params"), nb::arg("prompt_token_ids"),
          nb::arg("output_token_ids"), nb::arg("seeds"), nb::arg("streams"), nb::arg("steps"),
          nb::arg("token_masks") = nb::none(),
          "Sample one token per row (token_masks: optional int32 [n_rows, ceil(vocab / 32)] "
          "allowed-token\n"
          "bits, llguidance's layout). Returns (tokens, logprobs, top_ids, top_logprobs, n_top); "
          "top_* are\n"
          "[n_rows, MAX_LOGPROBS] with n_top valid entries per row; logprobs is NaN where not "
          "requested.")
      .def(
          "logprobs",
          [](ossa::Sampler& self, Logits logits, const std::vector<int32_t>& token_ids, int top_n) {
            const size_t n = logits.shape(0);
            std::vector<ossa::SampleResult> out(n);
            {
              nb::gil_scoped_release release;
              self.logprobs(logits.data(), int(n), int(logits.shape(1)), token_ids, top_n, out);
            }
            return results_to_numpy(out);
          },
          nb::arg("logits"), nb::arg("token_ids"), nb::arg("top_n"),
          "Raw logprob of token_ids[r] in row r and the top_n alternatives (prompt_logprobs).");

  m.def("philox4x32_10", &ossa::philox4x32_10, nb::arg("counter"), nb::arg("key"));
  m.def("philox_uniform", &ossa::philox_uniform, nb::arg("seed"), nb::arg("stream"),
        nb::arg("step"));
  m.def(
      "exp_ref",
      [](nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu> z) {
        std::vector<double> out(z.shape(0));
        ossa::exp_ref(z.data(), out.data(), int(out.size()));
        return to_numpy(std::move(out), {z.shape(0)});
      },
      nb::arg("z"), "The sampler's exp for z <= 0 (for the reference twin's tests).");
}
