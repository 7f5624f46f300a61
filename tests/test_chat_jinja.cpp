// The jinja chat style: conversations rendered by the model's own template through the Jinja
// engine (jinja/chat_renderer.h), checked against @huggingface/jinja's renderings of the same
// templates (tests/reference/chat-tools-qwen3.json: Qwen3's, tiny-qwen3's own, with tools;
// chat-gemma3.json: Gemma 3's) and against the fixed formats' tokens for tiny-llama3; a
// template no fixed style knows chosen automatically; one that does not parse falling back
// to plain with a notice; and `flashspec chat` re-rendering the conversation each turn while
// prefilling only what is new.
#include <doctest/doctest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "core/error.h"
#include "core/gguf.h"
#include "jinja/chat_renderer.h"
#include "tests/chat_messages.h"
#include "tests/chat_model.h"
#include "tests/cli_runner.h"
#include "tests/fixtures.h"
#include "tests/json_file.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;
using ojson = nlohmann::ordered_json;

namespace {

using Model = ChatModel;

ojson read_ordered(const std::string& name) {
  return read_ordered_json(std::string(FS_SOURCE_DIR) + "/tests/reference/" + name);
}

}  // namespace

TEST_CASE("chat jinja: Qwen3's own template renders tools, calls and results as @huggingface/jinja does") {
  const Model m(model_path("tiny-qwen3"));
  ChatFormat f = m.format(ChatStyle::Jinja);
  REQUIRE(f.style() == ChatStyle::Jinja);
  CHECK(f.renders_whole_conversation());
  CHECK(f.reasons());  // its template has <think> blocks
  CHECK(f.tool_call_syntax() == ToolCallSyntax::Hermes);
  const ojson cases = read_ordered("chat-tools-qwen3.json");
  REQUIRE(cases.size() >= 10);
  for (const ojson& c : cases) {
    CAPTURE(c.dump().substr(0, 300));
    f.set_thinking(c.value("enable_thinking", true));
    const std::vector<int32_t> ids = f.render(messages_of(c.at("messages")), c.at("tools"));
    CHECK(ids == m.tok.encode(c.at("text").get<std::string>(), false, true));
  }
}

TEST_CASE("chat jinja: Gemma 3's template through the Jinja engine, and the conversations it refuses") {
  const Model m(made_fixture_path("tiny-gemma3"));
  const ChatFormat f = m.format(ChatStyle::Jinja);
  const ChatFormat fixed = m.format(std::nullopt);
  REQUIRE(fixed.style() == ChatStyle::Gemma);
  const ojson cases = read_ordered("chat-gemma3.json");
  int rendered = 0, refused = 0;
  for (const ojson& c : cases) {
    CAPTURE(c.dump().substr(0, 300));
    const std::vector<ChatMessage> msgs = messages_of(c.at("messages"));
    if (c.contains("error")) {
      CHECK_THROWS_AS((void)f.render(msgs), Error);  // the template's raise_exception
      ++refused;
      continue;
    }
    const std::string text = c.at("text");
    const std::vector<int32_t> ids = f.render(msgs);
    CHECK(m.tok.decode(ids) == text);
    // Markers the user typed are parsed as control tokens on this path (as llama.cpp's
    // server parses a rendered prompt); the fixed gemma format keeps them text.
    if (text.find("I typed") == std::string::npos) {
      CHECK(ids == m.tok.encode(text, false, true));
      CHECK(ids == fixed.render(msgs));
    }
    ++rendered;
  }
  CHECK(rendered >= 8);
  CHECK(refused >= 4);
}

TEST_CASE("chat jinja: tiny-llama3's template gives the llama-3 format's tokens") {
  const Model m(model_path("tiny-llama3"));
  const ChatFormat f = m.format(ChatStyle::Jinja), fixed = m.format(std::nullopt);
  REQUIRE(fixed.style() == ChatStyle::Llama3);
  const std::vector<std::vector<ChatMessage>> conversations = {
      {{ChatRole::User, "Hello there"}},
      {{ChatRole::System, "Be brief."}, {ChatRole::User, "What is 2+2?"}},
      {{ChatRole::System, "S"}, {ChatRole::User, "a"}, {ChatRole::Assistant, "b"}, {ChatRole::User, "c"}},
  };
  for (const auto& msgs : conversations) {
    CAPTURE(msgs.size());
    const std::vector<int32_t> ids = f.render(msgs);
    CHECK(ids == fixed.render(msgs));
    CHECK(std::count(ids.begin(), ids.end(), m.tok.bos()) == 1);  // the template's BOS, not a second
  }
}

