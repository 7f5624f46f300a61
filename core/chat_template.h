#pragma once
// Chat turn formatting for `flashspec chat` (and the server). There is no Jinja engine: the style is
// recognised from markers in the GGUF's tokenizer.chat_template text and each turn is
// built here, as token ids. Our tokenizer does not parse control tokens out of text, so
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
// Reasoning models (Qwen3: a chatml template that mentions <think>) think by default; with
// thinking off the assistant header is followed by an empty "<think>\n\n</think>\n\n",
// as the template's enable_thinking=false renders it, and the app hides any reasoning
// that appears anyway (ReasoningFilter).
// When a later turn starts, the previous answer is closed first: the style's
// end-of-turn token is added if the answer did not end with it (cut by -n or Ctrl-C).
// In the plain style the model may start the user's next line itself; the app stops the
// answer at "\nUser:" and the next turn continues that line instead of repeating it.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tokenizer.h"

namespace flashspec {

enum class ChatStyle { Plain, Llama2, ChatML, Llama3, Zephyr };

const char* chat_style_name(ChatStyle s);
// "plain", "llama2"/"llama-2", "chatml", "llama3"/"llama-3", "zephyr"; nullopt otherwise.
std::optional<ChatStyle> parse_chat_style(std::string_view name);
// The style a Jinja chat template implements, recognised by its markers; nullopt when
// none is recognised.
std::optional<ChatStyle> detect_chat_style(std::string_view jinja);

// How the previous answer ended; decides how the next turn closes it.
enum class AnswerEnd {
  Length,     // -n reached
  EndToken,   // end-of-generation or the style's end-of-turn token
  StopText,   // plain style: the model started the user's next line ("\nUser:")
  Interrupted,  // Ctrl-C
};

class ChatFormat {
 public:
  // A format for `style` over `tok`. Error naming the token when a special token the
  // style needs is not in the vocabulary.
  ChatFormat(const Tokenizer& tok, ChatStyle style);

  // The format for a model: `forced` (from --chat-format) when given, else the style of
  // `chat_template` (tokenizer.chat_template, may be null). Falls back to plain when the
  // template is absent, unrecognised or needs special tokens the vocabulary lacks; in
  // the last two cases `notice` gets one line saying why.
  static ChatFormat for_model(const Tokenizer& tok, const std::string* chat_template,
                              std::optional<ChatStyle> forced, std::string& notice);
  // Takes what the template adds to the style: reasoning blocks (chatml with <think>
  // tokens), the default system prompt Qwen2.5's template writes when none is given.
  void adopt_template_details(std::string_view chat_template);

  ChatStyle style() const { return style_; }
  // The template is a reasoning model's (<think> blocks); thinking is then off unless set.
  bool reasons() const { return think_open_ >= 0; }
  void set_thinking(bool on) { thinking_ = on; }

  // Tokens of the first turn of a conversation: BOS (when the vocabulary adds one), the
  // system prompt (if any), the user's turn and the assistant header.
  std::vector<int32_t> first_turn(std::string_view user, std::string_view system) const;
  // Tokens of a later turn: closes the previous answer (which ended with `last_token`,
  // -1 for none, the way `end` says) and adds the user's turn and the assistant header.
  std::vector<int32_t> next_turn(std::string_view user, AnswerEnd end, int32_t last_token) const;

  // True for a token that ends the assistant's turn in this style (besides the
  // tokenizer's end-of-generation tokens), e.g. <|im_end|>.
  bool is_turn_end(int32_t id) const { return id >= 0 && id == turn_end_; }
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
  // A marker that is a special token when the vocabulary has one, else plain text.
  Part marker(std::string_view text) const;
  void user_turn(std::vector<Part>& parts, std::string_view user) const;

  const Tokenizer* tok_;
  ChatStyle style_;
  int32_t turn_end_ = -1;  // token closing an assistant turn (-1: the end-of-generation ones)
  int32_t im_start_ = -1, start_header_ = -1, end_header_ = -1;
  int32_t think_open_ = -1, think_close_ = -1;  // <think> </think> of a reasoning template
  bool thinking_ = false;
  std::string stop_text_, default_system_;
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
// stop text, so a stop text is never shown even when it arrives split over tokens.
class StopTextFilter {
 public:
  explicit StopTextFilter(std::string stop) : stop_(std::move(stop)) {}
  // Returns the text that is safe to show. After the stop text is seen, returns "" and
  // stopped() is true.
  std::string push(std::string_view text);
  // The held-back text when the answer ends without the stop text.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::string stop_, pending_;
  bool stopped_ = false;
};

}  // namespace flashspec
