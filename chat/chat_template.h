#pragma once
// Chat turn formatting for `flashspec chat` (and the server). The style is recognised from
// markers in the GGUF's tokenizer.chat_template text and each turn is built here, as token
// ids; a template none of the styles below recognises is rendered by the template itself
// (style "jinja", ChatTemplateRenderer: jinja/chat_renderer.h), as is any with
// --chat-format jinja. Our tokenizer does not parse control tokens out of text, so
// a turn is a list of parts (plain text, or one special token looked up by its text)
// that is tokenized part by part. Plain-text parts are encoded as llama.cpp encodes the
// raw fragments of a templated string: each gets the SentencePiece space prefix.
//
// Styles (what one user turn looks like, {u} the user's text):
//   plain   (no template)  "User: {u}\nAssistant:"      later turns "\nUser: {u}\nAssistant:"
//   llama-2 "[INST]"        <s>[INST] {u} [/INST]        answer ends with </s>
//   chatml  "<|im_start|>"  <|im_start|>user\n{u}<|im_end|>\n<|im_start|>assistant\n
//   llama-3 "<|start_header_id|>"
//           <|start_header_id|>user<|end_header_id|>\n\n{u}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n
//   zephyr  "<|user|>"      <|user|>\n{u}</s>\n<|assistant|>\n
//   gemma   "<start_of_turn>"
//           <start_of_turn>user\n{u}<end_of_turn>\n<start_of_turn>model\n
//           (Gemma 3's template: no system role, the system prompt and a blank line open the
//           first user turn; every message is trimmed; roles alternate user/assistant)
//   harmony "<|channel|>"   (gpt-oss; also chosen without a template when the vocabulary has
//           its markers) <|start|>user<|message|>{u}<|end|><|start|>assistant
//           after a system message of its own with the date and the reasoning effort: see
//           chat/chat_harmony.h; the answer's channels are split by chat/harmony_stream.h.
//   jinja   (any other template) the template's own rendering of the whole conversation
//           (HF's context: messages, tools, add_generation_prompt, bos_token, eos_token,
//           enable_thinking), tokenized with its control tokens parsed; BOS added when the
//           vocabulary adds one and the rendering does not start with it. Chat re-renders the
//           conversation each turn and prefills what differs from the session.
// Reasoning models (Qwen3: a chatml template that mentions <think>) think by default; with
// thinking off the assistant header is followed by an empty "<think>\n\n</think>\n\n",
// as the template's enable_thinking=false renders it, and the app hides any reasoning
// that appears anyway (ReasoningFilter).
// gpt-oss always reasons (its analysis channel); thinking sets how much: "Reasoning: low"
// when off, "medium" (its template's default) when on; set_reasoning_effort() picks any of
// low, medium, high instead. Its reasoning is the analysis channel, never shown as content.
// When a later turn starts, the previous answer is closed first: the style's
// end-of-turn token is added if the answer did not end with it (cut by -n or Ctrl-C).
// In the plain style the model may start the user's next line itself; the app stops the
// answer at "\nUser:" and the next turn continues that line instead of repeating it.
//
// The server renders a whole OpenAI message list instead (render()): each message as the
// turns above write it, then the assistant header. An assistant message in the history is
// written as the style closes an answer: plain "Assistant:{a}\n", llama-2 "{a}</s>",
// chatml "<|im_start|>assistant\n{a}<|im_end|>\n", llama-3 header + "{a}<|eot_id|>",
// zephyr "<|assistant|>\n{a}</s>\n", gemma "<start_of_turn>model\n{a}<end_of_turn>\n"
// (plain and llama-2 answers are SentencePiece text
// that starts with a space: one is put back where a client trimmed it). So a conversation
// whose history is the session's own earlier prompt and answer renders to the tokens
// already in the session, and only the new turn is prefilled. Template details that break
// that identity are kept where the template has them: Llama 3 and Gemma trim every message; Qwen3
// drops the reasoning (and the empty think block) of earlier answers, so there the
// previous answer is prefilled again. The same holds for harmony, whose template keeps only the
// final text of earlier answers and closes them with <|end|> where the model wrote <|return|>.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/tool_calls.h"
#include "core/byte_range.h"
#include "tokenizer/tokenizer.h"

