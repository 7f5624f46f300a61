// Real chat templates rendered by flashspec::jinja against @huggingface/jinja's renderings
// (tests/reference/jinja-templates.json and jinja-llamacpp.json, made by
// tests/tokenizers/make_jinja_references.mjs), byte for byte; where the reference refused a
// conversation, the same refusal (raise_exception's message exactly, other errors ending with
// the reference's message).
#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/gguf.h"
#include "jinja/template.h"
#include "tests/fixtures.h"

namespace {

using nlohmann::ordered_json;

ordered_json read_ordered(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), path);
  return ordered_json::parse(in);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// SHA-256 (FIPS 180-4), to check a template read at test time is the one the reference rendered.
std::string sha256_hex(const std::string& data) {
  static const uint32_t k[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
      0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
      0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
      0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
      0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
      0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
      0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
      0xc67178f2};
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::string m = data;
  const uint64_t bits = static_cast<uint64_t>(data.size()) * 8;
  m += static_cast<char>(0x80);
  while (m.size() % 64 != 56) m += '\0';
  for (int i = 7; i >= 0; --i) m += static_cast<char>((bits >> (i * 8)) & 0xff);
  auto rotr = [](uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  for (size_t off = 0; off < m.size(); off += 64) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = (uint32_t(uint8_t(m[off + 4 * i])) << 24) | (uint32_t(uint8_t(m[off + 4 * i + 1])) << 16) |
             (uint32_t(uint8_t(m[off + 4 * i + 2])) << 8) | uint32_t(uint8_t(m[off + 4 * i + 3]));
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
  }
  std::string hex;
  char buf[9];
  for (uint32_t v : h) {
    std::snprintf(buf, sizeof buf, "%08x", v);
    hex += buf;
  }
  return hex;
}

// The template's text from where it lives; empty when it is not here (llama.cpp's).
std::string template_source(const ordered_json& t) {
  const std::string source = t["source"], path = t["path"];
  if (source == "gguf") {
    const auto gguf = flashspec::GgufFile::open(flashspec::testing::shared_dir() + "/" + path);
    const std::string* text = gguf.get_string("tokenizer.chat_template");
    REQUIRE_MESSAGE(text != nullptr, path);
    return *text;
  }
  if (source == "npm") {
    const ordered_json config = read_ordered(std::string(FS_SOURCE_DIR) + "/tests/tokenizers/node_modules/" + path);
    return config["chat_template"].get<std::string>();
  }
  const char* dir = std::getenv("FS_LLAMACPP_TEMPLATES");
  if (!dir || !*dir || !std::filesystem::exists(std::string(dir) + "/" + path)) return {};
  return read_text(std::string(dir) + "/" + path);
}

// Renders every conversation of a reference file through its templates; returns how many
// templates were checked.
int check_reference_file(const std::string& file) {
  const ordered_json ref = read_ordered(std::string(FS_SOURCE_DIR) + "/tests/reference/" + file);
  const ordered_json& conversations = ref["conversations"];
  flashspec::jinja::RenderOptions options;
  options.now = flashspec::jinja::DateTime{2025, 8, 5, 12, 0};
  int checked = 0;
  std::string skipped;
  for (const ordered_json& t : ref["templates"]) {
    const std::string name = t["name"];
    const std::string source = template_source(t);
    if (source.empty()) {
      skipped += (skipped.empty() ? "" : ", ") + t["path"].get<std::string>();
      continue;
    }
    INFO("template " << name);
    REQUIRE(sha256_hex(source) == t["sha256"].get<std::string>());
    const flashspec::jinja::Template tpl(source);
    REQUIRE(t["cases"].size() == conversations.size());
    for (size_t i = 0; i < conversations.size(); ++i) {
      const ordered_json& want = t["cases"][i];
      INFO("conversation: " << conversations[i]["name"].get<std::string>());
      std::string text, error;
      try {
        text = tpl.render(conversations[i]["context"], options);
      } catch (const flashspec::Error& e) {
        error = e.what();
      }
      if (want.contains("text")) {
        CHECK(error == "");
        CHECK(text == want["text"].get<std::string>());
      } else {
        const std::string expected = want["error"];
        CHECK(!error.empty());
        const bool same = error == expected ||
                          (error.size() > expected.size() && error.compare(error.size() - expected.size() - 2, std::string::npos, ": " + expected) == 0);
        CHECK_MESSAGE(same, "got \"" << error << "\", the reference refused with \"" << expected << "\"");
      }
    }
    ++checked;
  }
  if (!skipped.empty())
    MESSAGE("skipped (llama.cpp's models/templates, not here: set FS_LLAMACPP_TEMPLATES to that directory): " << skipped);
  return checked;
}

}  // namespace

TEST_CASE("jinja sha256 of the template checks is the standard one") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex(std::string(1000, 'a')) == "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
}

TEST_CASE("jinja renders Qwen3, Llama 3, Qwen2.5, Gemma 3 and DeepSeek V3 chat templates as the reference") {
  CHECK(check_reference_file("jinja-templates.json") == 5);
}

TEST_CASE("jinja renders llama.cpp's collected chat templates as the reference (where they are here)") {
  check_reference_file("jinja-llamacpp.json");
}
