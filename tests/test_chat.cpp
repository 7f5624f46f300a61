// `flashspec chat` driven through a pipe: multi-turn conversations reuse the KV cache
// (each turn prefills only its own tokens), answers equal `generate` on the same
// formatted prompt, speculative chat equals target-only chat, /reset, /quit, EOF,
// chat-template detection with its fallback, and Ctrl-C.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <sstream>

#include "chat/chat_template.h"
#include "core/gguf.h"
#include "tests/cli_runner.h"
#include "tests/fixtures.h"
#include "tests/gguf_writer.h"
#include "tests/json_file.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

Tokenizer tokenizer_of(const std::string& path) { return Tokenizer::from_gguf(GgufFile::open(path)); }

const std::vector<std::string> kGreedy = {"--temp", "0", "-n", "24", "--json", "-t", "2"};

std::vector<std::string> chat_args(const std::string& model, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"chat", "-m", model};
  a.insert(a.end(), kGreedy.begin(), kGreedy.end());
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

size_t n_tokens(const Tokenizer& tok, const std::string& text, bool bos) { return tok.encode(text, bos).size(); }

// chat on `w` with the chat template `tmpl`, written to a temporary file and fed `input`:
// the run, which must succeed, and the file's tokenizer.
struct TemplateChat {
  CliResult r;
  Tokenizer tok;
};
TemplateChat chat_with_template(GgufWriter w, const std::string& tmpl, const std::string& input) {
  w.set("tokenizer.chat_template", gv_str(tmpl));
  TempFile f("chat-template");
  w.write(f.path);
  TemplateChat c{run_cli(chat_args(f.path), input), tokenizer_of(f.path)};
  CAPTURE(c.r.err);
  CHECK(c.r.exit_code == 0);
  return c;
}

}  // namespace

TEST_CASE("chat: second turn reuses the cache, answers equal generate, speculative equals target-only") {
  const std::string stories = model_path("stories260K"), salty = model_path("salty279K");
  const Tokenizer tok = tokenizer_of(stories);
  const std::string q1 = "Tell me a story about a cat.", q2 = "What did the dog do?";
  const std::string input = q1 + "\n" + q2 + "\n";

  const CliResult r = run_cli(chat_args(stories), input);
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  const std::vector<nlohmann::json> turns = json_lines(r.out);
  REQUIRE(turns.size() == 2);
  const nlohmann::json &t1 = turns[0], &t2 = turns[1];
  CHECK(t1.at("turn").get<int64_t>() == 1);
  CHECK(t2.at("turn").get<int64_t>() == 2);

  // Turn 1 prefills the whole formatted prompt (BOS included).
  const std::string prompt1 = "User: " + q1 + "\nAssistant:";
  CHECK(size_t(t1.at("prompt_tokens").get<int64_t>()) == n_tokens(tok, prompt1, tok.add_bos()));
  REQUIRE(t1.at("stop").get<std::string>() == "length");  // greedy: -n ends both answers here
  REQUIRE(t2.at("stop").get<std::string>() == "length");
  const std::vector<int32_t> a1 = t1.at("tokens").get<std::vector<int32_t>>();
  CHECK(a1.size() == 24);

  // Turn 2 prefills only its own text plus the one token the cache has not seen yet
  // (the last answer token: it was emitted, never fed).
  const int64_t expect2 = 1 + int64_t(n_tokens(tok, "\nUser: " + q2 + "\nAssistant:", false));
  CHECK(t2.at("prompt_tokens").get<int64_t>() == expect2);
  CHECK(t2.at("stats").at("prompt_tokens").get<int64_t>() == expect2);
  const int64_t h1 = t1.at("history_tokens").get<int64_t>(), h2 = t2.at("history_tokens").get<int64_t>();
  CHECK(h1 == t1.at("prompt_tokens").get<int64_t>() + 24);
  CHECK(h2 == h1 + expect2 - 1 + 24);
  CHECK(t2.at("prompt_tokens").get<int64_t>() < h1);  // far less than the history

  // Turn 1 is exactly `generate` on the same formatted prompt with the same flags.
  const CliResult g = run_cli({"generate", "-m", stories, "--temp", "0", "-n", "24", "--json", "-t", "2", "-p", prompt1});
  REQUIRE(g.exit_code == 0);
  const nlohmann::json gj = nlohmann::json::parse(g.out);
  CHECK(gj.at("tokens").get<std::vector<int32_t>>() == a1);
  CHECK(gj.at("text").get<std::string>() == t1.at("text").get<std::string>());

  // Speculative chat (tree and chain) says exactly what target-only chat says, turn by
  // turn, and prefills the same rows.
  for (const std::vector<std::string>& spec :
       {std::vector<std::string>{"-d", salty, "--tree", "16"}, std::vector<std::string>{"-d", salty, "--chain", "4"}}) {
    CAPTURE(spec[2]);
    const CliResult s = run_cli(chat_args(stories, spec), input);
    CAPTURE(s.err);
    REQUIRE(s.exit_code == 0);
    const std::vector<nlohmann::json> st = json_lines(s.out);
    REQUIRE(st.size() == 2);
    for (size_t i = 0; i < 2; ++i) {
      CHECK(st[i].at("tokens").get<std::vector<int32_t>>() == turns[i].at("tokens").get<std::vector<int32_t>>());
      CHECK(st[i].at("prompt_tokens").get<int64_t>() == turns[i].at("prompt_tokens").get<int64_t>());
      CHECK(st[i].at("text").get<std::string>() == turns[i].at("text").get<std::string>());
    }
    CHECK(st[1].at("stats").at("drafted").get<int64_t>() > 0);
  }
}

