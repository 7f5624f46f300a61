// The CLI as a user meets it: bad input gives one error line and a non-zero exit,
// good input gives the documented JSON.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <functional>

#include "tests/cli_runner.h"
#include "tests/fixtures.h"
#ifdef FLASHSPEC_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif
#include "tests/gguf_writer.h"
#include "tests/json_file.h"
#include "tests/cli_error.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

CliResult generate_with(const std::string& model) {
  return run_cli({"generate", "-m", model, "-p", "Once upon a time", "-n", "4", "--temp", "0"});
}

// `generate` on a copy of stories260K with one change: one error line naming the copy and
// each of `words`.
void check_changed_model(const std::function<void(GgufWriter&)>& change, const std::vector<std::string>& words) {
  TempFile f("changed");
  GgufWriter w = GgufWriter::from(GgufFile::open(model_path("stories260K")));
  change(w);
  w.write(f.path);
  std::vector<std::string> parts = {f.path};
  parts.insert(parts.end(), words.begin(), words.end());
  check_error(generate_with(f.path), parts);
}

}  // namespace

TEST_CASE("cli: missing model file") {
  check_error(generate_with("/nonexistent/model.gguf"), {"/nonexistent/model.gguf", "cannot open"});
}

TEST_CASE("cli: not a GGUF file") {
  TempFile f("notgguf");
  write_file(f.path, std::vector<uint8_t>(4096, 'x'));
  check_error(generate_with(f.path), {f.path, "bad magic"});
}

TEST_CASE("cli: truncated model") {
  TempFile f("trunc");
  std::vector<uint8_t> bytes = read_file(model_path("stories260K"));
  for (size_t cut : {size_t(10), size_t(3000), bytes.size() / 2, bytes.size() - 1}) {
    CAPTURE(cut);
    write_file(f.path, std::span(bytes).first(cut));
    const CliResult r = generate_with(f.path);
    check_error(r, {f.path});
    // The reader names what it could not read: a field cut short, a count that cannot
    // fit in what is left, or tensor data past the end.
    CHECK((r.err.find("truncated") != std::string::npos || r.err.find("remaining") != std::string::npos ||
           r.err.find("outside the file") != std::string::npos));
  }
}

TEST_CASE("cli: unsupported GGUF version") {
  check_changed_model([](GgufWriter& w) { w.version = 1; }, {"version 1"});
}

TEST_CASE("cli: absurd tensor count") {
  check_changed_model([](GgufWriter& w) { w.tensor_count = uint64_t(1) << 60; }, {});
}

TEST_CASE("cli: missing tensor") {
  check_changed_model([](GgufWriter& w) { w.remove_tensor("blk.3.ffn_up.weight"); }, {"blk.3.ffn_up.weight"});
}

TEST_CASE("cli: missing metadata key") {
  check_changed_model([](GgufWriter& w) { w.remove("llama.block_count"); }, {"llama.block_count"});
}

TEST_CASE("cli: unknown tensor type") {
  check_changed_model([](GgufWriter& w) { w.tensor("blk.0.attn_q.weight")->type = 77; },
                      {"blk.0.attn_q.weight", "type 77"});
}

TEST_CASE("cli: tensor data outside the file") {
  check_changed_model([](GgufWriter& w) { w.tensor("output.weight")->offset = uint64_t(1) << 40; },
                      {"output.weight", "outside"});
}

TEST_CASE("cli: wrong tensor shape") {
  check_changed_model(
      [](GgufWriter& w) {
        TensorSpec* t = w.tensor("blk.1.attn_k.weight");
        t->dims = {64, 64};
        t->data.resize(64 * 64 * 4);
      },
      {"blk.1.attn_k.weight", "shape"});
}

TEST_CASE("cli: hostile dimensions in metadata") {
  check_changed_model([](GgufWriter& w) { w.set("llama.embedding_length", gv_u32(0xffffffffu)); },
                      {"embedding_length"});
}