namespace flashspec {

struct HarmonyPiece;     // chat/chat_harmony.h
struct HarmonySettings;

enum class ChatStyle { Plain, Llama2, ChatML, Llama3, Zephyr, Gemma, Harmony, Jinja };

const char* chat_style_name(ChatStyle s);
// "plain", "llama2"/"llama-2", "chatml", "llama3"/"llama-3", "zephyr", "gemma",
// "harmony"/"gpt-oss", "jinja"; nullopt otherwise.
std::optional<ChatStyle> parse_chat_style(std::string_view name);
// The style a Jinja chat template implements, recognised by its markers; nullopt when
// none is recognised.
std::optional<ChatStyle> detect_chat_style(std::string_view jinja);

// Roles of an OpenAI-style message list.
enum class ChatRole { System, User, Assistant, Tool };

struct ChatMessage {
  ChatRole role = ChatRole::User;
  std::string content;
  // An assistant message's reasoning (OpenAI's reasoning_content). Harmony checks it but, as
  // its template, never writes it back; the other styles ignore it.
  std::string reasoning = {};
  std::vector<ToolCall> tool_calls = {};  // an assistant message's calls (arguments: JSON objects)
  std::string tool_call_id = {};          // a tool message: the call it answers
};

// "system" (and OpenAI's newer name for it, "developer"), "user", "assistant", "tool";
// nullopt for any other role.
std::optional<ChatRole> parse_chat_role(std::string_view name);

// A chat template engine's rendering of a whole conversation (jinja/chat_renderer.h renders
// the GGUF's own Jinja template). `date` (YYYY-MM-DD) is the day strftime_now gives; "" for
// today's. Error (one line) where the template refuses the conversation. `markup` holds the
// byte ranges of the text that the template wrote itself (its literals, and the context's
// bos_token and eos_token): control tokens are read there only, never in the conversation's
// strings (messages, tool calls and results, tools).
struct RenderedChat {
  std::string text;
  ByteRanges markup;
};
class ChatTemplateRenderer {
 public:
  virtual ~ChatTemplateRenderer() = default;
  virtual RenderedChat render(const nlohmann::ordered_json& context, std::string_view date) const = 0;
};
// Makes a renderer from a template's source; Error when it does not parse.
using MakeChatRenderer = std::function<std::shared_ptr<const ChatTemplateRenderer>(std::string_view source)>;

// How an answer ended (engine/turn.h); decides how the next chat turn closes it.
enum class AnswerEnd {
  Length,     // its token limit reached
  EndToken,   // end-of-generation or the style's end-of-turn token
  StopText,   // a stop text (plain style: the model started the user's next line, "\nUser:")
  Cancelled,  // Ctrl-C, or a client that hung up
};

class ChatFormat {
 public:
  // A format for `style` over `tok`. Error naming the token when a special token the
  // style needs is not in the vocabulary.
  ChatFormat(const Tokenizer& tok, ChatStyle style);

  // The format for a model: `forced` (from --chat-format) when given, else the style of
  // `chat_template` (tokenizer.chat_template, may be null). Without a template it
  // recognises, a vocabulary with harmony's markers (gpt-oss's) is harmony. Falls back to
  // plain when the template is absent, unrecognised or needs special tokens the vocabulary
  // lacks; in the last two cases `notice` gets one line saying why. With `make_renderer`, an
  // unrecognised template (and any with forced jinja) is rendered by the template itself;
  // plain, with a notice, when it does not parse.
  static ChatFormat for_model(const Tokenizer& tok, const std::string* chat_template,
                              std::optional<ChatStyle> forced, std::string& notice,
                              const MakeChatRenderer& make_renderer = {});
  // The jinja style: `renderer` renders the template whose source is `source`.
  ChatFormat(const Tokenizer& tok, std::shared_ptr<const ChatTemplateRenderer> renderer, std::string_view source);
  // Takes what the template adds to the style: reasoning blocks (chatml with <think>
  // tokens), the default system prompt Qwen2.5's template writes when none is given.
  void adopt_template_details(std::string_view chat_template);

