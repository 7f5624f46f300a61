#include "tokenizer/token_text_rules.h"

#include <algorithm>
#include <string_view>

namespace flashspec {

namespace {

// The texts llama.cpp ends generation on, for the vocabularies flashspec reads. Files name
// at most one end-of-turn token; chat models have several. Gemma 3's chat GGUFs name
// <end_of_turn> as EOS; its <eos> ends generation too (the models' generation_config lists
// both). gpt-oss ends on <|return|> (the answer is done) and <|call|> (a tool call).
// Gemma 4 ends on <eos>, <turn|> (end of turn) and <|tool_response> (a tool call awaits
// its answer).
constexpr std::string_view kEndTexts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>",   "<end_of_turn>",    "<|endoftext|>",
                                          "<|eom_id|>", "<EOT>",      "<eos>",     "<|return|>",       "<|call|>",
                                          "<turn|>",    "<|tool_response>"};

// Harmony's markers, which llama.cpp retypes as user-defined in any vocabulary that has them.
constexpr std::string_view kHarmonyMarkers[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};

}  // namespace

void apply_token_text_rules(Vocab& v, std::vector<int32_t>& eog) {
  for (std::string_view s : kEndTexts) {
    const int32_t id = v.find(s);
    if (id < 0) continue;
    eog.push_back(id);
    // llama.cpp adds the control attribute to those that lack it (Gemma 4's user-defined
    // <|tool_response>): plain text unless specials are parsed, printed as nothing.
    v.types[size_t(id)] = TokenType::Control;
  }
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
  // llama.cpp ends generation on "</s>" too, but not in a vocabulary that ends on
  // <|tool_response> (Gemma 4, where "</s>" is an HTML tag): there it is a normal token,
  // whatever the file says.
  if (ends("<|tool_response>") >= 0)
    if (const int32_t s = v.find("</s>"); s >= 0) {
      if (auto it = std::find(eog.begin(), eog.end(), s); it != eog.end()) eog.erase(it);
      v.types[size_t(s)] = TokenType::Normal;
    }
}

}  // namespace flashspec
