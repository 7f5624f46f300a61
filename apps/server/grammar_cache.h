#pragma once
// The server's compiled structured-output rules (output_rule.h), shared by the requests
// that ask for the same one: the model's vocabulary trie (built once, on the first
// constrained request), and for each of the last kMaxGrammars rules its compiled grammar
// with its node masks (grammar/node_mask_cache.h), so that a second request with a schema
// neither compiles it again nor pays the first masks' cost. Keyed by the rule's text (a
// schema as compact JSON in the client's key order), least recently used out first.
// Thread-safe: HTTP threads compile (outside the lock) and the engine thread masks.
#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "apps/server/output_rule.h"
#include "grammar/node_mask_cache.h"
#include "grammar/token_trie.h"

namespace flashspec {
class Tokenizer;
}

namespace flashspec::server {

class GrammarCache {
 public:
  // About 19 KB per node mask at a 151k vocabulary, up to 1024 per grammar (NodeMaskCache).
  static constexpr size_t kMaxGrammars = 8;

  explicit GrammarCache(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  GrammarCache(const GrammarCache&) = delete;
  GrammarCache& operator=(const GrammarCache&) = delete;

  struct Found {
    std::shared_ptr<grammar::NodeMaskCache> masks;  // null for a rule asking for nothing
    bool cached = false;                            // compiled by an earlier request
    double compile_ms = 0;
  };
  // The rule compiled over the vocabulary. `schema_text`: a JsonSchema rule's schema
  // (ordered_schema_text). A rule that does not compile is a 400 naming its field, with
  // the compiler's words: the unsupported keyword and where, the GBNF line:column, a
  // schema no value satisfies, a pattern or grammar beyond the compile's size limits.
  Found get(const OutputRule& rule, const std::string& schema_text);
  // A rule made elsewhere (a forced tool call's grammar), cached under `key`: `compile` runs
  // only when the key is new.
  Found get(const std::string& key, const std::function<std::shared_ptr<const grammar::Grammar>()>& compile);

 private:
  std::shared_ptr<const grammar::TokenTrie> vocab();

  const Tokenizer& tokenizer_;
  std::mutex m_;
  std::shared_ptr<const grammar::TokenTrie> vocab_;
  std::list<std::pair<std::string, std::shared_ptr<grammar::NodeMaskCache>>> recent_;  // most recent first
};

}  // namespace flashspec::server
