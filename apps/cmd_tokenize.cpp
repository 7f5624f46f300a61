// `flashspec tokenize`: a model's token ids for a text, like llama.cpp's llama-tokenize.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "apps/commands.h"
#include "apps/output.h"
#include "apps/text_input.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/printable.h"
#include "tokenizer/tokenizer.h"

namespace flashspec {

namespace {

struct TokenizeArgs {
  std::string model, prompt, file;
  bool no_bos = false, json = false, ids = false, parse_special = false;
};

int run_tokenize(const TokenizeArgs& a) {
  const std::string text = a.file.empty() ? a.prompt : read_text_file(a.file);
  const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(a.model));
  const std::vector<int32_t> ids = tok.encode(text, !a.no_bos, a.parse_special);
  if (a.json) {
    write_stdout(nlohmann::json{{"tokens", ids}}.dump() + "\n");
  } else if (a.ids) {
    std::string line = "[";
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? ", " : "") + std::to_string(ids[i]);
    write_stdout(line + "]\n");
  } else {
    for (int32_t id : ids) {
      char num[16];
      std::snprintf(num, sizeof num, "%6d", id);
      // A control token spells nothing in text (Llama 3's BOS, Qwen's <|im_start|>): it
      // is shown by its name instead of as ''.
      const bool control = tok.token_type(id) == TokenType::Control;
      write_stdout(std::string(num) + " -> " + (control ? tok.token_text(id) : in_quotes(tok.token_to_piece(id))) + "\n");
    }
  }
  flush_stdout();
  return 0;
}

}  // namespace

Action register_tokenize(CLI::App& app) {
  auto [sub, args] = add_command<TokenizeArgs>(app, "tokenize", "print a model's token ids for a text (like llama-tokenize)");
  sub->add_option("-m,--model", args->model, "model (GGUF); only its tokenizer is read")->required();
  auto* p = sub->add_option("-p,--prompt", args->prompt, "text to tokenize");
  auto* f = sub->add_option("-f,--file", args->file, "read the text from a file, its bytes exactly ('-': stdin)");
  p->excludes(f);
  sub->add_flag("--no-bos", args->no_bos, "do not add the BOS/EOS tokens the model's tokenizer adds");
  sub->add_flag("--parse-special", args->parse_special,
                "match control tokens written in the text (e.g. <|im_start|>); default: plain text");
  sub->add_flag("--ids", args->ids, "print the ids as one list");
  sub->add_flag("--json", args->json, "print {\"tokens\": [...]}");
  return [args] { return run_tokenize(*args); };
}

}  // namespace flashspec