  ChatStyle style() const { return style_; }
  // The template is a reasoning model's (<think> blocks, or harmony's analysis channel);
  // thinking is then off unless set.
  bool reasons() const { return think_open_ >= 0 || style_ == ChatStyle::Harmony; }
  void set_thinking(bool on) { thinking_ = on; }
  // Reads control tokens typed in messages, tool calls and tools as tokens (off: as text,
  // the default). For the rare user who builds turns by hand inside a message; it lets any
  // user of a server close their turn and write another role's.
  void set_control_tokens_in_text(bool on) { control_tokens_in_text_ = on; }
  // Harmony: the reasoning effort ("low", "medium" or "high"; Error otherwise), instead of
  // the one thinking implies; "" goes back to that.
  void set_reasoning_effort(std::string_view effort);
  std::string reasoning_effort() const;  // the one harmony's system message states
  // Harmony: the day its system message states (YYYY-MM-DD), for renderings that must not
  // depend on the clock (tests); "" (the default) is today's local date at each rendering.
  void set_date(std::string date) { date_ = std::move(date); }

  // Tokens of the first turn of a conversation: BOS (when the vocabulary adds one), the
  // system prompt (if any), the user's turn and the assistant header.
  std::vector<int32_t> first_turn(std::string_view user, std::string_view system) const;
  // Tokens of a later turn: closes the previous answer (which ended with `last_token`,
  // -1 for none, the way `end` says) and adds the user's turn and the assistant header.
  std::vector<int32_t> next_turn(std::string_view user, AnswerEnd end, int32_t last_token) const;
  // Harmony, whose template keeps only the final text of earlier answers: a later turn of
  // `flashspec chat` that first writes the previous answer again as the history holds it
  // ("<|channel|>final<|message|>{answer}<|end|>", its reasoning dropped), for a session
  // rewound to just after that answer's assistant header; then the user's turn and the
  // assistant header. The session then holds what render() writes for the conversation, as
  // gpt-oss expects (it was trained without the reasoning of earlier answers). Error for the
  // other styles, whose answers stay in the history as the model wrote them (next_turn).
  bool rewrites_answers() const { return style_ == ChatStyle::Harmony; }
  // The jinja style: chat renders the whole conversation each turn (render()) and prefills
  // only what differs from what the session holds; first_turn / next_turn are Errors.
  bool renders_whole_conversation() const { return style_ == ChatStyle::Jinja; }
  std::vector<int32_t> next_turn_replacing(std::string_view answer, std::string_view user) const;
  // Tokens of a whole conversation, as the model's template renders it with the generation
  // prompt: BOS, the default system prompt when the list starts without one, every message,
  // then the assistant header. Error (one line) for an empty list; for llama-2 when the
  // roles do not alternate user/assistant after an optional first system message or the
  // list does not end with a user message; for gemma when the roles do not alternate
  // user/assistant after an optional first system message (a conversation that starts with
  // an assistant message, say): their templates refuse those too.
  //
  // With `tools` (OpenAI's tool definitions, {"type": "function", "function": {...}}), or
  // tool calls and tool messages in the list, the conversation is written as the family's
  // template writes tools (chat/chat_template_tools.cpp): chatml as Qwen's (Hermes
  // <tool_call> blocks, results in <tool_response> blocks of a user turn), llama-3 as Llama
  // 3.1's (the tools in the first user message, calls as JSON, results as ipython turns).
  // Error for the other styles, and where those templates refuse the conversation.
  std::vector<int32_t> render(std::span<const ChatMessage> messages,
                              const nlohmann::ordered_json& tools = nlohmann::ordered_json::array()) const;
  // The syntax this format's answers write tool calls in; nullopt when it has none.
  std::optional<ToolCallSyntax> tool_call_syntax() const;
  // Harmony: harmony_call_opening(function) as tokens to append to a rendered prompt (a
  // marker the vocabulary lacks, <|constrain|>, as text).
  std::vector<int32_t> harmony_call_opening(std::string_view function) const;

  // True for a token that ends the assistant's turn in this style (besides the
  // tokenizer's end-of-generation tokens), e.g. <|im_end|>; harmony's <|return|> and <|call|>.
  bool is_turn_end(int32_t id) const { return id >= 0 && (id == turn_end_ || id == call_); }
  int32_t turn_end_token() const { return turn_end_; }  // -1: none
  // The text a generated token adds to what the answer's parser reads: harmony's markers
  // (<|channel|>, <|message|>, <|return|>, ...) spelled out, even those the tokenizer prints
  // as nothing (control tokens); any other token as the tokenizer prints it.
  std::string output_piece(int32_t id) const;
  // Text that, once it appears in an answer, means the model started speaking for the
  // user: the answer stops there and the text is not shown. Empty: none.
  const std::string& stop_text() const { return stop_text_; }

