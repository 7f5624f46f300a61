// The CLI speaks llama.cpp's dialect: its flag spellings as aliases, a random seed that is
// printed (and reproduces the run), defaults shown in --help, one-line parse errors with
// the usage exit code, refused conflicts, and counters that add up.
#include <doctest/doctest.h>

#include <algorithm>

#include "tests/cli_runner.h"
#include "tests/fixtures.h"
#include "tests/json_file.h"

using namespace flashspec::testing;

namespace {

const std::string kTarget = model_path("stories260K");
const std::string kDraft = model_path("salty279K");

nlohmann::json run_json(std::vector<std::string> args, const std::string& stdin_text = "") {
  const CliResult r = run_cli(args, stdin_text);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.out);
}

void check_usage_error(const CliResult& r, const std::vector<std::string>& parts) {
  CAPTURE(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.rfind("flashspec: error: ", 0) == 0);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.out.empty());
  for (const auto& p : parts) CHECK(r.err.find(p) != std::string::npos);
}

}  // namespace

TEST_CASE("cli habits: llama.cpp's spellings are aliases") {
  const std::vector<std::string> base = {"generate", "-m", kTarget, "-p", "Once upon a time", "-n", "12", "--json"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return run_json(a);
  };
  // -md / --model-draft as -d; -s as --seed. A fixed chain: the automatic policy may
  // rightly decide that a draft as large as this target is not worth running.
  const nlohmann::json d = with({"-d", kDraft, "--seed", "42", "--chain", "3"});
  const nlohmann::json md = with({"-md", kDraft, "-s", "42", "--chain", "3"});
  CHECK(md.at("tokens") == d.at("tokens"));
  CHECK(md.at("seed").get<uint64_t>() == 42);
  CHECK(md.at("stats").at("drafted").get<int64_t>() > 0);
  CHECK(with({"--model-draft", kDraft, "-s", "42", "--chain", "3"}).at("tokens") == d.at("tokens"));
  // --draft-max caps the automatic tree; a draft alone means --tree auto.
  CHECK(with({"-md", kDraft, "--draft-max", "8"}).at("config") == "tree auto (<= 8)");
  CHECK(with({"-md", kDraft}).at("config") == "tree auto (<= 1024)");
  // -ngl needs a GPU backend: one usage line on the CPU.
  check_usage_error(run_cli({"generate", "-m", kTarget, "-p", "x", "-ngl", "99"}), {"--gpu-layers", "--backend cuda"});
  // -f - reads the prompt from standard input.
  const nlohmann::json piped = run_json({"generate", "-m", kTarget, "-f", "-", "-n", "4", "--temp", "0", "--json"},
                                        "Once upon a time");
  CHECK(piped.at("prompt_tokens") == run_json({"generate", "-m", kTarget, "-p", "Once upon a time", "-n", "4", "--temp",
                                               "0", "--json"}).at("prompt_tokens"));
  // A flag given twice takes the last value.
  CHECK(run_json({"generate", "-m", kTarget, "-p", "x", "-n", "9", "-n", "3", "--temp", "0", "--json"})
            .at("tokens")
            .size() == 3);
  // --ctx-size as -c (a context too small for the run is refused naming the flag either way).
  const CliResult small = run_cli({"generate", "-m", kTarget, "-p", "Once upon a time", "-n", "64", "--ctx-size", "8"});
  CHECK(small.exit_code == 1);
  CHECK(small.err.find("--ctx 8 is too small") != std::string::npos);
  CHECK(run_json({"generate", "-m", kTarget, "-p", "x", "-n", "3", "--temp", "0", "--ctx-size", "64", "--json"})
            .at("tokens")
            .size() == 3);
  // inspect reads one model: a second one (-m beside the path) is refused, not silently chosen.
  check_usage_error(run_cli({"inspect", kTarget, "-m", kDraft}), {"model"});
}

