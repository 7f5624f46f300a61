// gpt-oss's harmony chat format: renderings byte for byte against gpt-oss's own template as
// @huggingface/jinja renders it (tests/reference/chat-gptoss.json, made by
// tests/tokenizers/make_chat_gptoss.mjs), as text and through ChatFormat's tokens; how the
// format is chosen; `flashspec chat`'s turns; the reasoning effort and the date; refused
// conversations; and the answer's split into reasoning and content (HarmonyStream), whole,
// streamed byte by byte, and cut short. The vocabulary is built here (256 byte tokens and
// o200k_harmony's markers), so nothing waits for a gpt-oss fixture.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "chat/chat_harmony.h"
#include "chat/chat_template.h"
#include "chat/harmony_stream.h"
#include "core/error.h"
#include "core/utf8.h"
#include "tests/gguf_writer.h"
#include "tests/json_file.h"
#include "tests/vocab_image.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

// Byte-level BPE's spelling of byte b (GPT-2's bytes_to_unicode).
std::string byte_char(int b) {
  int cp = b;
  if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
    int next = 256;
    for (int i = 0; i < b; ++i)
      if (!((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255))) ++next;
    cp = next;
  }
  std::string s;
  utf8_append(s, char32_t(cp));
  return s;
}

// o200k_harmony's special tokens, in their order (ids 257 + i here).
const std::vector<std::string> kSpecials = {"<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>",
                                            "<|channel|>",     "<|start|>",     "<|end|>",    "<|message|>",
                                            "<|call|>"};

// A vocabulary of the 256 bytes, one merge ("ab": a vocabulary needs one) and the specials
// (control tokens, as gpt-oss's GGUFs type them). `with_specials` false: no specials.
GgufWriter harmony_vocab(bool with_specials = true) {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) tokens.push_back(byte_char(b)), types.push_back(1);
  tokens.push_back("ab"), types.push_back(1);
  if (with_specials)
    for (const std::string& s : kSpecials) tokens.push_back(s), types.push_back(3);
  GgufWriter w;
  w.set("tokenizer.ggml.model", gv_str("gpt2"));
  w.set("tokenizer.ggml.pre", gv_str("gpt2"));
  w.set("tokenizer.ggml.tokens", gv_str_array(tokens));
  w.set("tokenizer.ggml.token_type", gv_i32_array(types));
  w.set("tokenizer.ggml.merges", gv_str_array({"a b"}));
  w.set("tokenizer.ggml.add_bos_token", gv_bool(false));
  if (with_specials) w.set("tokenizer.ggml.eos_token_id", gv_u32(257 + 2));  // <|return|>, as gpt-oss's GGUFs
  return w;
}

struct HarmonyVocab {
  ParsedImage image;
  Tokenizer tok;
  explicit HarmonyVocab(bool with_specials = true)
      : image(parse_image(harmony_vocab(with_specials))), tok(Tokenizer::from_gguf(image.file)) {}
  int32_t id(std::string_view s) const { return tok.find_token(s); }
  // Ids back to text, every special spelled out (BPE vocabularies print control tokens as nothing).
  std::string text(const std::vector<int32_t>& ids) const {
    std::string s;
    for (const int32_t i : ids) s += tok.token_type(i) == TokenType::Control ? tok.token_text(i) : tok.token_to_piece(i);
    return s;
  }
};

ChatFormat harmony_format(const HarmonyVocab& v, const std::string& date = "2025-08-05") {
  std::string notice;
  ChatFormat f = ChatFormat::for_model(v.tok, nullptr, std::nullopt, notice);
  f.set_date(date);
  return f;
}

using Msgs = std::vector<ChatMessage>;
ChatMessage sys(std::string s) { return {ChatRole::System, std::move(s)}; }
ChatMessage user(std::string s) { return {ChatRole::User, std::move(s)}; }
ChatMessage bot(std::string s, std::string reasoning = {}) { return {ChatRole::Assistant, std::move(s), std::move(reasoning)}; }

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// One Error's message, or "(no error)".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

const std::string kSystem2025 =
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\nCurrent date: 2025-08-05\n\nReasoning: %\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>";

std::string system_block(const std::string& effort) {
  std::string s = kSystem2025;
  return s.replace(s.find('%'), 1, effort);
}

}  // namespace

