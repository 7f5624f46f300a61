// gpt-oss's harmony answers on their way to the user: a turn (engine/turn.h) fed gpt-oss's
// real marker tokens splits the answer into reasoning and content, with stop texts on the
// content only; `flashspec chat --think` marks the reasoning as Qwen3's shows; and `flashspec
// chat` on tiny-gptoss (random weights, the real o200k_harmony tokenizer) shows no marker
// text and writes an earlier answer back into the history as the template keeps it.
#include <doctest/doctest.h>


#include <nlohmann/json.hpp>

#include "apps/reasoning_display.h"
#include "engine/turn.h"
#include "tests/cli_runner.h"
#include "tests/harmony_fixture.h"
#include "tests/json_file.h"

using namespace flashspec;
using namespace flashspec::testing;
using json = nlohmann::json;

namespace {

// A turn driven by hand, as a Session drives it: every token to on_token until should_stop
// says so or the end token, then finish.
struct Driven {
  TurnResult result;
  std::string shown, reasoned;  // what on_text and on_reasoning were given
  size_t fed = 0;               // tokens given to the turn
  bool marker_shown = false;    // a piece held a marker's spelling
};
Driven drive(const std::vector<int32_t>& tokens, TurnRequest r, const Tokenizer& tok) {
  Driven d;
  auto has_marker = [](const std::string& s) { return s.find("<|") != std::string::npos; };
  r.on_text = [&](const std::string& s) { d.shown += s, d.marker_shown |= has_marker(s); };
  r.on_reasoning = [&](const std::string& s) { d.reasoned += s, d.marker_shown |= has_marker(s); };
  TurnText text(tok, r);
  const GenerateOptions g = text.options();
  GenerationResult res;
  for (const int32_t id : tokens) {
    res.tokens.push_back(id);
    ++d.fed;
    g.on_token(id);
    if (g.is_end(id) || g.should_stop()) break;
  }
  d.result = text.finish(std::move(res));
  return d;
}

TurnRequest harmony_request() {
  TurnRequest r;
  r.format = &gptoss().format;
  r.turn_end = gptoss().format.turn_end_token();
  r.hide_reasoning = true;  // chat's default: changes nothing for harmony, whose reasoning is apart
  return r;
}

}  // namespace

TEST_CASE("harmony turn: gpt-oss's marker tokens split the answer into reasoning and content") {
  const Gptoss& g = gptoss();
  REQUIRE(g.format.style() == ChatStyle::Harmony);
  const std::vector<int32_t> answer = g.ids(
      "<|channel|>analysis<|message|>User says hi. Reply warmly.<|end|>"
      "<|start|>assistant<|channel|>final<|message|>Hello there! 👋<|return|>");
  const Driven d = drive(answer, harmony_request(), g.tok);
  CHECK(d.result.text == "Hello there! 👋");
  REQUIRE(d.result.reasoning.has_value());
  CHECK(*d.result.reasoning == "User says hi. Reply warmly.");
  CHECK(d.shown == d.result.text);
  CHECK(d.reasoned == *d.result.reasoning);
  CHECK_FALSE(d.marker_shown);
  CHECK(d.result.finish == AnswerEnd::EndToken);
  CHECK(d.result.tokens == answer);  // the end token included, as a Session reports it

  SUBCASE("stop texts cut the content, never the reasoning") {
    TurnRequest r = harmony_request();
    r.stop = {"says", "there"};
    const Driven s = drive(answer, r, g.tok);
    CHECK(*s.result.reasoning == "User says hi. Reply warmly.");
    CHECK(s.result.text == "Hello ");
    CHECK(s.result.finish == AnswerEnd::StopText);
  }
  SUBCASE("cut by the token limit inside the reasoning") {
    const std::vector<int32_t> cut = g.ids("<|channel|>analysis<|message|>Let me think");
    const Driven c = drive(cut, harmony_request(), g.tok);
    CHECK(*c.result.reasoning == "Let me think");
    CHECK(c.result.text.empty());
    CHECK(c.result.finish == AnswerEnd::Length);
  }
  SUBCASE("the model starting the user's message ends the answer there") {
    const std::vector<int32_t> other =
        g.ids("<|channel|>final<|message|>Sure.<|end|><|start|>user<|message|>And then<|end|>");
    const Driven o = drive(other, harmony_request(), g.tok);
    CHECK(o.result.text == "Sure.");
    CHECK(o.result.finish == AnswerEnd::EndToken);
    CHECK(o.fed < other.size());  // it stopped at the foreign header
  }
  SUBCASE("without the format (generate, completions) the text is the tokens' as printed") {
    TurnRequest r;
    const Driven p = drive(answer, r, g.tok);
    CHECK_FALSE(p.result.reasoning.has_value());
    std::string printed;
    for (const int32_t id : answer)
      if (!g.tok.is_end_of_generation(id)) printed += g.tok.token_to_piece(id);
    CHECK(p.result.text == printed);
  }
}