TEST_CASE("cli habits: -ctk / -ctv set the cache's key and value types, each overriding --kv-type") {
  // The inspect line names both sides, whatever the order of the flags.
  auto kv_line = [](std::vector<std::string> extra) {
    std::vector<std::string> a = {"inspect", kTarget};
    a.insert(a.end(), extra.begin(), extra.end());
    const CliResult r = run_cli(a);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const size_t at = r.out.find("KV cache (");
    REQUIRE(at != std::string::npos);
    return r.out.substr(at, r.out.find(')', at) + 1 - at);
  };
  CHECK(kv_line({}) == "KV cache (K f16, V f16)");
  CHECK(kv_line({"-ctk", "f16", "-ctv", "q8_0"}) == "KV cache (K f16, V q8_0)");
  CHECK(kv_line({"-ctv", "q8_0", "--kv-type", "f32"}) == "KV cache (K f32, V q8_0)");
  CHECK(kv_line({"--cache-type-k", "q8_0", "--cache-type-v", "f32"}) == "KV cache (K q8_0, V f32)");
  const nlohmann::json j = run_json({"inspect", kTarget, "--json", "--kv-type", "q8_0", "-ctk", "f16"});
  CHECK(j.at("kv_type") == "f16/q8_0");
  CHECK(j.at("k_type") == "f16");
  CHECK(j.at("v_type") == "q8_0");
  CHECK(run_json({"inspect", kTarget, "--json", "-ctk", "f32", "-ctv", "f32"}).at("kv_type") == "f32");
  // The flags reach the engine: both sides set one by one run as --kv-type does.
  const std::vector<std::string> base = {"generate", "-m", kTarget, "-p", "Once upon a time", "-n", "24", "--temp",
                                         "0", "--json"};
  auto tokens = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return run_json(a).at("tokens");
  };
  CHECK(tokens({"-ctk", "f32", "-ctv", "f32"}) == tokens({"--kv-type", "f32"}));
  CHECK(tokens({"--kv-type", "f32", "-ctk", "f16", "-ctv", "f16"}) == tokens({}));
}

TEST_CASE("cli habits: parse errors are one line with the usage exit code") {
  check_usage_error(run_cli({"generate", "-m", kTarget, "-p", "x", "--frobnicate"}), {"--frobnicate"});
  check_usage_error(run_cli({"generate", "-m", kTarget, "-p", "x", "-n", "many"}), {"-n", "many"});
  check_usage_error(run_cli({"generate", "-m", kTarget, "-p", "x", "--kv-type", "q3"}), {"--kv-type"});
  check_usage_error(run_cli({"generate", "-m", kTarget, "-p", "x", "-ctk", "q4_0"}), {"--cache-type-k"});
  check_usage_error(run_cli({"inspect", kTarget, "-ctv", "bf16"}), {"--cache-type-v"});
  check_usage_error(run_cli({"generate", "-p", "x"}), {"--model"});
  check_usage_error(run_cli({"frobnicate"}), {"unknown command 'frobnicate'", "generate"});
  check_usage_error(run_cli({"generate", "-m", kTarget, "-d", kDraft, "-p", "x", "--tree", "9999999"}), {"--tree", "4096"});
}

TEST_CASE("cli habits: conflicting flags are refused, not ignored") {
  check_usage_error(run_cli({"generate", "-m", kTarget, "-d", kDraft, "-p", "x", "--chain", "4", "--tree", "8"}),
                    {"--chain", "--tree"});
  check_usage_error(run_cli({"generate", "-m", kTarget, "-d", kDraft, "-p", "x", "--tree", "8", "--draft-max", "4"}),
                    {"--draft-max", "--tree"});
  check_usage_error(run_cli({"generate", "-m", kTarget, "-d", kDraft, "-p", "x", "--chain", "4", "--draft-max", "4"}),
                    {"--draft-max", "--chain"});
  check_usage_error(run_cli({"generate", "-m", kTarget, "-p", "x", "-f", kTarget}), {"--prompt", "--file"});
  check_usage_error(run_cli({"generate", "-m", kTarget, "-p", "x", "--backend", "cuda", "--vram-budget", "1G", "-ngl", "3"}),
                    {"--vram-budget", "--gpu-layers"});
  check_usage_error(run_cli({"generate", "-m", kTarget, "-p", "x", "--tree", "8"}), {"draft"});
}