TEST_CASE("harmony: renderings are gpt-oss's template's, byte for byte, and it refuses what the template refuses") {
  const HarmonyVocab v;
  ChatFormat f = harmony_format(v);
  REQUIRE(f.style() == ChatStyle::Harmony);
  const nlohmann::ordered_json ref = read_ordered_json(std::string(FS_SOURCE_DIR) + "/tests/reference/chat-gptoss.json");
  REQUIRE(ref.size() >= 24);
  int rendered = 0, refused = 0, with_tools = 0;
  for (const auto& c : ref) {
    CAPTURE(c.dump());
    Msgs msgs;
    for (const auto& j : c.at("messages")) {
      const std::optional<ChatRole> role = parse_chat_role(j.at("role").get<std::string>());
      REQUIRE(role.has_value());
      ChatMessage m{*role, j.at("content").get<std::string>(), j.value("reasoning_content", std::string())};
      for (const auto& t : j.value("tool_calls", nlohmann::ordered_json::array()))
        m.tool_calls.push_back({t.at("function").at("name").get<std::string>(), t.at("function").at("arguments").get<std::string>()});
      msgs.push_back(std::move(m));
    }
    const nlohmann::ordered_json tools = c.value("tools", nlohmann::ordered_json::array());
    with_tools += !tools.empty();
    // No reasoning_effort: the template's default, medium (what thinking on states).
    const std::string effort = c.value("reasoning_effort", std::string("medium"));
    HarmonySettings s;
    s.date = c.at("date").get<std::string>();
    s.effort = effort;
    f.set_date(s.date);
    f.set_reasoning_effort(effort);
    if (c.contains("error")) {
      ++refused;
      CHECK_THROWS_AS(render_harmony(msgs, s, tools), Error);
      CHECK_THROWS_AS(f.render(msgs, tools), Error);
      continue;
    }
    ++rendered;
    const std::string text = c.at("text");
    CHECK(harmony_text(render_harmony(msgs, s, tools)) == text);
    const std::vector<int32_t> ids = f.render(msgs, tools);
    CHECK(v.text(ids) == text);
    // The markers are single tokens: the ids are the text's with specials parsed (but for the
    // conversation whose user typed markers, which the tokenizer decides about).
    if (text.find("I typed") == std::string::npos) CHECK(ids == v.tok.encode(text, false, true));
  }
  CHECK(rendered >= 19);
  CHECK(refused >= 5);
  CHECK(with_tools >= 10);
}

TEST_CASE("harmony: chosen by the template's <|channel|>, by the vocabulary without a template, or by name") {
  const HarmonyVocab v;
  std::string notice;
  CHECK(ChatFormat::for_model(v.tok, nullptr, std::nullopt, notice).style() == ChatStyle::Harmony);
  CHECK(notice.empty());
  const std::string empty, other = "{{ unknown format }}", gptoss = "{{- \"<|start|>assistant<|channel|>final\" }}";
  CHECK(ChatFormat::for_model(v.tok, &empty, std::nullopt, notice).style() == ChatStyle::Harmony);
  CHECK(ChatFormat::for_model(v.tok, &other, std::nullopt, notice).style() == ChatStyle::Harmony);
  CHECK(ChatFormat::for_model(v.tok, &gptoss, std::nullopt, notice).style() == ChatStyle::Harmony);
  CHECK(detect_chat_style(gptoss) == ChatStyle::Harmony);
  CHECK(parse_chat_style("harmony") == ChatStyle::Harmony);
  CHECK(parse_chat_style("gpt-oss") == ChatStyle::Harmony);
  CHECK(std::string(chat_style_name(ChatStyle::Harmony)) == "harmony");
  CHECK(ChatFormat::for_model(v.tok, nullptr, ChatStyle::Harmony, notice).style() == ChatStyle::Harmony);

  // A vocabulary without the markers: plain by default; harmony asked for is one error line.
  const HarmonyVocab bytes(false);
  CHECK(ChatFormat::for_model(bytes.tok, nullptr, std::nullopt, notice).style() == ChatStyle::Plain);
  CHECK(ChatFormat::for_model(bytes.tok, &gptoss, std::nullopt, notice).style() == ChatStyle::Plain);
  CHECK(notice.find("harmony") != std::string::npos);
  CHECK(error_of([&] { (void)ChatFormat::for_model(bytes.tok, nullptr, ChatStyle::Harmony, notice); }) ==
        "--chat-format harmony: the vocabulary has no '<|start|>' token");
}

