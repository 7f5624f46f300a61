#include "tokenizer/token_text_rules.h"

#include <algorithm>
#include <string_view>

namespace flashspec {

namespace {

// The texts llama.cpp ends generation on, for the vocabularies flashspec reads. Files name
// at most one end-of-turn token; chat models have several. Gemma 3's chat GGUFs name
// <end_of_turn> as EOS; its <eos> ends generation too (the models' generation_config lists
// both). gpt-oss ends on <|return|> (the answer is done) and <|call|> (a tool call).
constexpr std::string_view kEndTexts[] = {"<|eot_id|>",    "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                          "<|eom_id|>",    "<EOT>",      "<eos>",   "<|return|>",    "<|call|>"};

// Harmony's markers, which llama.cpp retypes as user-defined in any vocabulary that has them.
constexpr std::string_view kHarmonyMarkers[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};

}  // namespace

void apply_token_text_rules(Vocab& v, std::vector<int32_t>& eog) {
  for (std::string_view s : kEndTexts)
    if (const int32_t id = v.find(s); id >= 0) eog.push_back(id);
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());

  auto ends = [&](std::string_view s) {
    const int32_t id = v.find(s);
    return id >= 0 && std::binary_search(eog.begin(), eog.end(), id) ? id : -1;
  };
  // In llama.cpp this runs after the file's EOS/EOT ids joined the list: it removes <|end|>
  // even when the file names it.
  if (const int32_t end = ends("<|end|>"); end >= 0 && ends("<|return|>") >= 0 && ends("<|call|>") >= 0) {
    eog.erase(std::find(eog.begin(), eog.end(), end));
    v.types[size_t(end)] = TokenType::UserDefined;
  }
  for (std::string_view s : kHarmonyMarkers)
    if (const int32_t id = v.find(s); id >= 0) v.types[size_t(id)] = TokenType::UserDefined;
}

}  // namespace flashspec
