// Hostile input and faults: each cause found by probing the CLI as a hostile but fair
// user gets one regression test here. The promise: one error line naming what is wrong
// and a non-zero exit -- never a crash, a hang, or a silently wrong or truncated result.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <future>
#include <limits>
#include <new>
#include <thread>

#include "core/error.h"
#include "core/gguf.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/thread_pool.h"
#include "model/model.h"
#include "tests/cli_runner.h"
#include "tests/fixtures.h"
#include "tests/gguf_writer.h"
#include "tests/json_file.h"
#include "tests/greedy_options.h"
#include "tests/cli_error.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

std::vector<std::string> generate(const std::string& model, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"generate", "-m", model, "-p", "Once upon a time", "-n", "4", "--temp", "0"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::string copy_of(const std::string& name, const TempFile& f) {
  std::filesystem::copy_file(model_path(name), f.path, std::filesystem::copy_options::overwrite_existing);
  return f.path;
}

}  // namespace

TEST_CASE("reliability: a model file truncated while generating is one error line, not SIGBUS") {
  TempFile f("shrink"), out("shrink-out");
  const std::string model = copy_of("stories260K-wide-f32", f);
  CliOptions o;
  o.stdout_path = out.path;
  auto run = std::async(std::launch::async, [&] {
    return run_cli(generate(model, {"-n", "6000", "--ignore-eos"}), o);
  });
  // Truncate only once tokens stream out, so the model is open and generating (a fixed
  // sleep truncated it before the open on a loaded CI machine).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::filesystem::file_size(out.path) < 64 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::filesystem::resize_file(model, 0);
  const CliResult r = run.get();
  CAPTURE(r.err);
  CHECK(r.exit_code == 1);
  // The warning that 6000 tokens pass the trained context comes first; then one error.
  CHECK(r.err.find("flashspec: error: " + model) != std::string::npos);
  CHECK(r.err.find("changed while in use") != std::string::npos);
}

TEST_CASE("reliability: a later pass over a model that shrank since the last one refuses to read it") {
  // What chat's next turn does: the file is checked before each forward pass, streamed or not.
  TempFile f("shrink2");
  const std::string model = copy_of("stories260K", f);
  CpuBackend be(1);
  Model m(model, be);
  const std::vector<int32_t> prompt = {1, 403, 407};
  CHECK(generate_target_only(m, prompt, greedy(4)).tokens.size() == 4);
  std::filesystem::resize_file(model, std::filesystem::file_size(model) / 2);
  CHECK_THROWS_WITH_AS(generate_target_only(m, prompt, greedy(4)),
                       doctest::Contains("changed while in use (size"), Error);
}

TEST_CASE("reliability: a worker thread's failed allocation reaches the caller as an exception") {
  ThreadPool pool(2);
  CHECK_THROWS_AS(pool.run([](int tid, int) {
    if (tid == 1) throw std::bad_alloc();
  }), std::bad_alloc);
  CHECK_THROWS_AS(pool.parallel_for(1000, 1, [](int64_t b, int64_t) {
    if (b == 500) throw Error("boom");
  }), Error);
  // A job shared out dynamically (ThreadPool::run_shared): the error reaches the caller
  // once every thread inside has left, round after round.
  for (int round = 0; round < 100; ++round) {
    std::atomic<int64_t> next{0};
    CHECK_THROWS_AS(pool.run_shared([&](int, int) {
      for (int64_t i; (i = next.fetch_add(1)) < 64;)
        if (i == 40) throw Error("boom");
    }), Error);
  }
  int ran = 0;
  pool.run([&](int tid, int) {  // the pool still works afterwards
    if (tid == 0) ++ran;          // (only the calling thread touches ran)
  });
  CHECK(ran == 1);
}

