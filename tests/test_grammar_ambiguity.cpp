// A grammar that parses one text in exponentially many ways (root ::= ("a" root?)+) made
// each matched byte cost 1.7 times the one before: 26 bytes took 1.7 s and 61 MB, and a
// client's `grammar` field could hang the engine. The matcher bounds a step's work, a state's
// stacks and the frames it holds (grammar/matcher.cpp); passing one is TooAmbiguous, which a
// GrammarConstraint keeps as its sequence's failure so that the other sequences of a batch
// pass go on, and the server answers that request alone with a 400.
#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <future>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/gguf.h"
#include "grammar/gbnf.h"
#include "grammar/grammar_constraint.h"
#include "grammar/matcher.h"
#include "grammar/token_trie.h"
#include "tests/fixtures.h"
#include "tests/http_client.h"
#include "tests/server_helpers.h"
#include "tests/server_process.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;
using json = nlohmann::json;

namespace {

const char* kAmbiguous[] = {R"(root ::= ("a" root?)+)", "root ::= [a-z] root{0,3}", "root ::= item{60000}\nitem ::= .|"};

}  // namespace

TEST_CASE("grammar ambiguity: matching an exponentially ambiguous grammar stops at the bounds with TooAmbiguous") {
  for (const char* g : kAmbiguous) {
    CAPTURE(g);
    bool refused = false;
    try {
      grammar::Matcher m(grammar::compile_gbnf(g));  // its start state may pass a bound already
      grammar::MatchState s = m.start();
      for (int i = 0; i < 200 && !s.dead(); ++i) s = m.accept_byte(s, 'a');
    } catch (const grammar::TooAmbiguous& e) {
      refused = true;
      CHECK(std::string(e.what()).find("grammar: too ambiguous to match") == 0);
    }
    CHECK(refused);
  }
  // Unambiguous grammars with long repetitions stay far from the bounds.
  grammar::Matcher m(grammar::compile_gbnf("root ::= [a-z ]{0,10000}"));
  grammar::MatchState s = m.start();
  for (int i = 0; i < 5000; ++i) s = m.accept_byte(s, 'a' + i % 26);
  CHECK_FALSE(s.dead());
}

TEST_CASE("grammar ambiguity: the constraint keeps the failure, asks for the end and masks nothing after it") {
  const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(model_path("tiny-qwen3")));
  grammar::GrammarConstraint c(grammar::compile_gbnf(kAmbiguous[0]), grammar::TokenTrie::from_tokenizer(tok));
  LogitConstraint::State s = c.start();
  const int32_t a = tok.encode("a", false).at(0);
  for (int i = 0; i < 200 && !c.failure(); ++i) {
    const std::optional<LogitConstraint::State> next = c.advance(s, a);
    REQUIRE(next);
    s = *next;
  }
  REQUIRE(c.failure());
  CHECK(c.must_end(s));
  std::vector<float> logits(size_t(tok.n_vocab()), 0.0f);
  c.mask(logits, s);
  CHECK(std::all_of(logits.begin(), logits.end(), [](float x) { return x == 0.0f; }));
  CHECK_THROWS_AS(std::rethrow_exception(c.failure()), grammar::TooAmbiguous);
}

TEST_CASE("grammar ambiguity: the server answers the ambiguous request alone with a 400, the one beside it goes on") {
  ServerProcess srv({"-m", model_path("tiny-qwen3"), "-t", "1", "--parallel", "2"});
  CAPTURE(srv.log());
  // End tokens banned so that neither answer ends before the matcher's bounds are met.
  const json no_end = {{"151643", -100}, {"151645", -100}};
  const json normal = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 200}, {"temperature", 0},
                       {"logit_bias", no_end}};
  const HttpResponse alone = http_post(srv.port(), "/v1/chat/completions", normal);
  REQUIRE(alone.status == 200);
  const std::string expected = alone.json()["choices"][0]["message"]["content"];
  for (bool stream : {false, true}) {
    CAPTURE(stream);
    auto beside = std::async(std::launch::async, [&] { return http_post(srv.port(), "/v1/chat/completions", normal); });
    json bad = normal;
    bad["grammar"] = kAmbiguous[0];
    bad["max_tokens"] = 64;
    bad["stream"] = stream;
    const HttpResponse r = http_post(srv.port(), "/v1/chat/completions", bad);
    if (stream) {
      CHECK(r.status == 200);  // the error comes as an event: the headers went out first
      CHECK(r.body.find("grammar_too_ambiguous") != std::string::npos);
    } else {
      CHECK(r.status == 400);
      CHECK(r.json()["error"]["code"] == "grammar_too_ambiguous");
      CHECK(r.json()["error"]["param"] == "grammar");
    }
    const HttpResponse other = beside.get();
    REQUIRE(other.status == 200);
    CHECK(other.json()["choices"][0]["message"]["content"] == expected);
  }
  CHECK(srv.stop(SIGTERM, 10) == 0);
}
