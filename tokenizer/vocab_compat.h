#pragma once
// Can this draft speak for this target? Checked before any work: same tokenizer model
// and pre-tokenizer, same special tokens and BOS/EOS flags, identical token texts and
// types on the shared id range, the same end-of-generation tokens there, and vocabulary
// sizes within 128 of each other (Qwen2.5-0.5B has 151936 ids, 7B 152064: the draft
// never proposes ids the target lacks, and the target's extra ids reach the draft as 0).
#include <cstdint>
#include <string>

namespace flashspec {

class Tokenizer;

inline constexpr int32_t kMaxVocabDifference = 128;

// Error "draft D and target T: <first mismatch>" when they are not compatible.
void check_vocab_compatible(const Tokenizer& draft, const std::string& draft_path,
                            const Tokenizer& target, const std::string& target_path);

}  // namespace flashspec