TEST_CASE("cli habits: the default seed is random and printed, the printed seed reproduces the run") {
  const std::vector<std::string> sampled = {"generate", "-m", kTarget, "-p", "The dog", "-n", "24", "--temp", "1.2", "--json"};
  const nlohmann::json a = run_json(sampled), b = run_json(sampled);
  CHECK(a.at("seed") != b.at("seed"));
  CHECK(a.at("tokens") != b.at("tokens"));  // 24 tokens at temperature 1.2: equal by chance ~never
  std::vector<std::string> again = sampled;
  again.insert(again.end(), {"--seed", std::to_string(a.at("seed").get<uint64_t>())});
  CHECK(run_json(again).at("tokens") == a.at("tokens"));
  // The text mode prints the seed in its stats line.
  const CliResult r = run_cli({"generate", "-m", kTarget, "-p", "The dog", "-n", "4", "--temp", "1", "-s", "7"});
  CHECK(r.err.find("seed 7") != std::string::npos);
}

TEST_CASE("cli habits: --help shows the defaults") {
  const CliResult r = run_cli({"generate", "--help"});
  CHECK(r.exit_code == 0);
  for (const char* d : {"0.8", "0.95", "0.05", "40", "128", "512", "f16", "cpu"}) {
    CAPTURE(d);
    CHECK(r.out.find(d) != std::string::npos);
  }
  CHECK(r.out.find("--model-draft") != std::string::npos);
  CHECK(r.out.find("-md") != std::string::npos);  // named in the description (translated before parsing)
}

TEST_CASE("cli habits: the counters add up") {
  for (const std::vector<std::string>& spec : std::vector<std::vector<std::string>>{
           {}, {"-d", kDraft, "--tree", "16"}, {"-d", kDraft, "--chain", "4"}, {"-d", kDraft}}) {
    for (const char* n : {"24", "1", "0"}) {
      std::vector<std::string> a = {"generate", "-m", kTarget, "-p", "Once upon a time", "-n", n, "--temp", "0", "--json"};
      a.insert(a.end(), spec.begin(), spec.end());
      const nlohmann::json s = run_json(a).at("stats");
      CAPTURE(spec.size());
      CAPTURE(n);
      int64_t emitted = 0;
      for (const auto& p : s.at("timeline")) emitted += p.at("emitted").get<int64_t>();
      CHECK(emitted == s.at("generated").get<int64_t>());
      CHECK(s.at("generated").get<int64_t>() == std::stoll(n));
      CHECK(s.at("accepted").get<int64_t>() <= s.at("drafted").get<int64_t>());
      CHECK(s.at("accepted").get<int64_t>() + s.at("target_passes").get<int64_t>() >= s.at("generated").get<int64_t>());
      // The prefill pass counts: it yields the first token.
      CHECK(s.at("timeline").size() == s.at("target_passes").get<size_t>());
      CHECK(s.at("timeline")[0].at("tree_tokens").get<int64_t>() == 5);  // the prompt
      if (s.at("target_passes").get<int64_t>() > 0)
        CHECK(s.at("tau").get<double>() ==
              doctest::Approx(double(s.at("generated").get<int64_t>()) / s.at("target_passes").get<double>()));
    }
  }
}

TEST_CASE("cli habits: tokenize shows control tokens by name") {
  // Llama 3 adds its BOS, a control token that spells nothing in text; Qwen's chat markers
  // are control tokens too (parsed as such with --parse-special).
  const CliResult llama = run_cli({"tokenize", "-m", model_path("tiny-llama3"), "-p", "Hello"});
  REQUIRE(llama.exit_code == 0);
  CHECK(llama.out.find("128000 -> <|begin_of_text|>") != std::string::npos);
  CHECK(llama.out.find("''") == std::string::npos);
  const CliResult qwen =
      run_cli({"tokenize", "-m", model_path("tiny-qwen3"), "-p", "<|im_start|>user", "--parse-special"});
  REQUIRE(qwen.exit_code == 0);
  CHECK(qwen.out.find("151644 -> <|im_start|>") != std::string::npos);
  CHECK(qwen.out.find("'user'") != std::string::npos);  // a normal token stays in quotes
}

TEST_CASE("cli habits: the stats on stderr start at once, with no blank line before them") {
  const CliResult r = run_cli({"generate", "-m", kTarget, "-p", "Once upon a time", "-n", "4", "--temp", "0"});
  REQUIRE(r.exit_code == 0);
  CAPTURE(r.err);
  REQUIRE(!r.err.empty());
  CHECK(r.err.front() != '\n');
  CHECK(r.out.back() == '\n');
}