TEST_CASE("reliability: under a small address-space limit every run ends in one line or succeeds, never a signal") {
  // A wide tree and batch on the inflated model need more memory than the smaller limits
  // give; whatever fails must fail as an error line.
  const std::string model = model_path("stories260K-wide-f32");
  for (long limit_mb : {60, 120, 200, 400}) {
    CAPTURE(limit_mb);
    CliOptions o;
    o.address_space_kb = limit_mb * 1024;
    const CliResult r = run_cli({"generate", "-m", model, "-d", model_path("salty279K"), "-p", "Once upon a time", "-n",
                                 "8", "--temp", "0", "--tree", "4096", "-b", "4096", "--json"},
                                o);
    CAPTURE(r.err);
    CHECK((r.exit_code == 0 || r.exit_code == 1));
    if (r.exit_code == 1) {
      CHECK(r.err.find("flashspec: error: ") != std::string::npos);
      CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    }
  }
  // Nothing that runs before main may need address space: not the CUDA runtime (a
  // plugin, loaded for --backend cuda only), not an allocator reserving 32 MiB segments.
  // The shared libraries (the HTTP server's OpenSSL among them) map about 17 MB and each
  // pool thread reserves an 8 MB stack: 32000 KB holds both; below that the thread that
  // cannot start is named.
  for (long limit_kb : {32000, 45000}) {
    CAPTURE(limit_kb);
    CliOptions tight;
    tight.address_space_kb = limit_kb;
    const CliResult help = run_cli({"--help"}, tight);
    CHECK(help.exit_code == 0);
    CHECK(help.out.find("generate") != std::string::npos);
    const CliResult small = run_cli({"generate", "-m", model_path("stories260K"), "-p", "Once", "-n", "4", "--temp", "0"},
                                    tight);
    CAPTURE(small.err);
    CHECK(small.exit_code == 0);
  }
  CliOptions starved;
  starved.address_space_kb = 24000;
  const CliResult no_thread = run_cli(
      {"generate", "-m", model_path("stories260K"), "-p", "Once", "-n", "4", "--temp", "0", "-t", "2"}, starved);
  CHECK(no_thread.exit_code == 1);
  CHECK(no_thread.err.find("flashspec: error: cannot start worker thread 1 of 1: ") == 0);
}

TEST_CASE("reliability: a FIFO as a model is refused at once, not waited on") {
  const std::string fifo = std::filesystem::temp_directory_path() / ("fs-fifo-" + std::to_string(getpid()));
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  check_error(run_cli(generate(fifo), "", 20), {fifo, "not a regular file"});
  check_error(run_cli(generate(model_path("stories260K"), {"-d", fifo}), "", 20), {fifo, "not a regular file"});
  check_error(run_cli({"inspect", fifo}, "", 20), {fifo, "not a regular file"});
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(15));
  ::unlink(fifo.c_str());
}

TEST_CASE("reliability: failed writes of the output are errors") {
  const std::string model = model_path("stories260K");
  auto to_full = [](std::vector<std::string> args) {
    CliOptions o;
    o.stdout_path = "/dev/full";
    return run_cli(args, o);
  };
  check_error(to_full(generate(model, {"--json"})), {"standard output", "No space left"});
  check_error(to_full(generate(model)), {"standard output", "No space left"});
  check_error(to_full({"inspect", model, "--json"}), {"standard output"});
  check_error(to_full({"tokenize", "-m", model, "-p", "hello"}), {"standard output"});
  CliOptions chat;
  chat.stdout_path = "/dev/full";
  chat.stdin_text = "Hello\n";
  check_error(run_cli({"chat", "-m", model, "-n", "4"}, chat), {"standard output"});
  check_error(run_cli(generate(model, {"--trace", "/dev/full"})), {"/dev/full", "No space left"});
  CliOptions closed;
  closed.close_stdout = true;
  check_error(run_cli(generate(model, {"--json"}), closed), {"standard output"});
  CHECK(std::filesystem::is_character_file("/dev/full"));  // written in place, never replaced
}

TEST_CASE("reliability: output paths are checked before the run") {
  const std::string model = model_path("stories260K");
  const auto t0 = std::chrono::steady_clock::now();
  const CliResult r = run_cli(generate(model, {"-n", "2000", "--ignore-eos", "--trace", "/nonexistent/dir/t.json"}));
  check_error(r, {"/nonexistent/dir/t.json", "cannot write"});
  CHECK(r.out.empty());  // nothing generated first
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  const CliResult b = run_cli({"bench", "-m", model, "--chain", "none", "--tree", "none", "--out", "/nonexistent/x"});
  check_error(b, {"/nonexistent/x", "cannot write"});
}