TEST_CASE("chat: /reset prefills the whole new prompt, /stats, /quit ends the session") {
  const std::string stories = model_path("stories260K");
  const Tokenizer tok = tokenizer_of(stories);
  const CliResult r =
      run_cli(chat_args(stories), "Hello\n/stats\n/reset\nTell me about a dog.\n/quit\nnot read\n");
  CAPTURE(r.err);
  CHECK(r.exit_code == 0);
  const std::vector<nlohmann::json> turns = json_lines(r.out);
  REQUIRE(turns.size() == 2);  // nothing after /quit
  const int64_t full = int64_t(n_tokens(tok, "User: Tell me about a dog.\nAssistant:", tok.add_bos()));
  CHECK(turns[1].at("prompt_tokens").get<int64_t>() == full);
  CHECK(turns[1].at("history_tokens").get<int64_t>() == full + int64_t(turns[1].at("tokens").size()));
  CHECK(r.err.find("[session] 1 answers") != std::string::npos);
  CHECK(r.err.find("[conversation reset]") != std::string::npos);
}

TEST_CASE("chat: EOF exits 0, text mode streams answers") {
  const std::string stories = model_path("stories260K");
  SUBCASE("empty stdin") {
    const CliResult r = run_cli(chat_args(stories), "");
    CHECK(r.exit_code == 0);
    CHECK(r.out.empty());
  }
  SUBCASE("last line without newline, text mode") {
    const CliResult r = run_cli({"chat", "-m", stories, "--temp", "0", "-n", "24", "-t", "2"}, "Hello\n\nTell me a story");
    CAPTURE(r.err);
    CHECK(r.exit_code == 0);
    // Two answers, one line each (no "> " prompt on a pipe).
    CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 2);
    CHECK(r.out.find("> ") == std::string::npos);
    CHECK(r.out.rfind(' ', 0) == std::string::npos);  // the answer's leading space is not shown
  }
  SUBCASE("unknown command is not sent to the model") {
    const CliResult r = run_cli(chat_args(stories), "/frobnicate\n");
    CHECK(r.exit_code == 0);
    CHECK(r.out.empty());
    CHECK(r.err.find("unknown command") != std::string::npos);
  }
  SUBCASE("an unknown command's control bytes are escaped, not sent to the terminal") {
    const CliResult r = run_cli(chat_args(stories), "/x\x1b[2J\n");
    CHECK(r.exit_code == 0);
    CHECK(r.err.find("unknown command '/x\\x1b[2J'") != std::string::npos);
    CHECK(r.err.find('\x1b') == std::string::npos);
  }
}

