#pragma once
// Can this draft speak for this target? Checked before any work: same tokenizer model,
// same special tokens, identical token texts on the shared id range, and vocabulary
// sizes within 128 of each other (the smaller one's logits are padded).
#include <cstdint>
#include <string>

namespace flashspec {

class Tokenizer;

inline constexpr int32_t kMaxVocabDifference = 128;

// Error "draft D and target T: <first mismatch>" when they are not compatible.
void check_vocab_compatible(const Tokenizer& draft, const std::string& draft_path,
                            const Tokenizer& target, const std::string& target_path);

}  // namespace flashspec
