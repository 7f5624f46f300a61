#pragma once
// A model against llama.cpp's reference file for it (reference/NAME.llamacpp.json): on
// every reference prompt, the prompt tokens and 32 greedy tokens identical to llama.cpp's
// and the logits at the 2 stored positions within `tolerance`. The model runs as it is
// set up (KV types, streamed or resident layers).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model/model.h"
#include "tests/fixtures.h"
#include "tests/greedy_options.h"
#include "tests/json_file.h"
#include "tokenizer/tokenizer.h"

namespace flashspec::testing {

// `label`: how the message names the run (the model, and what is particular about it).
inline void check_against_llamacpp(Model& model, const std::string& name, const std::string& label,
                                   double tolerance) {
  const Tokenizer tok = Tokenizer::from_gguf(model.file());
  const nlohmann::json refs = read_json(reference_path(name));
  REQUIRE(refs.size() == 8);
  double worst = 0;
  for (const auto& r : refs) {
    const std::string prompt = r["prompt"];
    CAPTURE(prompt);
    const std::vector<int32_t> ids = tok.encode(prompt, true);
    CHECK(ids == r["prompt_tokens"].get<std::vector<int32_t>>());
    const GenerationResult g = generate_target_only(model, ids, greedy(32, 2));
    CHECK(g.tokens == r["greedy_tokens"].get<std::vector<int32_t>>());
    REQUIRE(g.logits.size() == 2);
    for (size_t p = 0; p < 2; ++p) {
      const std::vector<float> want = r["logits"][p].get<std::vector<float>>();
      REQUIRE(want.size() == g.logits[p].size());
      for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, double(std::fabs(want[i] - g.logits[p][i])));
    }
  }
  MESSAGE(label << ": largest logit difference to llama.cpp " << worst);
  CHECK(worst <= tolerance);
}

}  // namespace flashspec::testing