TEST_CASE("harmony turn: a call addressed to a function is read apart when tools were offered, dropped otherwise") {
  const Gptoss& g = gptoss();
  const std::vector<int32_t> answer = g.ids(
      "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>");
  TurnRequest r = harmony_request();
  r.read_tool_calls = true;
  std::vector<ToolCall> handed;
  r.on_tool_call = [&](const ToolCall& c) { handed.push_back(c); };
  const Driven d = drive(answer, r, g.tok);
  const std::vector<ToolCall> expected = {{"get_weather", "{\"city\": \"Paris\"}"}};
  CHECK(d.result.tool_calls == expected);
  CHECK(handed == expected);
  CHECK(*d.result.reasoning == "Need the weather.");
  CHECK(d.result.text.empty());
  CHECK_FALSE(d.marker_shown);
  CHECK(d.result.finish == AnswerEnd::EndToken);
  CHECK(d.fed == answer.size());

  const Driven dropped = drive(answer, harmony_request(), g.tok);
  CHECK(dropped.result.tool_calls.empty());
  CHECK(dropped.result.text.empty());
}

TEST_CASE("harmony chat --think: the reasoning is marked as Qwen3's shows") {
  ReasoningDisplay d;
  std::string out = d.reasoning("Plan: ");
  out += d.reasoning("greet.");
  out += d.content("Hello");
  out += d.content("!");
  out += d.finish();
  CHECK(out == "<think>\nPlan: greet.\n</think>\n\nHello!");
  ReasoningDisplay cut;  // an answer cut inside its reasoning: the block the display opened closes
  std::string cut_out = cut.reasoning("Hmm");
  cut_out += cut.finish();
  CHECK(cut_out == "<think>\nHmm\n</think>");
  ReasoningDisplay plain;  // no reasoning: no marks
  std::string plain_out = plain.content("Hi");
  plain_out += plain.finish();
  CHECK(plain_out == "Hi");
}

TEST_CASE("harmony chat: tiny-gptoss answers without marker text, earlier answers written back as their final text") {
  const Gptoss& g = gptoss();
  const std::string& model = g.path;
  const std::string q1 = "Hi there", q2 = "Tell me more";
  const CliResult r = run_cli({"chat", "-m", model, "--temp", "0", "-n", "12", "--json", "-t", "1"}, q1 + "\n" + q2 + "\n");
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  const std::vector<json> turns = json_lines(r.out);
  REQUIRE(turns.size() == 2);
  std::vector<std::string> answers;
  for (const json& t : turns) {
    const std::string text = t.at("text");
    CAPTURE(text);
    CHECK_FALSE(holds_marker(text));
    REQUIRE(t.contains("reasoning"));
    CHECK_FALSE(holds_marker(t.at("reasoning").get<std::string>()));
    answers.push_back(text);
  }
  // The first turn is render()'s conversation; the second rewrites the first answer as the
  // template keeps it, so the session holds the template's rendering of the whole conversation.
  const std::vector<ChatMessage> one = {{ChatRole::User, q1}};
  CHECK(turns[0].at("prompt_tokens") == g.format.render(one).size());
  CHECK(turns[1].at("prompt_tokens") == g.format.next_turn_replacing(answers[0], q2).size());
  const std::vector<ChatMessage> two = {{ChatRole::User, q1}, {ChatRole::Assistant, answers[0]}, {ChatRole::User, q2}};
  CHECK(turns[1].at("history_tokens").get<size_t>() == g.format.render(two).size() + turns[1].at("tokens").size());

  // Streamed to a terminal-less stdout, with and without --think: no marker text either.
  for (const bool think : {false, true}) {
    CAPTURE(think);
    std::vector<std::string> args = {"chat", "-m", model, "--temp", "0", "-n", "12", "-t", "1"};
    if (think) args.push_back("--think");
    const CliResult s = run_cli(args, q1 + "\n" + q2 + "\n");
    CAPTURE(s.err);
    REQUIRE(s.exit_code == 0);
    CHECK_FALSE(holds_marker(s.out));
    CHECK(s.out.find("<|channel|>") == std::string::npos);
  }
}