TEST_CASE("chat: chat template detection") {
  const std::string stories = model_path("stories260K");
  const std::string chatml =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
      "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

  SUBCASE("chatml template whose tokens are missing: notice and plain transcript") {
    const auto [r, tok] = chat_with_template(GgufWriter::from(GgufFile::open(stories)), chatml, "Hello\n");
    CAPTURE(r.err);
    CHECK(r.err.find("chatml") != std::string::npos);
    CHECK(r.err.find("<|im_start|>") != std::string::npos);
    CHECK(r.err.find("plain transcript") != std::string::npos);
    const std::vector<nlohmann::json> turns = json_lines(r.out);
    REQUIRE(turns.size() == 1);
    CHECK(size_t(turns[0].at("prompt_tokens").get<int64_t>()) == n_tokens(tok, "User: Hello\nAssistant:", true));
  }

  SUBCASE("chatml template with its tokens in the vocabulary") {
    // Turn the last two vocabulary entries into <|im_start|> / <|im_end|> control tokens.
    const GgufFile src = GgufFile::open(stories);
    std::vector<std::string> texts;
    for (const GgufValue& v : src.require_array("tokenizer.ggml.tokens").items) texts.push_back(*v.as_string());
    std::vector<int32_t> types;
    for (const GgufValue& v : src.require_array("tokenizer.ggml.token_type").items) types.push_back(int32_t(*v.as_int()));
    const int32_t im_start = int32_t(texts.size()) - 2, im_end = int32_t(texts.size()) - 1;
    texts[size_t(im_start)] = "<|im_start|>";
    texts[size_t(im_end)] = "<|im_end|>";
    types[size_t(im_start)] = types[size_t(im_end)] = int32_t(TokenType::Control);
    GgufWriter w = GgufWriter::from(src);
    w.set("tokenizer.ggml.tokens", gv_str_array(texts));
    w.set("tokenizer.ggml.token_type", gv_i32_array(types));
    const auto [r, tok] = chat_with_template(w, chatml, "Hi\nAgain\n");
    CAPTURE(r.err);
    CHECK(r.err.empty());  // recognised: no notice
    const std::vector<nlohmann::json> turns = json_lines(r.out);
    REQUIRE(turns.size() == 2);
    // <s> <|im_start|> "user\nHi" <|im_end|> "\n" <|im_start|> "assistant\n"
    const size_t first = 1 + 1 + n_tokens(tok, "user\nHi", false) + 1 + n_tokens(tok, "\n", false) + 1 +
                         n_tokens(tok, "assistant\n", false);
    CHECK(size_t(turns[0].at("prompt_tokens").get<int64_t>()) == first);
    // Turn 2 closes an answer cut by -n with <|im_end|> first, unless it ended with one.
    const std::vector<int32_t> a1 = turns[0].at("tokens").get<std::vector<int32_t>>();
    const bool closed = !a1.empty() && a1.back() == im_end;
    const size_t second = 1 + (closed ? 0 : 1) + n_tokens(tok, "\n", false) + 1 + n_tokens(tok, "user\nAgain", false) +
                          1 + n_tokens(tok, "\n", false) + 1 + n_tokens(tok, "assistant\n", false);
    CHECK(size_t(turns[1].at("prompt_tokens").get<int64_t>()) == second);
  }

  SUBCASE("unknown --chat-format is one usage error line, as in serve") {
    const CliResult r = run_cli(chat_args(stories, {"--chat-format", "vicuna"}), "Hi\n");
    CHECK(r.exit_code == 2);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.err.find("--chat-format") != std::string::npos);
  }
}

namespace {

// A CLI child with pipes on stdin/stdout/stderr, for signal tests (run_cli closes
// stdin up front and cannot signal the child).
struct Child {
  pid_t pid = -1;
  int in = -1, out = -1, err = -1;
  std::string got_out, got_err;

  explicit Child(const std::vector<std::string>& args) {
    int pi[2], po[2], pe[2];
    REQUIRE(pipe(pi) == 0);
    REQUIRE(pipe(po) == 0);
    REQUIRE(pipe(pe) == 0);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      dup2(pi[0], 0);
      dup2(po[1], 1);
      dup2(pe[1], 2);
      for (int fd : {pi[0], pi[1], po[0], po[1], pe[0], pe[1]}) close(fd);
      exec_cli(args);
    }
    close(pi[0]);
    close(po[1]);
    close(pe[1]);
    in = pi[1];
    out = po[0];
    err = pe[0];
    fcntl(out, F_SETFL, O_NONBLOCK);
    fcntl(err, F_SETFL, O_NONBLOCK);
  }
  ~Child() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    for (int fd : {in, out, err})
      if (fd >= 0) close(fd);
  }
  void send(const std::string& s) { CHECK(write(in, s.data(), s.size()) == ssize_t(s.size())); }
  // Reads whatever arrives until `done` holds or the timeout passes; false on timeout.
  template <class Pred>
  bool wait_for(Pred done, int timeout_ms = 30000) {
    const auto t0 = std::chrono::steady_clock::now();
    while (!done()) {
      if (std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(timeout_ms)) return false;
      pollfd p[2] = {{out, POLLIN, 0}, {err, POLLIN, 0}};
      poll(p, 2, 50);
      char buf[4096];
      ssize_t n;
      while ((n = read(out, buf, sizeof buf)) > 0) got_out.append(buf, size_t(n));
      while ((n = read(err, buf, sizeof buf)) > 0) got_err.append(buf, size_t(n));
    }
    return true;
  }
  // Exit code once the child ends (-1 on timeout).
  int wait_exit(int timeout_ms = 30000) {
    int status = 0;
    const bool ok = wait_for([&] { return waitpid(pid, &status, WNOHANG) == pid; }, timeout_ms);
    if (!ok) return -1;
    pid = -1;
    wait_for([] { return false; }, 100);  // drain
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

}  // namespace

