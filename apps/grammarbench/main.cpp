// flashspec-grammarbench: what a grammar's token mask costs on a real vocabulary (by
// default the Qwen3 tokenizer of ../shared/models/tiny-qwen3.gguf, 151k tokens).
//
//   flashspec-grammarbench [MODEL.gguf] [--reps N]
//
// For a few JSON states (inside a string, after a key, at a value start, ...) it prints:
//   cold    a new masker's first mask there (the context-free masks of the state's grammar
//           nodes computed on the way);
//   nodes   the mask of a state whose nodes are known but whose own mask is not (the usual
//           case in generation: a string's node serves every string);
//   hit     the state's finished mask from the per-state cache;
//   walk    the whole vocabulary trie walked from the state, no caches: the reference;
// and the mean and largest cost per token over documents decoded token by token with a
// fresh masker, which is what constrained generation pays: once for a new schema (its node
// masks computed on the way) and once for a schema seen before (node masks shared).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "grammar/json_schema.h"
#include "grammar/token_masker.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace flashspec;
using namespace flashspec::grammar;
using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

size_t popcount(const std::vector<uint64_t>& bits) {
  size_t n = 0;
  for (uint64_t w : bits) n += size_t(__builtin_popcountll(w));
  return n;
}

const char* kSchema = R"({"type": "object", "properties": {
    "name": {"type": "string"},
    "kind": {"enum": ["circle", "square", "triangle"]},
    "size": {"type": "integer", "minimum": 1, "maximum": 500},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
    "owner": {"type": "object", "properties": {"id": {"type": "integer"}, "email": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
              "required": ["id", "email"], "additionalProperties": false}},
  "required": ["name", "kind", "size", "tags", "owner"], "additionalProperties": false})";

struct StateCase {
  const char* what;
  bool schema;       // the schema's grammar, else any JSON object
  const char* text;  // the output so far
};

const StateCase kStates[] = {
    {"inside a string", false, R"({"name": "Zo)"},
    {"after a key", false, R"({"name")"},
    {"at a value start", false, R"({"name": )"},
    {"inside a number", false, R"({"n": 12)"},
    {"after a value", false, R"({"a": true)"},
    {"string, 4 levels deep", false, R"({"a": [{"b": [{"c": "x)"},
    {"schema: string property", true, R"({"name": "Ann)"},
    {"schema: after a key", true, R"({"name": "Ann", "kind")"},
    {"schema: enum value start", true, R"({"name": "Ann", "kind": )"},
    {"schema: integer 1..500", true, R"({"name": "Ann", "kind": "circle", "size": 4)"},
};

const char* kDocuments[] = {
    R"({"name": "Zoë the first", "kind": "triangle", "size": 250, "tags": ["red", "large", "x"], "owner": {"id": 77, "email": "zoe@example.com"}})",
    R"({"name": "Bob", "kind": "circle", "size": 1, "tags": [], "owner": {"id": -3, "email": null}})",
};

