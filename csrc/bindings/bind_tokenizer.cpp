// ossa._core.Tokenizer and ossa._core.Detokenizer. The tokenizer is held by std::shared_ptr so the
// C++ engine can share it; encode/encode_batch/decode release the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <omp.h>

#include <exception>

#include "tokenizer/detokenizer.h"
#include "tokenizer/normalize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace nb = nanobind;
using ossa::Tokenizer;
using ossa::TokenizerSpec;

namespace {

// str (UTF-8 encoded; lone surrogates are a ValueError) or bytes (validated later by encode).
std::string text_arg(nb::handle obj) {
  if (PyBytes_Check(obj.ptr()))
    return std::string(PyBytes_AS_STRING(obj.ptr()), PyBytes_GET_SIZE(obj.ptr()));
  if (PyUnicode_Check(obj.ptr())) {
    Py_ssize_t size = 0;
    const char* data = PyUnicode_AsUTF8AndSize(obj.ptr(), &size);
    if (!data) {
      PyErr_Clear();
      throw ossa::InputError(
          "text contains a lone surrogate code point, which has no UTF-8 encoding");
    }
    return std::string(data, static_cast<size_t>(size));
  }
  throw nb::type_error("text must be str or bytes");
}

nb::list to_list(const std::vector<int32_t>& ids) {
  nb::list out;
  for (int32_t id : ids) out.append(id);
  return out;
}

template <typename T>
T get(const nb::dict& d, const char* key, T dflt) {
  if (!d.contains(key)) return dflt;
  return nb::cast<T>(d[key]);
}

// The spec as a dict with the field names of ossa.reference.tokenizer.TokenizerSpec.
TokenizerSpec spec_from_dict(const nb::dict& d) {
  TokenizerSpec s;
  std::string model = get<std::string>(d, "model", "byte_level_bpe");
  if (model == "byte_level_bpe")
    s.model = TokenizerSpec::Model::BYTE_LEVEL_BPE;
  else if (model == "sentencepiece_bpe")
    s.model = TokenizerSpec::Model::SENTENCEPIECE_BPE;
  else
    throw ossa::ModelError("unsupported tokenizer model '" + model + "'");
  s.vocab = get<std::vector<std::string>>(d, "vocab", {});
  for (const auto& m : get<std::vector<std::vector<std::string>>>(d, "merges", {})) {
    if (m.size() != 2) throw ossa::ModelError("a merge must have two parts");
    s.merges.emplace_back(m[0], m[1]);
  }
  s.scores = get<std::vector<float>>(d, "scores", {});
  if (d.contains("added_tokens")) {
    for (nb::handle h : nb::cast<nb::list>(d["added_tokens"])) {
      nb::dict t = nb::cast<nb::dict>(h);
      ossa::AddedTokenSpec a;
      a.id = nb::cast<int32_t>(t["id"]);
      a.content = nb::cast<std::string>(t["content"]);
      a.special = get<bool>(t, "special", true);
      a.lstrip = get<bool>(t, "lstrip", false);
      a.rstrip = get<bool>(t, "rstrip", false);
      a.normalized = get<bool>(t, "normalized", false);
      a.single_word = get<bool>(t, "single_word", false);
      s.added_tokens.push_back(a);
    }
  }
  for (const auto& step : get<std::vector<std::string>>(d, "pre_tokenizer", {})) {
    ossa::PreTokenizerStep p;
    if (step == "digits_individual")
      p.kind = ossa::PreTokenizerStep::DIGITS_INDIVIDUAL;
    else if (step == "digits_contiguous")
      p.kind = ossa::PreTokenizerStep::DIGITS_CONTIGUOUS;
    else if (step == "gpt2")
      p.pattern = ossa::SplitPattern::GPT2;
    else if (step == "llama3")
      p.pattern = ossa::SplitPattern::LLAMA3;
    else if (step == "qwen2")
      p.pattern = ossa::SplitPattern::QWEN2;
    else if (step == "o200k")
      p.pattern = ossa::SplitPattern::O200K;
    else if (step == "tekken")
      p.pattern = ossa::SplitPattern::TEKKEN;
    else if (step == "qwen35")
      p.pattern = ossa::SplitPattern::QWEN35;
    else if (step == "bloom")
      p.pattern = ossa::SplitPattern::BLOOM;
    else
      throw ossa::ModelError("unsupported pre-tokenizer step '" + step + "'");
    s.pre_tokenizer.push_back(p);
  }
  s.add_prefix_space = get<bool>(d, "add_prefix_space", false);
  std::string prefix = get<std::string>(d, "prefix", "never");
  if (prefix == "never")
    s.prefix = TokenizerSpec::Prefix::NEVER;
  else if (prefix == "first")
    s.prefix = TokenizerSpec::Prefix::FIRST;
  else if (prefix == "always")
    s.prefix = TokenizerSpec::Prefix::ALWAYS;
  else if (prefix == "prepend")
    s.prefix = TokenizerSpec::Prefix::PREPEND;
  else
    throw ossa::ModelError("unsupported prefix rule '" + prefix + "'");
  s.metaspace_split = get<bool>(d, "metaspace_split", false);
  s.byte_fallback = get<bool>(d, "byte_fallback", false);
  s.fuse_unk = get<bool>(d, "fuse_unk", false);
  s.ignore_merges = get<bool>(d, "ignore_merges", false);
  s.nfc = get<bool>(d, "nfc", false);
  s.unk_id = get<int32_t>(d, "unk_id", -1);
  s.prefix_ids = get<std::vector<int32_t>>(d, "prefix_ids", {});
  s.suffix_ids = get<std::vector<int32_t>>(d, "suffix_ids", {});
  s.bos_id = get<int32_t>(d, "bos_id", -1);
  s.eos_id = get<int32_t>(d, "eos_id", -1);
  s.pad_id = get<int32_t>(d, "pad_id", -1);
  s.eos_ids = get<std::vector<int32_t>>(d, "eos_ids", {});
  s.strip_leading_space = get<bool>(d, "strip_leading_space", false);
  return s;
}

nb::object optional_id(int32_t id) {
  return id >= 0 ? nb::object(nb::int_(id)) : nb::object(nb::none());
}

}  // namespace

