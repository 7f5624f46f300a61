#include "chat/chat_template.h"

#include <algorithm>
#include <utility>

#include "chat/chat_harmony.h"
#include "chat/chat_template_text.h"
#include "core/error.h"

namespace flashspec {

const char* chat_style_name(ChatStyle s) {
  switch (s) {
    case ChatStyle::Plain: return "plain";
    case ChatStyle::Llama2: return "llama-2";
    case ChatStyle::ChatML: return "chatml";
    case ChatStyle::Llama3: return "llama-3";
    case ChatStyle::Zephyr: return "zephyr";
    case ChatStyle::Gemma: return "gemma";
    case ChatStyle::Harmony: return "harmony";
    case ChatStyle::Jinja: return "jinja";
  }
  return "?";
}

std::optional<ChatStyle> parse_chat_style(std::string_view n) {
  if (n == "plain") return ChatStyle::Plain;
  if (n == "llama2" || n == "llama-2") return ChatStyle::Llama2;
  if (n == "chatml") return ChatStyle::ChatML;
  if (n == "llama3" || n == "llama-3") return ChatStyle::Llama3;
  if (n == "zephyr") return ChatStyle::Zephyr;
  if (n == "gemma") return ChatStyle::Gemma;
  if (n == "harmony" || n == "gpt-oss") return ChatStyle::Harmony;
  if (n == "jinja") return ChatStyle::Jinja;
  return std::nullopt;
}

std::optional<ChatStyle> detect_chat_style(std::string_view t) {
  // Most specific markers first: a llama-3 or chatml template may also mention [INST]
  // in a comment, never the other way round.
  if (t.find("<|channel|>") != std::string_view::npos) return ChatStyle::Harmony;
  if (t.find("<|start_header_id|>") != std::string_view::npos) return ChatStyle::Llama3;
  if (t.find("<|im_start|>") != std::string_view::npos) return ChatStyle::ChatML;
  if (t.find("<start_of_turn>") != std::string_view::npos) return ChatStyle::Gemma;
  if (t.find("<|user|>") != std::string_view::npos) return ChatStyle::Zephyr;
  if (t.find("[INST]") != std::string_view::npos) return ChatStyle::Llama2;
  return std::nullopt;
}

ChatFormat::ChatFormat(const Tokenizer& tok, ChatStyle style) : tok_(&tok), style_(style) {
  switch (style) {
    case ChatStyle::Plain:
      stop_text_ = "\nUser:";
      break;
    case ChatStyle::ChatML:
      im_start_ = special("<|im_start|>", false);
      turn_end_ = special("<|im_end|>", false);
      break;
    case ChatStyle::Llama3:
      start_header_ = special("<|start_header_id|>", false);
      end_header_ = special("<|end_header_id|>", false);
      turn_end_ = special("<|eot_id|>", false);
      break;
    case ChatStyle::Gemma:
      start_turn_ = special("<start_of_turn>", false);
      turn_end_ = special("<end_of_turn>", false);
      break;
    case ChatStyle::Harmony:
      h_start_ = special(harmony::kStart, false);
      h_message_ = special(harmony::kMessage, false);
      h_channel_ = special(harmony::kChannel, false);
      h_end_ = special(harmony::kEnd, false);
      turn_end_ = special(harmony::kReturn, false);
      call_ = special(harmony::kCall, true);
      h_constrain_ = special(harmony::kConstrain, true);
      break;
    case ChatStyle::Llama2:
    case ChatStyle::Zephyr:
      break;  // BOS/EOS only; zephyr's <|user|> markers are plain text in most vocabularies
    case ChatStyle::Jinja:
      throw Error("the jinja format renders the model's chat template, and there is none");
  }
}

ChatFormat::ChatFormat(const Tokenizer& tok, std::shared_ptr<const ChatTemplateRenderer> renderer,
                       std::string_view source)
    : tok_(&tok), style_(ChatStyle::Jinja), renderer_(std::move(renderer)) {
  template_tools_ = tool_call_syntax_of_template(source);
  for (std::string_view walk : {"arguments|items", "arguments | items", "arguments.items()"})
    arguments_as_object_ |= source.find(walk) != std::string_view::npos;
  // Reasoning templates: enable_thinking reaches the template, and the answer's
  // <think> blocks are hidden as for Qwen3 (ReasoningFilter).
  adopt_think_blocks(source);
}

namespace {
// gpt-oss's vocabulary (o200k_harmony): its GGUFs made from the npm tokenizer carry no chat
// template, so the markers are what says the model speaks harmony.
bool has_harmony_markers(const Tokenizer& tok) {
  for (std::string_view m : {harmony::kStart, harmony::kMessage, harmony::kChannel, harmony::kEnd, harmony::kReturn})
    if (tok.find_token(m) < 0) return false;
  return true;
}
}  // namespace

ChatFormat ChatFormat::for_model(const Tokenizer& tok, const std::string* chat_template,
                                 std::optional<ChatStyle> forced, std::string& notice,
                                 const MakeChatRenderer& make_renderer) {
  notice.clear();
  const bool has_template = chat_template && !chat_template->empty();
  if (forced == ChatStyle::Jinja) {
    if (!has_template) throw Error("--chat-format jinja: the model has no chat template");
    if (!make_renderer) throw Error("--chat-format jinja: no template engine here");
    try {
      return ChatFormat(tok, make_renderer(*chat_template), *chat_template);
    } catch (const Error& e) {
      throw Error(std::string("--chat-format jinja: ") + e.what());
    }
  }
  if (forced) {  // the user asked: missing tokens are an error
    try {
      return ChatFormat(tok, *forced);
    } catch (const Error& e) {
      throw Error(std::string("--chat-format ") + chat_style_name(*forced) + ": " + e.what());
    }
  }
  const std::optional<ChatStyle> style =
      chat_template ? detect_chat_style(*chat_template) : std::optional<ChatStyle>();
  if (!style && has_harmony_markers(tok)) return ChatFormat(tok, ChatStyle::Harmony);
  if (!has_template) return ChatFormat(tok, ChatStyle::Plain);
  // A chatml template that teaches Qwen XML tool calls (Qwen3.5, Qwen3-Coder) writes tools
  // as the fixed chatml format (Qwen3's Hermes blocks) does not: it renders itself.
  const bool xml_tools = style == ChatStyle::ChatML && tool_call_syntax_of_template(*chat_template) == ToolCallSyntax::QwenXml;
  if ((!style || xml_tools) && make_renderer) {
    try {
      return ChatFormat(tok, make_renderer(*chat_template), *chat_template);
    } catch (const Error& e) {
      notice = std::string("chat template not usable (") + e.what() + "); using the plain transcript format";
      return ChatFormat(tok, ChatStyle::Plain);
    }
  }
  if (!style) {
    notice = "chat template not recognised (known: llama-2, chatml, llama-3, zephyr, gemma, harmony); using "
             "the plain transcript format";
    return ChatFormat(tok, ChatStyle::Plain);
  }
  try {
    ChatFormat f(tok, *style);
    f.adopt_template_details(*chat_template);
    return f;
  } catch (const Error& e) {
    notice = std::string("chat template looks like ") + chat_style_name(*style) + " but " + e.what() +
             "; using the plain transcript format";
    return ChatFormat(tok, ChatStyle::Plain);
  }
}

void ChatFormat::adopt_template_details(std::string_view t) {
  if (style_ != ChatStyle::ChatML) return;
  static constexpr std::string_view kQwenSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
  if (t.find(kQwenSystem) != std::string_view::npos) default_system_ = kQwenSystem;
  adopt_think_blocks(t);
}

void ChatFormat::adopt_think_blocks(std::string_view t) {
  if (t.find("<think>") == std::string_view::npos) return;
  think_open_ = special("<think>", true);
  think_close_ = special("</think>", true);
  if (think_open_ < 0 || think_close_ < 0) think_open_ = think_close_ = -1;
}

int32_t ChatFormat::special(std::string_view text, bool optional) const {
  const int32_t id = tok_->find_token(text);
  if (id < 0 && !optional)
    throw Error("the vocabulary has no '" + std::string(text) + "' token");
  return id;
}

ChatFormat::Part ChatFormat::marker(std::string_view text) const {
  const int32_t id = special(text, true);
  if (id >= 0 && (tok_->token_type(id) == TokenType::Control || tok_->token_type(id) == TokenType::UserDefined))
    return Part{id, {}};
  return Part{-1, std::string(text)};
}

std::vector<int32_t> ChatFormat::tokenize(const std::vector<Part>& parts) const {
  std::vector<int32_t> out;
  std::string text;  // adjacent text parts are one fragment, as in the templated string
  auto flush_text = [&] {
    if (text.empty()) return;
    const std::vector<int32_t> ids = tok_->encode(text, false, control_tokens_in_text_);
    out.insert(out.end(), ids.begin(), ids.end());
    text.clear();
  };
  for (const Part& p : parts) {
    if (p.id < 0) {
      text += p.text;
      continue;
    }
    flush_text();
    out.push_back(p.id);
  }
  flush_text();
  return out;
}

std::string trimmed(const std::string& s) {
  static constexpr const char* kSpace = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

void ChatFormat::user_turn(std::vector<Part>& parts, std::string_view user) const {
  user_message(parts, std::string(user));
  assistant_header(parts);
}

// ChatML, Llama 3, Zephyr and Gemma write every turn alike: a header naming the role, the
// text, an end. open_turn writes the header, close_turn the end.
void ChatFormat::open_turn(std::vector<Part>& parts, const std::string& role) const {
  switch (style_) {
    case ChatStyle::ChatML:
      parts.push_back({im_start_, {}});
      parts.push_back({-1, role + "\n"});
      break;
    case ChatStyle::Llama3:
      parts.push_back({start_header_, {}});
      parts.push_back({-1, role});
      parts.push_back({end_header_, {}});
      parts.push_back({-1, "\n\n"});
      break;
    case ChatStyle::Zephyr:
      parts.push_back(marker(std::string("<|").append(role).append("|>")));
      parts.push_back({-1, "\n"});
      break;
    case ChatStyle::Gemma:
      parts.push_back({start_turn_, {}});
      parts.push_back({-1, role + "\n"});
      break;
    case ChatStyle::Plain:
    case ChatStyle::Llama2:
    case ChatStyle::Harmony:
    case ChatStyle::Jinja:
      throw Error("chat format: turns of this style are not written by open_turn");
  }
}

void ChatFormat::close_turn(std::vector<Part>& parts) const {
  parts.push_back({style_ == ChatStyle::Zephyr ? tok_->eos() : turn_end_, {}});
  if (style_ != ChatStyle::Llama3) parts.push_back({-1, "\n"});
}

void ChatFormat::whole_turn(std::vector<Part>& parts, const std::string& role, const std::string& text) const {
  open_turn(parts, role);
  parts.push_back({-1, text});
  close_turn(parts);
}

void ChatFormat::system_message(std::vector<Part>& parts, const std::string& sys) const {
  switch (style_) {
    case ChatStyle::Plain:
      parts.push_back({-1, sys + "\n"});
      break;
    case ChatStyle::Llama2:  // nested in the first [INST]: see first_turn and render_llama2
    case ChatStyle::Gemma:   // folded into the first user turn: see first_turn and render_gemma
    case ChatStyle::Harmony:  // rendered whole by render_harmony
    case ChatStyle::Jinja:    // and by the template
      break;
    case ChatStyle::ChatML:
    case ChatStyle::Llama3:
    case ChatStyle::Zephyr:
      whole_turn(parts, "system", sys);
      break;
  }
}

void ChatFormat::user_message(std::vector<Part>& parts, const std::string& u) const {
  switch (style_) {
    case ChatStyle::Plain:
      parts.push_back({-1, "User: " + u + "\n"});
      break;
    case ChatStyle::Llama2:
      parts.push_back({-1, "[INST] " + u + " [/INST]"});
      break;
    case ChatStyle::ChatML:
    case ChatStyle::Llama3:
    case ChatStyle::Zephyr:
      whole_turn(parts, "user", u);
      break;
    case ChatStyle::Gemma:
      whole_turn(parts, "user", trimmed(u));
      break;
    case ChatStyle::Harmony:  // rendered whole by render_harmony
    case ChatStyle::Jinja:    // and by the template
      break;
  }
}

void ChatFormat::assistant_header(std::vector<Part>& parts) const {
  switch (style_) {
    case ChatStyle::Plain:
      parts.push_back({-1, "Assistant:"});
      break;
    case ChatStyle::Llama2:
      break;  // the answer follows [/INST] directly
    case ChatStyle::ChatML:
      open_turn(parts, "assistant");
      if (reasons() && !thinking_) {
        parts.push_back({think_open_, {}});
        parts.push_back({-1, "\n\n"});
        parts.push_back({think_close_, {}});
        parts.push_back({-1, "\n\n"});
      }
      break;
    case ChatStyle::Llama3:
    case ChatStyle::Zephyr:
      open_turn(parts, "assistant");
      break;
    case ChatStyle::Gemma:
      open_turn(parts, "model");
      break;
    case ChatStyle::Harmony:  // rendered whole by render_harmony
    case ChatStyle::Jinja:    // and by the template
      break;
  }
}

namespace {
// An answer as the model wrote it after "Assistant:" or "[/INST]": SentencePiece answers
// start with a space ("▁Once"), which a client may have trimmed; put it back so the
// history reads as the model's own answer did.
std::string spaced(const std::string& a) {
  return a.empty() || a.front() == ' ' || a.front() == '\n' ? a : " " + a;
}
}  // namespace

std::string without_reasoning(const std::string& a) {
  const size_t close = a.rfind("</think>");
  if (close == std::string::npos) return a;
  const std::string rest = a.substr(close + 8);
  const size_t b = rest.find_first_not_of('\n');
  return b == std::string::npos ? std::string() : rest.substr(b);
}


void ChatFormat::assistant_message(std::vector<Part>& parts, const std::string& a) const {
  switch (style_) {
    case ChatStyle::Plain:
      parts.push_back({-1, "Assistant:" + spaced(a) + "\n"});
      break;
    case ChatStyle::Llama2:
      parts.push_back({-1, spaced(a)});
      parts.push_back({tok_->eos(), {}});
      break;
    case ChatStyle::ChatML:
      whole_turn(parts, "assistant", reasons() ? without_reasoning(a) : a);
      break;
    case ChatStyle::Llama3:
    case ChatStyle::Zephyr:
      whole_turn(parts, "assistant", a);
      break;
    case ChatStyle::Gemma:
      whole_turn(parts, "model", trimmed(a));
      break;
    case ChatStyle::Harmony:  // rendered whole by render_harmony
    case ChatStyle::Jinja:    // and by the template
      break;
  }
}

std::vector<int32_t> ChatFormat::first_turn(std::string_view user, std::string_view system) const {
  if (style_ == ChatStyle::Harmony || style_ == ChatStyle::Jinja) {
    std::vector<ChatMessage> msgs;
    if (!system.empty()) msgs.push_back({ChatRole::System, std::string(system)});
    msgs.push_back({ChatRole::User, std::string(user)});
    return render(msgs);
  }
  std::vector<Part> parts;
  if (tok_->add_bos() || style_ == ChatStyle::Llama2) parts.push_back({tok_->bos(), {}});
  const std::string sys = system.empty() ? default_system_ : std::string(system);
  if (!sys.empty() && style_ == ChatStyle::Llama2) {
    // The system block sits inside the first [INST].
    parts.push_back({-1, "[INST] <<SYS>>\n" + sys + "\n<</SYS>>\n\n" + std::string(user) + " [/INST]"});
    return tokenize(parts);
  }
  if (!sys.empty() && style_ == ChatStyle::Gemma) {
    // The system prompt and a blank line open the first user turn (Gemma has no system role).
    parts.push_back({start_turn_, {}});
    parts.push_back({-1, "user\n" + sys + "\n\n" + trimmed(std::string(user))});
    parts.push_back({turn_end_, {}});
    parts.push_back({-1, "\n"});
    assistant_header(parts);
    return tokenize(parts);
  }
  if (!sys.empty()) system_message(parts, sys);
  user_turn(parts, user);
  return tokenize(parts);
}

std::vector<int32_t> ChatFormat::next_turn(std::string_view user, AnswerEnd end, int32_t last_token) const {
  std::vector<Part> parts;
  switch (style_) {
    case ChatStyle::Plain:
      if (end == AnswerEnd::StopText) {
        // The answer already ends with "\nUser:": continue that line.
        parts.push_back({-1, std::string(user) + "\nAssistant:"});
        return tokenize(parts);
      }
      parts.push_back({-1, "\n"});
      break;
    case ChatStyle::Llama2:
      if (last_token != tok_->eos()) parts.push_back({tok_->eos(), {}});
      parts.push_back({tok_->bos(), {}});
      break;
    case ChatStyle::ChatML:
      if (last_token != turn_end_) parts.push_back({turn_end_, {}});
      parts.push_back({-1, "\n"});
      break;
    case ChatStyle::Llama3:
      if (last_token != turn_end_) parts.push_back({turn_end_, {}});
      break;
    case ChatStyle::Zephyr:
      if (last_token != tok_->eos()) parts.push_back({tok_->eos(), {}});
      parts.push_back({-1, "\n"});
      break;
    case ChatStyle::Gemma:
      if (last_token != turn_end_) parts.push_back({turn_end_, {}});
      parts.push_back({-1, "\n"});
      break;
    case ChatStyle::Jinja:
      throw Error("internal: the jinja format renders whole conversations, not turns");
    case ChatStyle::Harmony: {
      // An answer that ended on its own ends with <|return|> or <|call|> (kept in the session
      // where the template would write <|end|>); one cut short, or after a message, is closed.
      if (last_token != turn_end_ && last_token != call_ && last_token != h_end_) parts.push_back({h_end_, {}});
      std::vector<HarmonyPiece> pieces;
      harmony_user_turn(pieces, user);
      add_harmony(parts, pieces);
      return tokenize(parts);
    }
  }
  user_turn(parts, user);
  return tokenize(parts);
}

std::optional<ChatRole> parse_chat_role(std::string_view n) {
  if (n == "system" || n == "developer") return ChatRole::System;
  if (n == "user") return ChatRole::User;
  if (n == "assistant") return ChatRole::Assistant;
  if (n == "tool") return ChatRole::Tool;
  return std::nullopt;
}

std::vector<int32_t> ChatFormat::next_turn_replacing(std::string_view answer, std::string_view user) const {
  if (!rewrites_answers()) throw Error(std::string("internal: the ") + chat_style_name(style_) + " format keeps answers as written");
  std::vector<HarmonyPiece> pieces;
  harmony_past_answer(pieces, answer);
  harmony_user_turn(pieces, user);
  std::vector<Part> parts;
  add_harmony(parts, pieces);
  return tokenize(parts);
}

std::vector<int32_t> ChatFormat::render(std::span<const ChatMessage> messages, const nlohmann::ordered_json& tools) const {
  if (messages.empty()) throw Error("messages: the conversation is empty");
  if (style_ == ChatStyle::Jinja) return render_jinja(messages, tools);
  std::vector<Part> parts;
  if (tok_->add_bos() || style_ == ChatStyle::Llama2) parts.push_back({tok_->bos(), {}});
  const bool with_tools = !tools.empty() || std::any_of(messages.begin(), messages.end(), [](const ChatMessage& m) {
    return m.role == ChatRole::Tool || !m.tool_calls.empty();
  });
  if (with_tools) {
    if (style_ == ChatStyle::ChatML) render_chatml_tools(parts, messages, tools);
    else if (style_ == ChatStyle::Llama3) render_llama3_tools(parts, messages, tools);
    else if (style_ == ChatStyle::Harmony) add_harmony(parts, render_harmony(messages, harmony_settings(), tools));
    else throw Error(std::string("tools: the ") + chat_style_name(style_) + " chat format has no tool calls");
    return tokenize(parts);
  }
  if (style_ == ChatStyle::Llama2) {
    render_llama2(parts, messages);
    return tokenize(parts);
  }
  if (style_ == ChatStyle::Gemma) {
    render_gemma(parts, messages);
    return tokenize(parts);
  }
  if (style_ == ChatStyle::Harmony) {
    add_harmony(parts, render_harmony(messages, harmony_settings()));
    return tokenize(parts);
  }
  if (messages.front().role != ChatRole::System && !default_system_.empty()) system_message(parts, default_system_);
  for (const ChatMessage& m : messages) {
    const std::string content = style_ == ChatStyle::Llama3 ? trimmed(m.content) : m.content;
    switch (m.role) {
      case ChatRole::System: system_message(parts, content); break;
      case ChatRole::User: user_message(parts, content); break;
      case ChatRole::Assistant: assistant_message(parts, content); break;
      case ChatRole::Tool: break;  // with_tools above
    }
  }
  assistant_header(parts);
  return tokenize(parts);
}

void ChatFormat::render_llama2(std::vector<Part>& parts, std::span<const ChatMessage> messages) const {
  size_t i = 0;
  std::string sys = default_system_;
  if (messages[0].role == ChatRole::System) sys = messages[i++].content;
  const char* kRule = "llama-2 conversations alternate user and assistant messages after an optional first "
                      "system message, ending with a user message";
  if (i == messages.size()) throw Error(std::string("messages: ") + kRule);
  for (size_t k = 0; i < messages.size(); ++i, ++k) {
    const ChatMessage& m = messages[i];
    const ChatRole expected = k % 2 == 0 ? ChatRole::User : ChatRole::Assistant;
    if (m.role != expected) throw Error("messages[" + std::to_string(i) + "]: " + kRule);
    if (m.role == ChatRole::Assistant) {
      assistant_message(parts, m.content);
      continue;
    }
    if (k > 0) parts.push_back({tok_->bos(), {}});
    if (k == 0 && !sys.empty())
      parts.push_back({-1, "[INST] <<SYS>>\n" + sys + "\n<</SYS>>\n\n" + m.content + " [/INST]"});
    else
      user_message(parts, m.content);
  }
  if (messages.back().role != ChatRole::User) throw Error(std::string("messages: ") + kRule);
}

// Gemma 3's template: an optional first system message becomes the prefix of the first
// user message ("{system}\n\n"), the other messages must alternate user, assistant, user, ...
// (it raises "Conversation roles must alternate user/assistant/user/assistant/..."
// otherwise), each is trimmed; a system message alone renders as the generation prompt.
void ChatFormat::render_gemma(std::vector<Part>& parts, std::span<const ChatMessage> messages) const {
  size_t i = 0;
  std::string prefix;
  if (messages[0].role == ChatRole::System) prefix = messages[i++].content + "\n\n";
  for (size_t k = 0; i < messages.size(); ++i, ++k) {
    const ChatMessage& m = messages[i];
    const ChatRole expected = k % 2 == 0 ? ChatRole::User : ChatRole::Assistant;
    if (m.role != expected) {
      const std::string what = m.role == ChatRole::System      ? "a system message after the first message"
                               : m.role == ChatRole::Assistant ? "an assistant message where a user message is due"
                                                               : "a user message where an assistant message is due";
      throw Error("messages[" + std::to_string(i) + "]: " + what +
                  ": Gemma's chat template needs user and assistant messages alternating, starting with a user "
                  "message (after an optional system message)");
    }
    if (m.role == ChatRole::Assistant) {
      assistant_message(parts, m.content);
      continue;
    }
    parts.push_back({start_turn_, {}});
    parts.push_back({-1, "user\n" + (k == 0 ? prefix : std::string()) + trimmed(m.content)});
    parts.push_back({turn_end_, {}});
    parts.push_back({-1, "\n"});
  }
  assistant_header(parts);
}

void ChatFormat::set_reasoning_effort(std::string_view effort) {
  if (effort.empty()) {
    effort_.clear();
    return;
  }
  const std::optional<std::string> e = parse_reasoning_effort(effort);
  if (!e) throw Error("reasoning_effort: '" + std::string(effort) + "' is not one of low, medium, high");
  effort_ = *e;
}

std::string ChatFormat::reasoning_effort() const {
  if (!effort_.empty()) return effort_;
  return thinking_ ? "medium" : "low";  // off: the least gpt-oss can think, hidden anyway
}

HarmonySettings ChatFormat::harmony_settings() const {
  HarmonySettings s;
  s.date = date_.empty() ? local_date_today() : date_;
  s.effort = reasoning_effort();
  return s;
}

void ChatFormat::add_harmony(std::vector<Part>& parts, const std::vector<HarmonyPiece>& pieces) const {
  for (const HarmonyPiece& p : pieces) {
    if (p.marker) parts.push_back({special(p.text, false), {}});
    else parts.push_back({-1, p.text});
  }
}

std::vector<int32_t> ChatFormat::harmony_call_opening(std::string_view function) const {
  if (style_ != ChatStyle::Harmony) throw Error("internal: a harmony call opening in another chat format");
  std::vector<Part> parts;
  for (const HarmonyPiece& p : flashspec::harmony_call_opening(function))
    parts.push_back(p.marker ? marker(p.text) : Part{-1, p.text});
  return tokenize(parts);
}

bool ChatFormat::is_harmony_marker(int32_t id) const {
  if (style_ != ChatStyle::Harmony || id < 0) return false;
  for (const int32_t m : {h_start_, h_message_, h_channel_, h_end_, h_constrain_, turn_end_, call_})
    if (id == m) return true;
  return false;
}

std::string ChatFormat::output_piece(int32_t id) const {
  return is_harmony_marker(id) ? tok_->token_text(id) : tok_->token_to_piece(id);
}

namespace {
// Length of the longest tail of `s` that is a proper prefix of `marker`: text that may
// still grow into the marker and must wait for the next push.
size_t partial_tail(const std::string& s, std::string_view marker) {
  size_t keep = std::min(s.size(), marker.size() - 1);
  while (keep > 0 && s.compare(s.size() - keep, keep, marker, 0, keep) != 0) --keep;
  return keep;
}
}  // namespace

std::string ReasoningFilter::push(std::string_view text) {
  static constexpr std::string_view kOpen = "<think>", kClose = "</think>";
  pending_.append(text);
  std::string out;
  for (;;) {
    if (inside_) {
      const size_t hit = pending_.find(kClose);
      if (hit == std::string::npos) {
        pending_.erase(0, pending_.size() - partial_tail(pending_, kClose));
        return out;
      }
      pending_.erase(0, hit + kClose.size());
      inside_ = false;
      after_close_ = true;
    }
    if (after_close_) {  // the template puts "\n\n" after </think>: not part of the answer
      const size_t text_start = pending_.find_first_not_of('\n');
      if (text_start == std::string::npos) {
        pending_.clear();
        return out;
      }
      pending_.erase(0, text_start);
      after_close_ = false;
    }
    const size_t hit = pending_.find(kOpen);
    if (hit == std::string::npos) {
      const size_t keep = partial_tail(pending_, kOpen);
      out += pending_.substr(0, pending_.size() - keep);
      pending_.erase(0, pending_.size() - keep);
      return out;
    }
    out += pending_.substr(0, hit);
    pending_.erase(0, hit + kOpen.size());
    inside_ = true;
  }
}

std::string ReasoningFilter::flush() {
  if (inside_) pending_.clear();
  return std::exchange(pending_, {});
}

StopTextFilter::StopTextFilter(std::vector<std::string> stops) {
  for (std::string& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopTextFilter::push(std::string_view text) {
  if (stopped_) return {};
  pending_.append(text);
  if (stops_.empty()) return std::exchange(pending_, {});
  size_t hit = std::string::npos;
  for (const std::string& s : stops_) hit = std::min(hit, pending_.find(s));
  if (hit != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, hit);
    pending_.clear();
    return out;
  }
  // Keep the longest tail of pending_ that could still grow into a stop text.
  size_t keep = 0;
  for (const std::string& s : stops_) keep = std::max(keep, partial_tail(pending_, s));
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StopTextFilter::flush() { return std::exchange(pending_, {}); }

}  // namespace flashspec