TEST_CASE("cli: a GPU asked for and absent") {
#ifdef FLASHSPEC_HAVE_CUDA
  std::string why;
  if (cuda::device_count(why) > 0) {
    MESSAGE("skipped: this machine has a CUDA device (test_cuda_backend.cpp covers it)");
    return;
  }
#endif
  for (const char* cmd : {"generate", "throughput"}) {
    CAPTURE(cmd);
    std::vector<std::string> args = {cmd, "-m", model_path("stories260K"), "--backend", "cuda"};
    if (std::string(cmd) == "generate") args.insert(args.end(), {"-p", "x"});
    check_error(run_cli(args), {"--backend cuda:"});
  }
#ifdef FLASHSPEC_HAVE_CUDA
  // The backend is a plugin beside the executable: an executable moved without it says so.
  TempFile moved("no-plugin");
  std::filesystem::copy_file(cli_path(), moved.path, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::permissions(moved.path, std::filesystem::perms::owner_exec, std::filesystem::perm_options::add);
  CliOptions o;
  o.program = moved.path;
  check_error(run_cli({"generate", "-m", model_path("stories260K"), "-p", "x", "--backend", "cuda"}, o),
              {"--backend cuda: cannot load the CUDA backend", "libflashspec-cuda.so"});
#endif
}

TEST_CASE("cli: a VRAM budget without a GPU backend") {
  check_error(run_cli({"generate", "-m", model_path("stories260K"), "-p", "x", "--vram-budget", "1G"}),
              {"--vram-budget needs --backend cuda"}, 2);
}

TEST_CASE("cli: bad flags are refused") {
  CHECK(run_cli({"generate", "-m", model_path("stories260K"), "-n", "-5"}).exit_code != 0);
  CHECK(run_cli({"generate", "-p", "x"}).exit_code != 0);  // no model
  CHECK(run_cli({"frobnicate"}).exit_code != 0);
  const CliResult r = run_cli({"generate", "-m", model_path("stories260K"), "-p", "x", "--ctx", "3"});
  check_error(r, {"--ctx"});
}

TEST_CASE("cli: generate --json gives tokens, text, logits and stats") {
  const CliResult r = run_cli({"generate", "-m", model_path("stories260K"), "-p", "Once upon a time",
                               "-n", "16", "--temp", "0", "--json", "--logits", "2"});
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const nlohmann::json ref = read_json(reference_path("stories260K"))[0];
  CHECK(j.at("prompt_tokens").get<std::vector<int32_t>>() == ref.at("prompt_tokens").get<std::vector<int32_t>>());
  const std::vector<int32_t> want = ref.at("greedy_tokens").get<std::vector<int32_t>>();
  CHECK(j.at("tokens").get<std::vector<int32_t>>() == std::vector<int32_t>(want.begin(), want.begin() + 16));
  CHECK(ref.at("greedy_text").get<std::string>().rfind(j.at("text").get<std::string>(), 0) == 0);
  CHECK(j.at("logits").size() == 2);
  CHECK(j.at("logits")[0].size() == 512);
  CHECK(j.at("stats").at("target_passes").get<int64_t>() == 16);
  CHECK(j.at("stats").at("tau").get<double>() == doctest::Approx(1.0));
}

TEST_CASE("cli: plain generate streams the text") {
  const CliResult r = run_cli({"generate", "-m", model_path("stories260K"), "-p", "Once upon a time",
                               "-n", "8", "--temp", "0"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.rfind("Once upon a time, there was a little girl", 0) == 0);
}

TEST_CASE("cli: inspect --json") {
  const CliResult r = run_cli({"inspect", model_path("stories260K-wide-q4_k_m"), "--json"});
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j.at("dim").get<int64_t>() == 256);
  CHECK(j.at("n_layers").get<int64_t>() == 8);
  CHECK(j.at("n_vocab").get<int64_t>() == 512);
  CHECK(j.at("bytes_by_type").contains("Q4_K"));
  CHECK(j.at("bytes_by_type").contains("Q6_K"));
  CHECK(j.at("layer_bytes").size() == 8);
}

TEST_CASE("cli: inspect names no host fallbacks: the CPU and CUDA backends have a kernel for every op") {
  const std::string model = model_path("stories260K");
  for (const std::string backend : {"cpu", "cuda"}) {
    CAPTURE(backend);
    const CliResult text = run_cli({"inspect", model, "--backend", backend});
    REQUIRE(text.exit_code == 0);
    CHECK(text.out.find("host fallbacks") == std::string::npos);
    const CliResult json = run_cli({"inspect", model, "--backend", backend, "--json"});
    REQUIRE(json.exit_code == 0);
    CHECK_FALSE(nlohmann::json::parse(json.out).contains("host_fallback_ops"));
  }
}