TEST_CASE("reliability: a directory as a prompt file or prompt set is an error") {
  const std::string dir = std::filesystem::temp_directory_path();
  check_error(run_cli({"generate", "-m", model_path("stories260K"), "-f", dir}), {dir, "is a directory"});
  check_error(run_cli({"bench", "-m", model_path("stories260K"), "--chain", "none", "--tree", "none", "--prompts", dir,
                       "--out", dir + "/fs-bench-dir"}),
              {dir, "is a directory"});
}

TEST_CASE("reliability: values out of range, NaN and seeds that would wrap are usage errors") {
  const std::string model = model_path("stories260K");
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--temp", "nan"}, {"--top-p", "nan"}, {"--min-p", "nan"}, {"--temp", "inf"}, {"--top-p", "1.5"},
           {"--seed", "-1"}, {"--seed", "18446744073709551616"}, {"--seed", "12x"}}) {
    CAPTURE(flag);
    CAPTURE(value);
    check_error(run_cli({"generate", "-m", model, "-p", "x", flag, value}), {flag}, 2);
  }
  // The largest seed is fine.
  CHECK(run_cli({"generate", "-m", model, "-p", "x", "-n", "2", "--seed", "18446744073709551615"}).exit_code == 0);
}

TEST_CASE("reliability: flags that would be ignored are refused") {
  const std::string model = model_path("stories260K");
  for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{
           {"--ram-budget", "1G"}, {"--io-bw", "1G"}, {"--io-depth", "4"}, {"--no-direct"}}) {
    CAPTURE(extra[0]);
    check_error(run_cli(generate(model, extra)), {extra[0], "--stream"}, 2);
  }
  check_error(run_cli(generate(model, {"--logits", "2"})), {"--logits", "--json"}, 2);
  check_error(run_cli(generate(model, {"--pregrow", "2"})), {"--pregrow", "draft"}, 2);
  check_error(run_cli(generate(model, {"-d", model_path("salty279K"), "--chain", "4", "--tree-width", "2"})),
              {"--tree-width", "--chain"}, 2);
  check_error(run_cli(generate(model, {"-f", model})), {"--prompt", "--file"}, 2);
}

TEST_CASE("reliability: a prompt past the trained context is warned about") {
  std::string prompt;
  for (int i = 0; i < 200; ++i) prompt += "the dog ran. ";
  const CliResult r = run_cli({"generate", "-m", model_path("stories260K"), "-p", prompt, "-n", "4", "--temp", "0"});
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("warning:") != std::string::npos);
  CHECK(r.err.find("was trained for") != std::string::npos);
}

TEST_CASE("reliability: chat with stdin closed ends at once without reading the model as input") {
  CliOptions o;
  o.close_stdin = true;
  o.timeout_s = 30;
  const CliResult r = run_cli({"chat", "-m", model_path("stories260K"), "--json"}, o);
  CHECK(r.exit_code == 0);
  CHECK(r.out.empty());  // no turn was read
}

TEST_CASE("reliability: NaN weights stop generation with the model and position") {
  TempFile f("nanweights");
  GgufWriter w = GgufWriter::from(GgufFile::open(model_path("stories260K")));
  TensorSpec* t = w.tensor("blk.2.ffn_down.weight");
  REQUIRE(t != nullptr);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(t->data.data() + 40, &nan, 4);
  w.write(f.path);
  check_error(run_cli(generate(f.path)), {f.path, "logits at position", "not finite"});
}

TEST_CASE("reliability: a context too small states what the run needs") {
  // 5 prompt tokens + 8 generated = 13 (--ctx counts tokens; the scratch rows of a pass come on top).
  const CliResult r = run_cli({"generate", "-m", model_path("stories260K"), "-p", "Once upon a time", "-n", "8", "-c", "12"});
  check_error(r, {"--ctx 12 is too small", "need 13"});
  CHECK(run_cli({"generate", "-m", model_path("stories260K"), "-p", "Once upon a time", "-n", "8", "-c", "13"}).exit_code == 0);
}

