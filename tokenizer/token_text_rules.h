#pragma once
// What llama.cpp (b8967, llama_vocab::impl::load) decides about tokens by their text alone,
// whatever the file's metadata says, so that generation stops and prints as it does there:
//   - the tokens that end generation wherever a vocabulary has them (<|eot_id|>, <|im_end|>,
//     <|return|>, Gemma 4's <turn|>, ...), which count as control tokens whatever their type;
//   - in a vocabulary with Gemma 4's <|tool_response>, "</s>" is a normal token that does
//     not end generation (llama.cpp drops it from its end texts there);
//   - gpt-oss's o200k_harmony vocabulary: <|end|> ends a message, not the generation, when
//     <|return|> and <|call|> are there to end it; that <|end|> and the harmony markers
//     <|start|>, <|channel|>, <|message|>, <|constrain|> count as user-defined tokens, so
//     they print in the output text (the harmony format is parsed from it) and are matched
//     in plain text too, as llama.cpp matches them.
#include <cstdint>
#include <vector>

#include "tokenizer/vocab.h"

namespace flashspec {

// Adds the ids of the end-of-generation texts to `eog` (which holds the ids the file names),
// applies the harmony rule to `eog` and to `v`'s types; `eog` comes back sorted, unique.
void apply_token_text_rules(Vocab& v, std::vector<int32_t>& eog);

}  // namespace flashspec