void bind_tokenizer(nb::module_& m) {
  nb::class_<Tokenizer>(m, "Tokenizer", "A BPE tokenizer (byte-level or SentencePiece-style).")
      .def_static(
          "from_gguf", [](const std::string& path) { return Tokenizer::from_gguf(path); },
          nb::arg("path"), "The tokenizer described by a GGUF file's metadata.")
      .def_static(
          "from_spec",
          [](const nb::dict& spec) { return std::make_shared<Tokenizer>(spec_from_dict(spec)); },
          nb::arg("spec"),
          "A tokenizer from a spec dict (see ossa.reference.tokenizer.TokenizerSpec).")
      .def(
          "encode",
          [](const Tokenizer& t, nb::handle text, bool add_special_tokens) {
            std::string s = text_arg(text);
            std::vector<int32_t> ids;
            {
              nb::gil_scoped_release release;
              t.encode_into(s, add_special_tokens, ids);
            }
            return to_list(ids);
          },
          nb::arg("text"), nb::arg("add_special_tokens") = true)
      .def(
          "encode_batch",
          [](const Tokenizer& t, nb::list texts, bool add_special_tokens, int num_threads) {
            std::vector<std::string> inputs;
            inputs.reserve(texts.size());
            for (nb::handle h : texts) inputs.push_back(text_arg(h));
            std::vector<std::vector<int32_t>> outputs(inputs.size());
            std::string error;
            {
              nb::gil_scoped_release release;
              int threads = num_threads > 0 ? num_threads : omp_get_max_threads();
              long n = static_cast<long>(inputs.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
              for (long i = 0; i < n; ++i) {
                try {
                  t.encode_into(inputs[i], add_special_tokens, outputs[i]);
                } catch (const std::exception& e) {
#pragma omp critical
                  if (error.empty()) error = "text " + std::to_string(i) + ": " + e.what();
                }
              }
            }
            if (!error.empty()) throw ossa::InputError(error);
            nb::list out;
            for (const auto& ids : outputs) out.append(to_list(ids));
            return out;
          },
          nb::arg("texts"), nb::arg("add_special_tokens") = true, nb::arg("num_threads") = 0,
          "Encodes texts in parallel (OpenMP threads, GIL released).")
      .def(
          "decode",
          [](const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special_tokens) {
            std::string s;
            {
              nb::gil_scoped_release release;
              s = t.decode(ids, skip_special_tokens);
            }
            return s;
          },
          nb::arg("ids"), nb::arg("skip_special_tokens") = false)
      .def("token_bytes",
           [](const Tokenizer& t, int32_t id) {
             const std::string& b = t.token_bytes(id);
             return nb::bytes(b.data(), b.size());
           })
      .def("id_to_token",
           [](const Tokenizer& t, int32_t id) -> nb::object {
             const std::string& s = t.token_string(id);
             if (s.empty()) return nb::none();
             return nb::str(s.data(), s.size());
           })
      .def("token_to_id",
           [](const Tokenizer& t, const std::string& s) { return optional_id(t.token_to_id(s)); })
      .def("is_special", &Tokenizer::is_special)
      .def_prop_ro("vocab_size", &Tokenizer::vocab_size)
      .def_prop_ro("bos_token_id", [](const Tokenizer& t) { return optional_id(t.bos_id()); })
      .def_prop_ro("eos_token_id", [](const Tokenizer& t) { return optional_id(t.eos_id()); })
      .def_prop_ro("pad_token_id", [](const Tokenizer& t) { return optional_id(t.pad_id()); })
      .def_prop_ro("eos_token_ids", [](const Tokenizer& t) { return t.eos_ids(); })
      .def_prop_ro("add_bos", [](const Tokenizer& t) { return !t.spec().prefix_ids.empty(); });

  nb::class_<ossa::IncrementalDetokenizer>(
      m, "Detokenizer", "Streaming detokenizer: push ids, get complete UTF-8 text deltas.")
      .def(nb::init<std::shared_ptr<const Tokenizer>, bool>(), nb::arg("tokenizer"),
           nb::arg("skip_special_tokens") = false)
      .def("push",
           [](ossa::IncrementalDetokenizer& d, int32_t id) {
             std::string_view s = d.push(id);
             return nb::str(s.data(), s.size());
           })
      .def("flush",
           [](ossa::IncrementalDetokenizer& d) {
             std::string_view s = d.flush();
             return nb::str(s.data(), s.size());
           })
      .def("reset", &ossa::IncrementalDetokenizer::reset)
      .def_prop_ro("pending_bytes", &ossa::IncrementalDetokenizer::pending_bytes);

  m.attr("unicode_version") = ossa::unicode_version();
  m.def(
      "unicode_nfc",
      [](const std::string& text) {
        if (ossa::utf8_valid_prefix(text) != text.size())
          throw ossa::InputError("text is not valid UTF-8");
        return ossa::nfc(text);
      },
      nb::arg("text"),
      "Unicode normalization form C of the text (the tokenizer's NFC normalizer).");
}