TEST_CASE("reliability: inspect refuses a tokenizer that does not fit the embedding, as generate does") {
  TempFile f("vocabmismatch");
  const GgufFile src = GgufFile::open(model_path("stories260K"));
  GgufWriter w = GgufWriter::from(src);
  std::vector<std::string> tokens;
  for (const GgufValue& v : src.require_array("tokenizer.ggml.tokens").items) tokens.push_back(*v.as_string());
  tokens.pop_back();
  w.set("tokenizer.ggml.tokens", gv_str_array(tokens));
  w.remove("tokenizer.ggml.scores");
  w.remove("tokenizer.ggml.token_type");
  w.write(f.path);
  check_error(run_cli({"inspect", f.path}), {f.path, "tokenizer has 511 tokens but the embedding has 512 rows"});
  check_error(run_cli(generate(f.path)), {f.path, "tokenizer has 511 tokens but the embedding has 512 rows"});
}

TEST_CASE("reliability: a target with more ids than its draft: the draft gets a stand-in, the output stays exact") {
  // stories260K grown to 520 ids; id 515's output row is a louder copy of the row of the
  // first greedy token, so the target emits 515 -- an id the 512-token draft lacks.
  const GgufFile src = GgufFile::open(model_path("stories260K"));
  CpuBackend be(1);
  Model plain(model_path("stories260K"), be);
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  const int32_t first = generate_target_only(plain, prompt, greedy(1)).tokens[0];
  GgufWriter w = GgufWriter::from(src);
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<float> scores;
  for (const GgufValue& v : src.require_array("tokenizer.ggml.tokens").items) tokens.push_back(*v.as_string());
  for (const GgufValue& v : src.require_array("tokenizer.ggml.token_type").items) types.push_back(int32_t(*v.as_int()));
  for (const GgufValue& v : src.require_array("tokenizer.ggml.scores").items) scores.push_back(float(*v.as_float()));
  for (int i = 512; i < 520; ++i) tokens.push_back("<extra_" + std::to_string(i) + ">"), types.push_back(4), scores.push_back(0);
  w.set("tokenizer.ggml.tokens", gv_str_array(tokens));
  w.set("tokenizer.ggml.token_type", gv_i32_array(types));
  w.set("tokenizer.ggml.scores", gv_f32_array(scores));
  for (const char* name : {"token_embd.weight", "output.weight"}) {
    TensorSpec* t = w.tensor(name);
    REQUIRE(t->dims == std::vector<uint64_t>{64, 512});
    std::vector<float> rows(size_t(64 * 520), 0.0f);
    std::memcpy(rows.data(), t->data.data(), t->data.size());
    if (std::string(name) == "output.weight")
      for (int c = 0; c < 64; ++c) rows[size_t(515 * 64 + c)] = 1.5f * rows[size_t(first * 64 + c)];
    t->dims = {64, 520};
    t->data.assign(reinterpret_cast<const uint8_t*>(rows.data()), reinterpret_cast<const uint8_t*>(rows.data() + rows.size()));
  }
  TempFile f("bigvocab");
  w.write(f.path);
  CpuBackend draft_be(1);
  Model target(f.path, be), draft(model_path("salty279K"), draft_be);
  const GenerationResult want = generate_target_only(target, prompt, greedy(24));
  CHECK(std::count(want.tokens.begin(), want.tokens.end(), 515) > 0);
  SpeculationParams p{.mode = SpeculationParams::Mode::Tree};
  p.node_budget = 16;
  const GenerationResult got = generate_speculative(target, draft, prompt, greedy(24), p);
  CHECK(got.tokens == want.tokens);
  // The CLI agrees (vocabulary check passes: 8 extra ids).
  const CliResult r = run_cli({"generate", "-m", f.path, "-d", model_path("salty279K"), "-p", "Once upon a time", "-n",
                               "24", "--temp", "0", "--ignore-eos", "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK(nlohmann::json::parse(r.out).at("tokens").get<std::vector<int32_t>>() == want.tokens);
}