int run(const std::string& model, int reps) {
  auto t0 = Clock::now();
  const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(model));
  const double load_ms = us_since(t0) / 1000;
  t0 = Clock::now();
  const auto vocab = TokenTrie::from_tokenizer(tok);
  const double trie_ms = us_since(t0) / 1000;
  t0 = Clock::now();
  const auto any_object = Grammar::compile(json_object_grammar());
  const auto schema = compile_json_schema(std::string_view(kSchema));
  const double compile_ms = us_since(t0) / 1000;
  std::printf("vocabulary: %d tokens, trie of %zu nodes (built in %.1f ms; tokenizer loaded in %.1f ms)\n", vocab->n_vocab(),
              vocab->nodes().size(), trie_ms, load_ms);
  std::printf("grammars: any JSON object (%zu nodes), the schema (%zu nodes), compiled in %.2f ms\n\n",
              any_object->node_count(), schema->node_count(), compile_ms);

  std::printf("%-28s %8s %10s %10s %10s %10s\n", "state", "allowed", "cold ms", "nodes us", "hit us", "walk ms");
  std::vector<uint64_t> bits;
  for (const StateCase& c : kStates) {
    const auto& g = c.schema ? schema : any_object;
    // cold: a fresh masker each time.
    std::vector<double> cold, nodes, hit, walk;
    size_t allowed = 0;
    for (int r = 0; r < reps; ++r) {
      TokenMasker tm(g, vocab);
      bits.assign(tm.mask_words(), 0);
      const MatchState s = tm.matcher().accept_bytes(tm.start(), c.text);
      if (s.dead()) throw Error(std::string("bench state not in the grammar: ") + c.text);
      auto t = Clock::now();
      tm.fill_mask(s, bits);
      cold.push_back(us_since(t) / 1000);
      allowed = popcount(bits);
      t = Clock::now();
      tm.fill_mask(s, bits);
      hit.push_back(us_since(t));
    }
    {
      MaskOptions no_state_cache;
      no_state_cache.max_state_masks = 0;
      TokenMasker tm(g, vocab, no_state_cache);
      bits.assign(tm.mask_words(), 0);
      const MatchState s = tm.matcher().accept_bytes(tm.start(), c.text);
      tm.fill_mask(s, bits);  // computes the node masks
      for (int r = 0; r < reps; ++r) {
        const auto t = Clock::now();
        tm.fill_mask(s, bits);
        nodes.push_back(us_since(t));
      }
    }
    {
      MaskOptions no_cache;
      no_cache.max_state_masks = 0;
      no_cache.max_node_masks = 0;
      TokenMasker tm(g, vocab, no_cache);
      bits.assign(tm.mask_words(), 0);
      const MatchState s = tm.matcher().accept_bytes(tm.start(), c.text);
      tm.fill_mask(s, bits);  // fills the DFA rows the walk needs, once
      for (int r = 0; r < reps; ++r) {
        const auto t = Clock::now();
        tm.fill_mask(s, bits);
        walk.push_back(us_since(t) / 1000);
      }
    }
    std::printf("%-28s %8zu %10.2f %10.1f %10.1f %10.2f\n", c.what, allowed, median(cold), median(nodes), median(hit),
                median(walk));
  }

  // A fresh masker per run, with node masks of its own (a new grammar: they are computed
  // on the way) or from a cache an earlier request with the same schema filled.
  auto shared = std::make_shared<NodeMaskCache>(schema, vocab);
  for (const char* doc : kDocuments) {
    TokenMasker tm(shared);
    bits.assign(tm.mask_words(), 0);
    MatchState s = tm.start();
    for (int32_t id : tok.encode(doc, false)) {
      tm.fill_mask(s, bits);
      s = tm.accept_token(s, id);
    }
  }
  for (const bool warm : {false, true}) {
    std::printf("\nper token, decoding a document with a fresh masker, node masks %s:\n",
                warm ? "from a shared cache (a schema seen before)" : "computed on the way (a new schema)");
    for (const char* doc : kDocuments) {
      const std::vector<int32_t> ids = tok.encode(doc, false);
      std::vector<double> per_token;  // every mask of every run
      for (int r = 0; r < reps; ++r) {
        TokenMasker tm = warm ? TokenMasker(shared) : TokenMasker(schema, vocab);
        bits.assign(tm.mask_words(), 0);
        MatchState s = tm.start();
        for (int32_t id : ids) {
          const auto t = Clock::now();
          tm.fill_mask(s, bits);
          per_token.push_back(us_since(t));
          s = tm.accept_token(s, id);
          if (s.dead()) throw Error("bench document not in the schema's grammar");
        }
      }
      double sum = 0;
      for (double v : per_token) sum += v;
      std::printf("  %3zu tokens: mean %.1f us, median %.1f us, max %.3f ms per mask\n", ids.size(),
                  sum / double(per_token.size()), median(per_token),
                  *std::max_element(per_token.begin(), per_token.end()) / 1000);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"flashspec-grammarbench: token mask cost per grammar state"};
  std::string model = std::string(FS_SHARED_DIR) + "/models/tiny-qwen3.gguf";
  int reps = 5;
  app.add_option("model", model, "GGUF file whose tokenizer gives the vocabulary");
  app.add_option("--reps", reps, "repetitions per measurement (medians reported)")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  try {
    return run(model, reps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashspec-grammarbench: %s\n", e.what());
    return 1;
  }
}
