#pragma once
// A tokenizer against a reference file of ids from transformers.js or HF tokenizers
// (tests/tokenizers/make_references*.mjs, ../shared/reference/tokenizer-*.json): a list of
// {"text", "ids", and "ids_parse_special" where parsing special-token texts changes them}.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace flashspec::testing {

// Checks every string's ids as plain text and with special-token texts parsed, and that
// decoding the plain ids gives the text back where `decodes_back(text)` says it should (none
// when it is empty). Returns how many strings had ids of their own with specials parsed.
inline int check_tokenizer_reference(const Tokenizer& t, const nlohmann::json& ref,
                                     const std::function<bool(const std::string&)>& decodes_back = {}) {
  int special = 0;
  for (const auto& r : ref) {
    const std::string text = r.at("text");
    CAPTURE(text);
    const std::vector<int32_t> ids = r.at("ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> got = t.encode(text, false);
    CHECK(got == ids);
    const bool own = r.contains("ids_parse_special");
    special += own;
    CHECK(t.encode(text, false, true) == (own ? r.at("ids_parse_special").get<std::vector<int32_t>>() : ids));
    if (decodes_back && decodes_back(text)) CHECK(t.decode(got) == text);
  }
  return special;
}

}  // namespace flashspec::testing
