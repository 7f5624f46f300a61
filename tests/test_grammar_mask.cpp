// Token masks (grammar/token_masker.h) on a real vocabulary, the Qwen3 tokenizer of
// tiny-qwen3.gguf (151k tokens): every mask equals the brute-force answer (each token's
// bytes fed to a separate matcher), along documents tokenized as the model would, and along
// random walks that pick any allowed token; forced tokens are exactly the states with one
// allowed token.
#include <doctest/doctest.h>

#include <bit>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/token_masker.h"
#include "tests/fixtures.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::grammar;
using flashspec::testing::model_path;

namespace {

const Tokenizer& qwen3() {
  static const Tokenizer t = Tokenizer::from_gguf(GgufFile::open(model_path("tiny-qwen3")));
  return t;
}

const std::shared_ptr<const TokenTrie>& qwen3_vocab() {
  static const std::shared_ptr<const TokenTrie> v = TokenTrie::from_tokenizer(qwen3());
  return v;
}

// The allowed tokens after `text`, the slow way: a fresh matcher, every token tried.
std::vector<uint64_t> brute_force_mask(Matcher& fresh, const TokenTrie& vocab, std::string_view text) {
  std::vector<uint64_t> bits((size_t(vocab.n_vocab()) + 63) / 64, 0);
  const MatchState s = fresh.accept_bytes(fresh.start(), text);
  REQUIRE_FALSE(s.dead());
  for (int32_t id = 0; id < vocab.n_vocab(); ++id) {
    bool ok = false;
    if (vocab.is_end_of_generation(id))
      ok = fresh.can_end(s);
    else if (!vocab.bytes(id).empty())
      ok = !fresh.accept_bytes(s, vocab.bytes(id)).dead();
    if (ok) bits[size_t(id) >> 6] |= uint64_t(1) << (id & 63);
  }
  return bits;
}

size_t popcount(const std::vector<uint64_t>& bits) {
  size_t n = 0;
  for (uint64_t w : bits) n += size_t(std::popcount(w));
  return n;
}

// Checks the mask of the state after `text` against brute force, and forced_tokens
// against the mask. Returns the mask.
std::vector<uint64_t> check_state(TokenMasker& tm, Matcher& fresh, MatchState s, const std::string& text) {
  std::vector<uint64_t> mask(tm.mask_words());
  tm.fill_mask(s, mask);
  const std::vector<uint64_t> expected = brute_force_mask(fresh, tm.vocab(), text);
  CAPTURE(text);
  CHECK(mask == expected);
  const std::vector<int32_t> forced = tm.forced_tokens(s, 1);
  CHECK(forced.size() == (popcount(mask) == 1 ? 1u : 0u));
  // A second time: the same answer from the state cache.
  std::vector<uint64_t> again(tm.mask_words());
  tm.fill_mask(s, again);
  CHECK(again == mask);
  return mask;
}

bool has(const std::vector<uint64_t>& bits, int32_t id) { return (bits[size_t(id) >> 6] >> (id & 63)) & 1; }

// Walks `doc` as the model's tokens, checking the mask before each token and that the
// token is in it; at the end, end-of-generation is allowed.
void check_document(TokenMasker& tm, const std::string& doc) {
  CAPTURE(doc);
  Matcher fresh(tm.matcher().grammar_ptr());
  MatchState s = tm.start();
  std::string text;
  for (int32_t id : qwen3().encode(doc, false)) {
    const std::vector<uint64_t> mask = check_state(tm, fresh, s, text);
    CHECK(has(mask, id));
    s = tm.accept_token(s, id);
    REQUIRE_FALSE(s.dead());
    text += tm.vocab().bytes(id);
  }
  const std::vector<uint64_t> mask = check_state(tm, fresh, s, text);
  CHECK(tm.matcher().can_end(s));
  for (int32_t eog : qwen3().end_of_generation()) CHECK(has(mask, eog));
}

void check_document(const std::shared_ptr<const Grammar>& g, const std::string& doc, const MaskOptions& opt = {}) {
  TokenMasker tm(g, qwen3_vocab(), opt);
  check_document(tm, doc);
}

// From the start, `steps` times a random allowed token, checking every mask on the way.
void random_walk(const std::shared_ptr<const Grammar>& g, uint32_t seed, int steps) {
  TokenMasker tm(g, qwen3_vocab());
  Matcher fresh(g);
  std::mt19937 rng(seed);
  MatchState s = tm.start();
  std::string text;
  for (int i = 0; i < steps; ++i) {
    const std::vector<uint64_t> mask = check_state(tm, fresh, s, text);
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < tm.vocab().n_vocab(); ++id)
      if (has(mask, id) && !tm.vocab().is_end_of_generation(id)) allowed.push_back(id);
    if (allowed.empty()) break;
    const int32_t id = allowed[rng() % allowed.size()];
    s = tm.accept_token(s, id);
    REQUIRE_FALSE(s.dead());
    text += tm.vocab().bytes(id);
  }
}