TEST_CASE("cli habits: --ctx counts prompt and answer alike in generate, chat and serve, and past the trained context warns") {
  // stories260K was trained on 128 tokens. chat with a draft tree of 64: the session's
  // context is the trained 128 tokens (the scratch rows of a 64-node pass come on top), and
  // a second turn that does not fit says so in those terms.
  CliOptions o;
  o.stdin_text = "Once upon a time\nThe dog ran to the park\n";
  const CliResult chat = run_cli({"chat", "-m", kTarget, "-d", kDraft, "--tree", "64", "-n", "100", "--temp", "0",
                                  "--ignore-eos", "--json"},
                                 o);
  CAPTURE(chat.err);
  CHECK(chat.err.find("context size 128") != std::string::npos);
  CHECK(chat.err.find("was trained for") == std::string::npos);  // within the trained context: no warning
  // -c 512: allowed past the trained 128, with the same warning generate gives.
  const CliResult wide = run_cli({"chat", "-m", kTarget, "-d", kDraft, "--tree", "64", "-n", "100", "--temp", "0",
                                  "--ignore-eos", "--json", "-c", "512"},
                                 o);
  CAPTURE(wide.err);
  CHECK(wide.exit_code == 0);
  CHECK(wide.err.find("512 tokens of context") != std::string::npos);
  CHECK(wide.err.find("was trained for") != std::string::npos);
  CHECK(wide.err.find("context full") == std::string::npos);  // both turns fit
  // generate: the same warning past the trained context.
  const CliResult gen = run_cli({"generate", "-m", kTarget, "-p", "Once upon a time", "-n", "200", "--temp", "0",
                                 "--ignore-eos"});
  CHECK(gen.exit_code == 0);
  CHECK(gen.err.find("was trained for") != std::string::npos);
}

TEST_CASE("cli habits: -n -1 generates until end of text or the context is full") {
  // stories260K's trained context is 128 tokens: with --ignore-eos the answer fills it.
  const nlohmann::json all = run_json({"generate", "-m", kTarget, "-p", "Once upon a time", "-n", "-1", "--temp", "0",
                                       "--ignore-eos", "--json"});
  const int64_t prompt = int64_t(all.at("prompt_tokens").size());
  CHECK(int64_t(all.at("tokens").size()) + prompt == 128);
  // --ctx sets the context it fills: all of it (a speculative pass's scratch rows come on top).
  for (const bool draft : {false, true}) {
    std::vector<std::string> args = {"generate", "-m", kTarget, "-p", "Once upon a time", "-n", "-1", "--temp", "0",
                                     "--ignore-eos", "-c", "64", "--json"};
    if (draft) args.insert(args.end(), {"-d", kDraft, "--tree", "16"});
    CAPTURE(draft);
    const nlohmann::json ctx = run_json(args);
    CHECK(int64_t(ctx.at("tokens").size()) + prompt == 64);
  }
  check_usage_error(run_cli({"generate", "-m", kTarget, "-p", "x", "-n", "-2"}), {"-n"});
  check_usage_error(run_cli({"bench", "-m", kTarget, "-n", "-1"}), {"-n -1"});
  // throughput's help lists only what it uses.
  const CliResult help = run_cli({"throughput", "--help"});
  CHECK(help.out.find("--lookup") == std::string::npos);
}

TEST_CASE("cli habits: a streamed run over its --ram-budget says so") {
  const std::string wide = model_path("stories260K-wide-q4_0");
  const CliResult over = run_cli({"generate", "-m", wide, "-p", "x", "-n", "2", "--stream", "--ram-budget", "1"});
  REQUIRE(over.exit_code == 0);
  CAPTURE(over.err);
  CHECK(over.err.find("notice: the stream needs at least") != std::string::npos);
  CHECK(over.err.find("over --ram-budget") != std::string::npos);
  const CliResult within = run_cli({"generate", "-m", wide, "-p", "x", "-n", "2", "--stream", "--ram-budget", "1G"});
  REQUIRE(within.exit_code == 0);
  CHECK(within.err.find("notice") == std::string::npos);
  // Without --ram-budget the stream keeps its smallest ring, as asked: no notice (the GPU
  // runs with --vram-budget alone printed one).
  const CliResult unbudgeted = run_cli({"generate", "-m", wide, "-p", "x", "-n", "2", "--stream"});
  REQUIRE(unbudgeted.exit_code == 0);
  CHECK(unbudgeted.err.find("notice") == std::string::npos);
}
