#pragma once
// A hybrid model (qwen35, qwen35moe) against llama.cpp's reference for it, kept small in
// the repository (tests/reference/NAME.llamacpp.json, see tests/reference/README.md): per
// prompt its tokens, llama.cpp's 32 greedy tokens, and at every position (each prompt
// position, then each generated step but the last) llama.cpp's 8 largest logits.
//
// On every reference prompt: the prompt tokens and the 32 greedy tokens identical to
// llama.cpp's; at every position the logits of the 8 reference ids within `tolerance` of
// llama.cpp's, and no other id above the 8th reference logit by more than `tolerance` (so
// the top 8 are the same set up to near-ties). The prompt positions come from one
// forward over the whole prompt with every row's logits (as llama.cpp made them), the
// generated steps from the engine's greedy generation. The model runs as it is set up
// (KV types, streamed or resident layers).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "tests/greedy_options.h"
#include "tests/json_file.h"
#include "tokenizer/tokenizer.h"

namespace flashspec::testing {

inline std::string hybrid_reference_path(const std::string& name) {
  return std::string(FS_SOURCE_DIR) + "/tests/reference/" + name + ".llamacpp.json";
}

// The largest differences found, and where the largest one was.
struct HybridDiff {
  double prompt = 0;     // over the prompt positions
  double generated = 0;  // over the generated steps
  std::string where;     // of the largest: prompt, position, id, llama.cpp's value, ours
  double worst() const { return std::max(prompt, generated); }
};

// One position: `got` (n_vocab logits) against llama.cpp's top list [[id, logit], ...].
// Returns the largest difference (the 8 ids' logits, and any other id's excess over the
// 8th logit); `where` names it when it is the largest of `diff` so far.
inline double compare_top(std::span<const float> got, const nlohmann::json& top, const std::string& at,
                          double& worst, std::string& where) {
  double d = 0;
  std::vector<int32_t> ids;
  for (const auto& e : top) {
    const int32_t id = e[0].get<int32_t>();
    const double want = e[1].get<double>();
    REQUIRE(id >= 0);
    REQUIRE(size_t(id) < got.size());
    ids.push_back(id);
    const double diff = std::fabs(double(got[size_t(id)]) - want);
    if (!(diff <= worst)) {  // NaN counts as the worst
      worst = std::isnan(diff) ? INFINITY : diff;
      where = at + " id " + std::to_string(id) + ": llama.cpp " + std::to_string(want) + ", flashspec " +
              std::to_string(got[size_t(id)]);
    }
    d = std::max(d, diff);
  }
  // Nothing outside the reference's top 8 may be above its 8th by more than the tolerance
  // (checked by the caller through the returned excess).
  const double floor = top.back()[1].get<double>();
  std::sort(ids.begin(), ids.end());
  for (size_t i = 0; i < got.size(); ++i) {
    if (double(got[i]) <= floor || std::binary_search(ids.begin(), ids.end(), int32_t(i))) continue;
    const double excess = double(got[i]) - floor;
    if (excess > worst) {
      worst = excess;
      where = at + " id " + std::to_string(i) + " (not in llama.cpp's top " + std::to_string(top.size()) +
              ", whose last is " + std::to_string(floor) + "): flashspec " + std::to_string(got[i]);
    }
    d = std::max(d, excess);
  }
  return d;
}

// `label`: how the message names the run (the model, and what is particular about it).
// `near_ties`: the greedy tokens may part from llama.cpp's where llama.cpp's own two best
// logits are within the tolerance (then the rest of that prompt is not compared): for
// models where last-bit differences are amplified by design (gpt-oss's experts read
// 8-bit-quantized activations, whose rounding turns an ulp into a step of 1/127).
inline HybridDiff check_against_hybrid_reference(Model& model, const std::string& name,
                                                 const std::string& label, double tolerance,
                                                 bool near_ties = false) {
  const Tokenizer tok = Tokenizer::from_gguf(model.file());
  const nlohmann::json ref = read_json(hybrid_reference_path(name));
  const nlohmann::json& prompts = ref.at("prompts");
  REQUIRE(prompts.size() >= 8);  // tiny-gemma3 has a ninth, past 600 tokens
  const int64_t n_vocab = model.config().n_vocab;
  REQUIRE(ref.at("n_vocab").get<int64_t>() == n_vocab);
  HybridDiff diff;
  double worst = 0;
  for (size_t pi = 0; pi < prompts.size(); ++pi) {
    const nlohmann::json& r = prompts[pi];
    const std::string prompt = r.at("prompt");
    CAPTURE(label);
    CAPTURE(pi);
    CAPTURE(prompt);
    const std::vector<int32_t> ids = tok.encode(prompt, true);
    const std::vector<int32_t> want_ids = r.at("prompt_tokens").get<std::vector<int32_t>>();
    CHECK(ids == want_ids);
    const std::vector<int32_t> want_tokens = r.at("greedy_tokens").get<std::vector<int32_t>>();
    REQUIRE(want_tokens.size() == 32);
    const nlohmann::json& top = r.at("top");
    const size_t n = want_ids.size();
    REQUIRE(top.size() == n + want_tokens.size() - 1);

    // Every prompt position, in one pass over the whole prompt (llama.cpp's one batch).
    SequenceCache cache = model.make_cache(int64_t(n));
    std::vector<float> all;
    model.forward_causal(want_ids, cache, LogitRows::All, all);
    REQUIRE(all.size() == n * size_t(n_vocab));
    for (size_t p = 0; p < n; ++p) {
      const std::span<const float> row(all.data() + p * size_t(n_vocab), size_t(n_vocab));
      const std::string at = "prompt " + std::to_string(pi) + " position " + std::to_string(p);
      diff.prompt = std::max(diff.prompt, compare_top(row, top[p], at, worst, diff.where));
    }

    // The generated steps: logits of each of the 32 steps; step k is position n - 1 + k
    // (the last prompt position draws the first token).
    const GenerationResult g = generate_target_only(model, want_ids, greedy(32, 32));
    const size_t parted = size_t(std::mismatch(g.tokens.begin(), g.tokens.end(), want_tokens.begin()).first - g.tokens.begin());
    if (near_ties && parted < want_tokens.size()) {
      const nlohmann::json& at = top[n - 1 + parted];
      const double gap = at[0][1].get<double>() - at[1][1].get<double>();
      CAPTURE(parted);
      CHECK_MESSAGE(gap <= tolerance, "greedy tokens part from llama.cpp's where its top two are " << gap << " apart");
      MESSAGE(label << ": prompt " << pi << " parts from llama.cpp at generated token " << parted
                    << ", a near-tie there (" << gap << ")");
    } else {
      CHECK(g.tokens == want_tokens);
    }
    REQUIRE(g.logits.size() == 32);
    // The first step's row is the last prompt row: the same computation, bit for bit.
    CHECK(std::equal(g.logits[0].begin(), g.logits[0].end(), all.begin() + (n - 1) * size_t(n_vocab)));
    for (size_t k = 0; k < g.logits.size(); ++k) {
      // Past the first token that differs the two runs see different inputs: compare
      // only while the tokens fed so far agree.
      if (k > 0 && g.tokens[k - 1] != want_tokens[k - 1]) break;
      const std::string at = "prompt " + std::to_string(pi) + " generated step " + std::to_string(k) +
                             " (position " + std::to_string(n - 1 + k) + ")";
      diff.generated = std::max(diff.generated, compare_top(g.logits[k], top[n - 1 + k], at, worst, diff.where));
    }
  }
  MESSAGE(label << ": largest logit difference to llama.cpp " << diff.worst() << " (prompt positions "
                << diff.prompt << ", generated steps " << diff.generated << "), at " << diff.where);
  CHECK(diff.worst() <= tolerance);
  return diff;
}

}  // namespace flashspec::testing