 private:
  struct Part {
    int32_t id = -1;   // a special token, or -1 for text
    std::string text;  // plain text (encoded with the space prefix)
  };
  std::vector<int32_t> tokenize(const std::vector<Part>& parts) const;
  // Special token by text; when absent: -1 if `optional`, else Error.
  int32_t special(std::string_view text, bool optional) const;
  // A template with <think> blocks: their tokens, when the vocabulary has both.
  void adopt_think_blocks(std::string_view chat_template);
  // A marker that is a special token when the vocabulary has one, else plain text.
  Part marker(std::string_view text) const;
  void user_turn(std::vector<Part>& parts, std::string_view user) const;
  // One message of each role and the assistant header (not llama-2, which nests them).
  void system_message(std::vector<Part>& parts, const std::string& system) const;
  void user_message(std::vector<Part>& parts, const std::string& user) const;
  void assistant_message(std::vector<Part>& parts, const std::string& answer) const;
  void assistant_header(std::vector<Part>& parts) const;
  // A turn's header and end in the styles whose turns all look alike (ChatML, Llama 3,
  // Zephyr, Gemma), and a whole turn.
  void open_turn(std::vector<Part>& parts, const std::string& role) const;
  void close_turn(std::vector<Part>& parts) const;
  void whole_turn(std::vector<Part>& parts, const std::string& role, const std::string& text) const;
  void render_llama2(std::vector<Part>& parts, std::span<const ChatMessage> messages) const;
  void render_gemma(std::vector<Part>& parts, std::span<const ChatMessage> messages) const;
  // chat/chat_template_jinja.cpp
  std::vector<int32_t> render_jinja(std::span<const ChatMessage> messages, const nlohmann::ordered_json& tools) const;
  // chat/chat_template_tools.cpp
  void render_chatml_tools(std::vector<Part>& parts, std::span<const ChatMessage> messages,
                           const nlohmann::ordered_json& tools) const;
  void render_llama3_tools(std::vector<Part>& parts, std::span<const ChatMessage> messages,
                           const nlohmann::ordered_json& tools) const;
  // Harmony's pieces (chat/chat_harmony.h) as parts: its markers are special tokens.
  void add_harmony(std::vector<Part>& parts, const std::vector<HarmonyPiece>& pieces) const;
  HarmonySettings harmony_settings() const;
  bool is_harmony_marker(int32_t id) const;

  const Tokenizer* tok_;
  ChatStyle style_;
  int32_t turn_end_ = -1;  // token closing an assistant turn (-1: the end-of-generation ones)
  int32_t im_start_ = -1, start_header_ = -1, end_header_ = -1, start_turn_ = -1;
  int32_t think_open_ = -1, think_close_ = -1;  // <think> </think> of a reasoning template
  // harmony's markers (turn_end_ is its <|return|>; <|constrain|> may be absent)
  int32_t h_start_ = -1, h_message_ = -1, h_channel_ = -1, h_end_ = -1, h_constrain_ = -1, call_ = -1;
  bool thinking_ = false;
  bool control_tokens_in_text_ = false;
  std::string stop_text_, default_system_, effort_, date_;
  std::shared_ptr<const ChatTemplateRenderer> renderer_;  // the jinja style's
  std::optional<ToolCallSyntax> template_tools_;           // the jinja style's tool calls
  bool arguments_as_object_ = false;  // the jinja template walks tool call arguments' items
};

// Streams an answer's text without its reasoning: <think>...</think> blocks (and the
// newlines after them) are dropped, even when the markers arrive split over tokens.
class ReasoningFilter {
 public:
  std::string push(std::string_view text);
  std::string flush();  // what is held back at the end (nothing inside an open block)

 private:
  std::string pending_;
  bool inside_ = false, after_close_ = false;
};

// Streams an answer's text while holding back anything that might be the start of a
// stop text, so a stop text is never shown even when it arrives split over tokens (or
// ends in the middle of one). Several stop texts (the server's "stop" list): the text is
// cut where the first of them to appear starts. Empty stop texts are ignored.
class StopTextFilter {
 public:
  explicit StopTextFilter(std::string stop) : StopTextFilter(std::vector<std::string>{std::move(stop)}) {}
  explicit StopTextFilter(std::vector<std::string> stops);
  // Returns the text that is safe to show. After a stop text is seen, returns "" and
  // stopped() is true.
  std::string push(std::string_view text);
  // The held-back text when the answer ends without a stop text.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace flashspec
