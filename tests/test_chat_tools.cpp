// Conversations with tools rendered by ChatFormat::render as the families' own templates
// render them with @huggingface/jinja (tests/reference/chat-tools-*.json, made by
// tests/tokenizers/make_chat_tools.mjs): Qwen3's (tiny-qwen3's own template) for chatml,
// Llama 3.1's for llama-3, token for token (the rendered text encoded with its specials
// parsed), and the conversations those templates refuse refused.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "core/error.h"
#include "core/gguf.h"
#include "tests/chat_messages.h"
#include "tests/fixtures.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;
using ojson = nlohmann::ordered_json;

namespace {

void check_reference(const std::string& model, const std::string& reference, int refusals) {
  GgufFile file = GgufFile::open(model_path(model));
  const Tokenizer tok = Tokenizer::from_gguf(file);
  std::string notice;
  ChatFormat f = ChatFormat::for_model(tok, file.get_string("tokenizer.chat_template"), std::nullopt, notice);
  // Llama 3.1's template is not tiny-llama3's: its tool rendering is the llama-3 format's.
  std::ifstream in(std::string(FS_SOURCE_DIR) + "/tests/reference/" + reference);
  const ojson cases = ojson::parse(in);
  REQUIRE(cases.size() >= 10);
  int rendered = 0, refused = 0;
  for (const ojson& c : cases) {
    CAPTURE(c.dump().substr(0, 300));
    const std::vector<ChatMessage> msgs = messages_of(c.at("messages"));
    f.set_thinking(c.value("enable_thinking", true));
    if (c.contains("error")) {
      CHECK_THROWS_AS((void)f.render(msgs, c.at("tools")), Error);
      ++refused;
      continue;
    }
    const std::string text = c.at("text").get<std::string>();
    CHECK(f.render(msgs, c.at("tools")) == tok.encode(text, false, true));
    ++rendered;
  }
  MESSAGE(reference << ": " << rendered << " renderings equal, " << refused << " refusals");
  CHECK(refused == refusals);
}

}  // namespace

TEST_CASE("chat tools: chatml writes tools, calls and results as Qwen3's template") {
  check_reference("tiny-qwen3", "chat-tools-qwen3.json", 0);
}

TEST_CASE("chat tools: llama-3 writes tools, calls and results as Llama 3.1's template") {
  check_reference("tiny-llama3", "chat-tools-llama31.json", 3);
}

TEST_CASE("chat tools: formats without tool calls refuse tools") {
  GgufFile file = GgufFile::open(model_path("stories260K"));
  const Tokenizer tok = Tokenizer::from_gguf(file);
  const ChatFormat f(tok, ChatStyle::Plain);
  const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  CHECK_THROWS_WITH_AS((void)f.render(std::vector<ChatMessage>{{ChatRole::User, "hi"}}, tools),
                       "tools: the plain chat format has no tool calls", Error);
  CHECK_FALSE(f.tool_call_syntax().has_value());
}