TEST_CASE("chat: Ctrl-C stops the answer and keeps the session, twice at the prompt exits") {
  const std::string stories = model_path("stories260K");
  // A very long answer, so that it is surely still running when Ctrl-C comes.
  Child c({"chat", "-m", stories, "--temp", "0", "-n", "20000", "--ctx", "20100", "--ignore-eos", "-t", "2"});
  c.send("Tell me a long story.\n");
  REQUIRE(c.wait_for([&] { return !c.got_out.empty(); }));
  kill(c.pid, SIGINT);
  REQUIRE(c.wait_for([&] { return c.got_err.find("[interrupted]") != std::string::npos; }));
  // The session lives on and counts the interrupted answer.
  c.send("/stats\n");
  REQUIRE(c.wait_for([&] { return c.got_err.find("[session] 1 answers") != std::string::npos; }));
  // Ctrl-C at the prompt: first a hint, the second one exits cleanly.
  kill(c.pid, SIGINT);
  REQUIRE(c.wait_for([&] { return c.got_err.find("Ctrl-C again") != std::string::npos; }));
  kill(c.pid, SIGINT);
  CAPTURE(c.got_err);
  CHECK(c.wait_exit() == 0);
}

TEST_CASE("chat: Llama 3 and Qwen3 turns are their templates' text with the specials parsed") {
  const Tokenizer llama = tokenizer_of(model_path("tiny-llama3"));
  std::string notice;
  const ChatFormat l3 = ChatFormat::for_model(llama, GgufFile::open(model_path("tiny-llama3")).get_string("tokenizer.chat_template"),
                                              std::nullopt, notice);
  CHECK(notice.empty());
  CHECK(l3.style() == ChatStyle::Llama3);
  CHECK(l3.first_turn("Hi", "") ==
        llama.encode("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                     "<|start_header_id|>assistant<|end_header_id|>\n\n",
                     false, true));

  const GgufFile qf = GgufFile::open(model_path("tiny-qwen3"));
  const Tokenizer qwen = Tokenizer::from_gguf(qf);
  ChatFormat q3 = ChatFormat::for_model(qwen, qf.get_string("tokenizer.chat_template"), std::nullopt, notice);
  CHECK(notice.empty());
  CHECK(q3.style() == ChatStyle::ChatML);
  CHECK(q3.reasons());
  // Thinking off (the default): the template's enable_thinking=false rendering.
  CHECK(q3.first_turn("Hi", "Be brief.") ==
        qwen.encode("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                    "<|im_start|>assistant\n<think>\n\n</think>\n\n",
                    false, true));
  q3.set_thinking(true);
  CHECK(q3.first_turn("Hi", "") == qwen.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", false, true));
  // A later turn closes an answer that ended without <|im_end|>.
  CHECK(q3.next_turn("More", AnswerEnd::Length, 42) ==
        qwen.encode("<|im_end|>\n<|im_start|>user\nMore<|im_end|>\n<|im_start|>assistant\n", false, true));
}

TEST_CASE("chat: reasoning blocks are hidden from answers, even split over tokens") {
  auto run = [](const std::vector<std::string>& chunks) {
    ReasoningFilter f;
    std::string out;
    for (const std::string& c : chunks) out += f.push(c);
    return out + f.flush();
  };
  CHECK(run({"<think>\nplan\n</think>\n\nThe answer."}) == "The answer.");
  CHECK(run({"<th", "ink>a", "b</thi", "nk>", "\n", "\nDone"}) == "Done");
  CHECK(run({"No reasoning <here>, just text."}) == "No reasoning <here>, just text.");
  CHECK(run({"Before <think>hidden</think>\n\nafter"}) == "Before after");
  CHECK(run({"<think>never closed"}).empty());
  CHECK(run({"ends with <thi"}) == "ends with <thi");  // a marker that never completes is text
}