const char* kSchema = R"({"type": "object", "properties": {
    "name": {"type": "string"},
    "kind": {"enum": ["circle", "square"]},
    "size": {"type": "integer", "minimum": 1, "maximum": 500},
    "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}, "maxItems": 3},
    "extra": {"anyOf": [{"type": "number"}, {"type": "null"}]}},
  "required": ["name", "kind", "size", "tags"], "additionalProperties": false})";

}  // namespace

TEST_CASE("token mask: the vocabulary trie holds every text token once") {
  const TokenTrie& v = *qwen3_vocab();
  CHECK(v.n_vocab() == qwen3().n_vocab());
  CHECK(v.n_vocab() > 150000);
  size_t tokens = 0;
  for (const TokenTrie::Node& nd : v.nodes()) tokens += nd.tok_here;
  CHECK(tokens == v.sorted_tokens().size());
  for (int32_t eog : qwen3().end_of_generation()) CHECK(v.is_end_of_generation(eog));
  const auto [id, len] = v.longest_prefix("{\"name\": 1}");
  REQUIRE(id >= 0);
  CHECK(v.bytes(id) == std::string("{\"name\": 1}").substr(0, len));
  CHECK(len >= 2);
}

TEST_CASE("token mask: equals brute force along a JSON document (json_object)") {
  const auto g = Grammar::compile(json_object_grammar());
  check_document(g, R"({"name": "Zoë ☃", "tags": ["a", "b c"], "n": -12.5e3, "ok": true, "nested": {"x": null, "y": [[], {}]}})");
}

TEST_CASE("token mask: equals brute force along a JSON Schema document") {
  const auto g = compile_json_schema(std::string_view(kSchema));
  check_document(g, R"({"name": "Ann \"the\" first", "kind": "square", "size": 250, "tags": ["red", "x"], "extra": 0.25})");
  check_document(g, R"({"name":"","kind":"circle","size":1,"tags":[]})");
}

TEST_CASE("token mask: the whole-trie walk agrees too (no context-free caches)") {
  MaskOptions none;
  none.max_node_masks = 0;
  none.max_state_masks = 0;
  const auto g = compile_json_schema(std::string_view(kSchema));
  check_document(g, R"({"name": "b", "kind": "circle", "size": 42, "tags": ["q"]})", none);
}

TEST_CASE("token mask: maskers of one grammar share its node masks") {
  const auto cache = std::make_shared<NodeMaskCache>(compile_json_schema(std::string_view(kSchema)), qwen3_vocab());
  TokenMasker first(cache);
  check_document(first, R"({"name": "x", "kind": "circle", "size": 7, "tags": ["a"]})");
  CHECK(first.stats().node_masks > 0);
  TokenMasker second(cache);
  check_document(second, R"({"name": "y z", "kind": "circle", "size": 8, "tags": ["b"]})");
  CHECK(second.stats().node_masks == 0);
}

TEST_CASE("token mask: equals brute force along random walks") {
  random_walk(Grammar::compile(json_object_grammar()), 1, 24);
  random_walk(compile_json_schema(std::string_view(kSchema)), 2, 24);
  random_walk(compile_gbnf(R"(
root ::= "<answer>" (word " ")* word "</answer>"
word ::= [a-zA-Z\u00c0-\u024f]+ | [0-9]{1,3}
)"),
              3, 16);
}

TEST_CASE("token mask: end-of-generation only where the grammar may end, forced tokens") {
  const auto g = compile_gbnf(R"(root ::= "{" "}")");
  TokenMasker tm(g, qwen3_vocab());
  std::vector<uint64_t> mask(tm.mask_words());
  tm.fill_mask(tm.start(), mask);
  for (int32_t eog : qwen3().end_of_generation()) CHECK_FALSE(has(mask, eog));
  // "{" and "{}" both fit at the start: nothing is forced there.
  CHECK(tm.forced_tokens(tm.start()).empty());
  CHECK(tm.forced_bytes(tm.start()) == "{}");
  const MatchState open = tm.accept_token(tm.start(), qwen3().find_token("{"));
  REQUIRE_FALSE(open.dead());
  const std::vector<int32_t> forced = tm.forced_tokens(open);
  REQUIRE(forced.size() == 1);  // "}", then several end-of-generation tokens: not forced
  CHECK(tm.vocab().bytes(forced[0]) == "}");
  const MatchState done = tm.accept_token(open, forced[0]);
  tm.fill_mask(done, mask);
  CHECK(popcount(mask) == qwen3().end_of_generation().size());
  for (int32_t eog : qwen3().end_of_generation()) CHECK(has(mask, eog));
  CHECK(tm.accept_token(done, qwen3().end_of_generation()[0]) == done);
  // Logits of the refused tokens, and of rows past the vocabulary, go to -infinity.
  std::vector<float> logits(size_t(tm.vocab().n_vocab()) + 100, 1.0f);
  mask_logits(logits, mask);
  size_t kept = 0;
  for (size_t i = 0; i < logits.size(); ++i) kept += logits[i] == 1.0f;
  CHECK(kept == qwen3().end_of_generation().size());
  CHECK(logits.back() == -std::numeric_limits<float>::infinity());
  CHECK(tm.accept_token(open, qwen3().end_of_generation()[0]).dead());
}
