#include "apps/server/grammar_cache.h"

#include <chrono>

#include "apps/server/api_error.h"
#include "core/error.h"
#include "grammar/gbnf.h"
#include "grammar/json_parts.h"
#include "grammar/json_schema.h"

namespace flashspec::server {

namespace {

std::shared_ptr<const grammar::Grammar> compile(const OutputRule& rule, const std::string& schema_text) {
  // The compilers' messages say what is wrong and where ("json schema: at #/properties/a:
  // unsupported keyword \"oneOf\"", "grammar: line 3:7: ..."); the field says which input.
  try {
    switch (rule.kind) {
      case OutputRule::Kind::JsonObject: return grammar::Grammar::compile(grammar::json_object_grammar());
      case OutputRule::Kind::JsonSchema: return grammar::compile_json_schema(std::string_view(schema_text));
      case OutputRule::Kind::Grammar: return grammar::compile_gbnf(rule.text);
      case OutputRule::Kind::None: break;
    }
  } catch (const Error& e) {
    const std::string what = e.what();  // GBNF's own errors start "grammar: ": not said twice
    throw bad_request(what.starts_with(rule.param + ": ") ? what : rule.param + ": " + what, rule.param);
  }
  return nullptr;
}

std::string key_of(const OutputRule& rule, const std::string& schema_text) {
  switch (rule.kind) {
    case OutputRule::Kind::JsonObject: return "object";
    case OutputRule::Kind::JsonSchema: return "schema " + schema_text;
    case OutputRule::Kind::Grammar: return "gbnf " + rule.text;
    case OutputRule::Kind::None: break;
  }
  return {};
}

}  // namespace

std::shared_ptr<const grammar::TokenTrie> GrammarCache::vocab() {
  std::lock_guard lk(m_);
  if (!vocab_) vocab_ = grammar::TokenTrie::from_tokenizer(tokenizer_);
  return vocab_;
}

GrammarCache::Found GrammarCache::get(const OutputRule& rule, const std::string& schema_text) {
  if (rule.kind == OutputRule::Kind::None) return {};
  return get(key_of(rule, schema_text), [&] { return compile(rule, schema_text); });
}

GrammarCache::Found GrammarCache::get(const std::string& key,
                                      const std::function<std::shared_ptr<const grammar::Grammar>()>& compile) {
  {
    std::lock_guard lk(m_);
    for (auto it = recent_.begin(); it != recent_.end(); ++it)
      if (it->first == key) {
        recent_.splice(recent_.begin(), recent_, it);
        return {recent_.front().second, true, 0};
      }
  }
  // Compiled outside the lock: a large schema does not hold up requests using others.
  // Two requests compiling the same new rule at once both compile; the first one's stays.
  const auto t0 = std::chrono::steady_clock::now();
  auto masks = std::make_shared<grammar::NodeMaskCache>(compile(), vocab());
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard lk(m_);
  for (const auto& [k, m] : recent_)
    if (k == key) return {m, true, ms};
  recent_.emplace_front(key, masks);
  if (recent_.size() > kMaxGrammars) recent_.pop_back();
  return {masks, false, ms};
}

}  // namespace flashspec::server