TEST_CASE("chat jinja: a template no fixed style knows is rendered by itself, one that does not parse is plain") {
  const Model m(model_path("tiny-qwen3"));
  const std::string custom =
      "{%- for m in messages %}{{ '### ' + m.role | capitalize + ':\\n' + m.content | trim + '\\n\\n' }}"
      "{%- endfor %}{%- if add_generation_prompt %}{{ '### Assistant:\\n' }}{%- endif %}";
  std::string notice;
  const ChatFormat f = ChatFormat::for_model(m.tok, &custom, std::nullopt, notice, jinja::make_chat_renderer);
  CHECK(notice.empty());
  REQUIRE(f.style() == ChatStyle::Jinja);
  CHECK_FALSE(f.tool_call_syntax().has_value());
  CHECK_FALSE(f.reasons());
  const std::vector<ChatMessage> msgs = {{ChatRole::System, "Be kind. "}, {ChatRole::User, " Hi"}};
  CHECK(f.render(msgs) == m.tok.encode("### System:\nBe kind.\n\n### User:\nHi\n\n### Assistant:\n", false, true));
  CHECK(f.first_turn("Hi", "Be kind.") == f.render(msgs));
  CHECK_THROWS_AS((void)f.next_turn("Hi", AnswerEnd::EndToken, -1), Error);

  // Without the engine (the library's default), the same template is not recognised.
  const ChatFormat without = ChatFormat::for_model(m.tok, &custom, std::nullopt, notice);
  CHECK(without.style() == ChatStyle::Plain);
  CHECK(notice.find("not recognised") != std::string::npos);

  const std::string broken = "{% for m in messages %}{{ m.content }";
  const ChatFormat plain = ChatFormat::for_model(m.tok, &broken, std::nullopt, notice, jinja::make_chat_renderer);
  CHECK(plain.style() == ChatStyle::Plain);
  CHECK(notice.find("chat template not usable (template line 1") == 0);
  CHECK_THROWS_WITH_AS((void)ChatFormat::for_model(m.tok, &broken, ChatStyle::Jinja, notice, jinja::make_chat_renderer),
                       doctest::Contains("--chat-format jinja: template line 1"), Error);
  CHECK_THROWS_WITH_AS((void)ChatFormat::for_model(m.tok, nullptr, ChatStyle::Jinja, notice, jinja::make_chat_renderer),
                       "--chat-format jinja: the model has no chat template", Error);
}

TEST_CASE("chat jinja: a chatml template that teaches Qwen XML tool calls renders itself, and reads and forces them") {
  const Model m(model_path("tiny-qwen3"));
  const std::string xml =
      "{%- if tools %}{{- '<|im_start|>system\\nCall a function as <tool_call>\\n<function=NAME>\\n"
      "<parameter=KEY>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call><|im_end|>\\n' }}{%- endif %}"
      "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endfor %}"
      "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
  std::string notice;
  REQUIRE(detect_chat_style(xml) == ChatStyle::ChatML);
  const ChatFormat f = ChatFormat::for_model(m.tok, &xml, std::nullopt, notice, jinja::make_chat_renderer);
  CHECK(f.style() == ChatStyle::Jinja);
  CHECK(f.tool_call_syntax() == ToolCallSyntax::QwenXml);
  const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  const std::vector<int32_t> ids = f.render(std::vector<ChatMessage>{{ChatRole::User, "hi"}}, tools);
  CHECK(m.tok.decode(ids).find("<function=NAME>") != std::string::npos);
  // Without the engine it stays the fixed chatml format (Hermes calls).
  CHECK(ChatFormat::for_model(m.tok, &xml, std::nullopt, notice).tool_call_syntax() == ToolCallSyntax::Hermes);
}

TEST_CASE("chat jinja: flashspec chat re-renders the conversation and prefills only what is new") {
  const std::string model = model_path("tiny-qwen3");
  const CliResult r = run_cli({"chat", "-m", model, "--chat-format", "jinja", "--temp", "0", "-n", "6", "--json",
                               "--ignore-eos", "-t", "2"},
                              "Hello\nAnd again\n");
  REQUIRE(r.exit_code == 0);
  const std::vector<nlohmann::json> turns = json_lines(r.out);
  REQUIRE(turns.size() == 2);
  // The first turn prefills its whole rendering; the second only what follows the part of
  // the session the new rendering shares (Qwen3 drops the earlier answer's think block, so
  // the answer is written again: still less than the whole conversation).
  const int64_t first_prompt = turns[0]["prompt_tokens"], second_prompt = turns[1]["prompt_tokens"];
  const int64_t history = turns[1]["history_tokens"];
  CHECK(first_prompt > 5);
  CHECK(second_prompt < history - first_prompt);
  // The session then holds the conversation as the template renders it.
  const Model m(model);
  ChatFormat f = m.format(ChatStyle::Jinja);
  const std::vector<ChatMessage> msgs = {{ChatRole::User, "Hello"},
                                         {ChatRole::Assistant, turns[0]["text"].get<std::string>()},
                                         {ChatRole::User, "And again"}};
  CHECK(int64_t(f.render(msgs).size()) + 6 == history);
}