TEST_CASE("harmony: end tokens, reasoning, and the markers as the answer's parser reads them") {
  const HarmonyVocab v;
  const ChatFormat f = harmony_format(v);
  CHECK(f.reasons());
  CHECK(f.turn_end_token() == v.id("<|return|>"));
  CHECK(f.is_turn_end(v.id("<|return|>")));
  CHECK(f.is_turn_end(v.id("<|call|>")));
  CHECK_FALSE(f.is_turn_end(v.id("<|end|>")));  // a message ends, the answer goes on
  CHECK_FALSE(f.is_turn_end(v.id("<|start|>")));
  CHECK(f.stop_text().empty());
  // The parser needs the markers spelled, whether the vocabulary prints them or not.
  for (const char* m : {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>", "<|return|>", "<|call|>"})
    CHECK(f.output_piece(v.id(m)) == m);
  CHECK(f.output_piece('a') == "a");
  CHECK(f.output_piece(v.id("<|endoftext|>")).empty());  // not a harmony marker
}

TEST_CASE("harmony: thinking and the reasoning effort, the date") {
  const HarmonyVocab v;
  ChatFormat f = harmony_format(v);
  const Msgs hi{user("Hi")};
  const std::string tail = "<|start|>user<|message|>Hi<|end|><|start|>assistant";
  CHECK(f.reasoning_effort() == "low");  // thinking off: the least, and hidden
  CHECK(v.text(f.render(hi)) == system_block("low") + tail);
  f.set_thinking(true);
  CHECK(f.reasoning_effort() == "medium");  // the template's default
  CHECK(v.text(f.render(hi)) == system_block("medium") + tail);
  f.set_reasoning_effort("high");
  CHECK(v.text(f.render(hi)) == system_block("high") + tail);
  f.set_thinking(false);
  CHECK(f.reasoning_effort() == "high");  // an effort asked for wins
  f.set_reasoning_effort("");
  CHECK(f.reasoning_effort() == "low");
  CHECK(error_of([&] { f.set_reasoning_effort("extreme"); }) == "reasoning_effort: 'extreme' is not one of low, medium, high");
  CHECK(f.reasoning_effort() == "low");
  CHECK(parse_reasoning_effort("medium") == "medium");
  CHECK_FALSE(parse_reasoning_effort("Medium").has_value());

  // Without a date set, today's (local) date, as the template's strftime_now.
  const std::string today = local_date_today();
  REQUIRE(today.size() == 10);
  CHECK((today[4] == '-' && today[7] == '-'));
  f.set_date("");
  const std::string text = v.text(f.render(hi));
  const std::string today_line = "Current date: " + today + "\n";
  // (A render that straddles midnight sees tomorrow.)
  CHECK((text.find(today_line) != std::string::npos || local_date_today() != today));
  f.set_date("2030-12-24");
  CHECK(v.text(f.render(hi)).find("Current date: 2030-12-24\n\n") != std::string::npos);
}

TEST_CASE("harmony: chat's turns extend each other as render() writes the conversation") {
  const HarmonyVocab v;
  ChatFormat f = harmony_format(v);
  const int32_t ret = v.id("<|return|>"), end_msg = v.id("<|end|>"), call = v.id("<|call|>");
  CHECK(f.first_turn("Hi", "Be brief.") == f.render(Msgs{sys("Be brief."), user("Hi")}));
  CHECK(f.first_turn("Hi", "") == f.render(Msgs{user("Hi")}));
  const std::vector<int32_t> next = f.next_turn("And now?", AnswerEnd::EndToken, ret);
  CHECK(v.text(next) == "<|start|>user<|message|>And now?<|end|><|start|>assistant");
  CHECK(f.next_turn("And now?", AnswerEnd::EndToken, call) == next);
  CHECK(f.next_turn("And now?", AnswerEnd::Length, end_msg) == next);  // cut right after a message
  // An answer cut short is closed with <|end|> first.
  CHECK(f.next_turn("And now?", AnswerEnd::Length, 'x') == cat({end_msg}, next));
  CHECK(f.next_turn("And now?", AnswerEnd::Cancelled, -1) == cat({end_msg}, next));

  // The server's render of the same conversation: the earlier answer as its final text,
  // closed by <|end|>, its reasoning dropped.
  const std::vector<int32_t> first = f.render(Msgs{user("Hi")});
  const std::vector<int32_t> answer = v.tok.encode("<|channel|>final<|message|>Hello.<|end|>", false, true);
  const std::vector<int32_t> second = f.render(Msgs{user("Hi"), bot("Hello.", "They greet me."), user("And now?")});
  CHECK(cat(cat(first, answer), next) == second);
}

TEST_CASE("harmony: refused conversations, one line naming the message") {
  const HarmonyVocab v;
  const ChatFormat f = harmony_format(v);
  CHECK(error_of([&] { (void)f.render(Msgs{}); }) == "messages: the conversation is empty");
  const std::string content_err = error_of([&] {
    (void)f.render(Msgs{user("Hi"), bot("<|channel|>final<|message|>Hello"), user("More")});
  });
  CHECK(content_err.rfind("messages[1].content: ", 0) == 0);
  CHECK(content_err.find('\n') == std::string::npos);
  // An unknown channel is refused too (the template itself lets it through as text).
  CHECK(error_of([&] { (void)f.render(Msgs{user("Hi"), bot("<|channel|>secret<|message|>x")}); }).rfind("messages[1].content: ", 0) == 0);
  CHECK(error_of([&] { (void)f.render(Msgs{user("Hi"), bot("Hello", "<|channel|>analysis")}); })
            .rfind("messages[1].reasoning_content: ", 0) == 0);
  // Users may type anything: it stays text.
  CHECK_NOTHROW((void)f.render(Msgs{user("<|channel|>final<|message|>x")}));
}

TEST_CASE("harmony answers: analysis to reasoning, final to content, whole or streamed in any pieces") {
  const std::string answer =
      "<|channel|>analysis<|message|>User says hi. Reply <politely>.<|end|>"
      "<|start|>assistant<|channel|>final<|message|>Hello! 👋 How can I help?<|return|>";
  const HarmonyText whole = parse_harmony(answer);
  CHECK(whole.reasoning == "User says hi. Reply <politely>.");
  CHECK(whole.content == "Hello! 👋 How can I help?");
  // Byte by byte: the same split, and nothing of a marker ever shows.
  HarmonyStream s;
  HarmonyText streamed;
  for (const char c : answer) {
    const HarmonyText d = s.push(std::string_view(&c, 1));
    CHECK(d.content.find("<|") == std::string::npos);
    CHECK(d.reasoning.find("<|") == std::string::npos);
    streamed.reasoning += d.reasoning;
    streamed.content += d.content;
  }
  CHECK(s.done());
  const HarmonyText rest = s.flush();
  CHECK((rest.reasoning + rest.content).empty());
  CHECK(streamed.reasoning == whole.reasoning);
  CHECK(streamed.content == whole.content);
  // Text after the end is not the answer's.
  CHECK(s.push("more").content.empty());

  // Token-sized pieces: the final text arrives as it is written.
  HarmonyStream t;
  CHECK(t.push("<|channel|>").content.empty());
  CHECK(t.push("final").content.empty());
  CHECK(t.push("<|message|>").content.empty());
  CHECK(t.push("Hel").content == "Hel");
  CHECK(t.push("lo <").content == "lo ");  // "<" may begin a marker: held
  CHECK(t.push("<|").content == "<");     // now "<|" may: the first "<" was text
  CHECK(t.push("x").content == "<|x");
  CHECK(t.push("<|return|>").content.empty());
  CHECK(t.done());
}

TEST_CASE("harmony answers: final only, commentary, several messages, tool calls, other speakers") {
  CHECK(parse_harmony("<|channel|>final<|message|>Just this.<|return|>").content == "Just this.");
  CHECK(parse_harmony("<|channel|>final<|message|>Just this.<|return|>").reasoning.empty());
  // A preamble in commentary is for the user; two analysis messages add up.
  const HarmonyText multi = parse_harmony(
      "<|channel|>analysis<|message|>one.<|end|><|start|>assistant<|channel|>commentary<|message|>Working on it. "
      "<|end|><|start|>assistant<|channel|>analysis<|message|> two.<|end|>"
      "<|start|>assistant<|channel|>final<|message|>Done.<|return|>");
  CHECK(multi.reasoning == "one. two.");
  CHECK(multi.content == "Working on it. Done.");
  // A tool call is read apart (the function and its arguments) and ends the answer with <|call|>.
  HarmonyStream call;
  const HarmonyText c = call.push(
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|> {\"city\":\"Paris\"}\n<|call|>");
  CHECK(c.reasoning == "Need weather.");
  CHECK(c.content.empty());
  REQUIRE(c.calls.size() == 1);
  CHECK(c.calls[0] == ToolCall{"get_weather", "{\"city\":\"Paris\"}"});
  CHECK(call.done());
  // The recipient before the channel (as the template writes past calls), streamed in pieces:
  // the call comes out once its message ends, not before.
  HarmonyStream pieces;
  size_t calls = 0;
  for (const std::string_view piece : {" to=functions.", "add<|chan", "nel|>commentary json<|mess", "age|>{\"a\": 2,",
                                       " \"b\": 3}"})
    calls += pieces.push(piece).calls.size();
  CHECK(calls == 0);
  const HarmonyText end = pieces.push("<|call|>");
  REQUIRE(end.calls.size() == 1);
  CHECK(end.calls[0] == ToolCall{"add", "{\"a\": 2, \"b\": 3}"});
  // Cut short inside a call: no call, and its arguments are not content either.
  const HarmonyText cut = parse_harmony("<|channel|>commentary to=functions.add<|message|>{\"a\": 2");
  CHECK(cut.calls.empty());
  CHECK(cut.content.empty());
  // A builtin tool's message is dropped.
  const HarmonyText builtin = parse_harmony("<|channel|>analysis to=browser.search<|message|>{\"q\": 1}<|call|>");
  CHECK(builtin.calls.empty());
  CHECK(builtin.content.empty());
  CHECK(parse_harmony("<|channel|>commentary to=assistant<|message|>to you<|end|>").content == "to you");
  // The model starting the user's message: the answer ends there.
  HarmonyStream other;
  const HarmonyText o = other.push("<|channel|>final<|message|>Sure.<|end|><|start|>user");
  CHECK(o.content == "Sure.");
  CHECK_FALSE(other.done());  // "user" may still grow ("users"?): not yet a role
  CHECK(other.push("<|message|>").content.empty());
  CHECK(other.done());
  HarmonyStream other2;
  (void)other2.push("<|channel|>final<|message|>Sure.<|end|><|start|>user<|channel|>");
  CHECK(other2.done());
  // A stray <|end|> between messages is dropped.
  CHECK(parse_harmony("<|channel|>final<|message|>a<|end|><|end|><|start|>assistant<|channel|>final<|message|>b").content == "ab");
  // <|start|> without <|end|> before it still starts a new message.
  CHECK(parse_harmony("<|channel|>analysis<|message|>a<|start|>assistant<|channel|>final<|message|>b").content == "b");
}

TEST_CASE("harmony answers: unknown channels, no channel, cut short, no harmony at all") {
  // Unknown or missing channels: content (never lost to a header the model got wrong).
  const HarmonyText unknown = parse_harmony("<|channel|>musings<|message|>hmm<|end|><|start|>assistant<|channel|>final<|message|>ok");
  CHECK(unknown.content == "hmmok");
  CHECK(unknown.reasoning.empty());
  CHECK(parse_harmony("<|message|>bare").content == "bare");
  // Cut by the token limit: what was written so far, in its channel; a header cut short shows
  // nothing; a marker cut short was text after all.
  CHECK(parse_harmony("<|channel|>analysis<|message|>Let me th").reasoning == "Let me th");
  CHECK(parse_harmony("<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>fin").content.empty());
  CHECK(parse_harmony("<|channel|>analy").content.empty());
  CHECK(parse_harmony("<|channel|>final<|message|>a <|en").content == "a <|en");
  HarmonyStream cut;
  CHECK(cut.push("<|channel|>final<|message|>a <|en").content == "a ");
  CHECK(cut.flush().content == "<|en");
  CHECK(parse_harmony("").content.empty());
  // A model that writes no harmony: its text is the content, at the end or once it is
  // clearly no header.
  CHECK(parse_harmony("Once upon a time").content == "Once upon a time");
  CHECK(parse_harmony("Once upon a time<|return|>").content == "Once upon a time");
  HarmonyStream raw;
  const std::string long_text(300, 'a');
  CHECK(raw.push(long_text).content == long_text);
  CHECK(raw.push("<|end|>b").content == "<|end|>b");
}
