// GGUF reader: the fixture models' known facts, a writer round trip, and one malformed
// file per error the reader reports (each must be a one-line Error naming the file).
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "core/mapped_file.h"
#include "tests/fixtures.h"
#include "tests/gguf_writer.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

const std::string kModels = shared_dir() + "/models/";
const std::string kStories = kModels + "stories260K.gguf";
const std::string kWideQ4KM = kModels + "stories260K-wide-q4_k_m.gguf";

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Every reader error is a single line starting with "NAME: ".
void check_one_line(const std::string& msg, const std::string& name) {
  INFO("message: " << msg);
  CHECK(msg.rfind(name + ": ", 0) == 0);
  CHECK(msg.find('\n') == std::string::npos);
  CHECK(msg.find('\r') == std::string::npos);
}

// The Error message of opening `path`; fails the test when it opens fine.
std::string open_error(const std::string& path) {
  try {
    GgufFile::open(path);
  } catch (const Error& e) {
    check_one_line(e.what(), path);
    return e.what();
  }
  FAIL("expected GgufFile::open to throw for " << path);
  return {};
}

// Writes the image to a temporary file and returns the Error message of opening it.
std::string open_error(const std::vector<uint8_t>& image) {
  TempFile f("fs-gguf-bad");
  write_file(f.path, image);
  const std::string msg = open_error(f.path);
  return msg;
}
std::string open_error(const GgufWriter& w) { return open_error(w.bytes()); }

// The Error message of parsing an in-memory image (named "mem.gguf").
std::string parse_error(std::span<const uint8_t> image, const std::string& name = "mem.gguf") {
  try {
    GgufFile::parse(image, name);
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("expected GgufFile::parse to throw");
  return {};
}

// A small valid model: a few keys and two tensors.
GgufWriter small_writer() {
  GgufWriter w;
  w.set("general.architecture", gv_str("llama"));
  w.set("llama.block_count", gv_u32(1));
  w.set("tokenizer.ggml.tokens", gv_str_array({"<unk>", "<s>", "</s>", "a"}));
  w.add_tensor_f32("norm.weight", {4}, {1, 2, 3, 4});
  w.add_tensor("w", {32, 2}, GgmlType::Q8_0);
  return w;
}

template <class T>
std::vector<uint8_t> le(T v) {
  std::vector<uint8_t> b(sizeof(T));
  std::memcpy(b.data(), &v, sizeof(T));
  return b;
}
std::vector<uint8_t> cat(std::initializer_list<std::vector<uint8_t>> parts) {
  std::vector<uint8_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Position of the first occurrence of `needle` in `hay` (fails the test if absent).
size_t find_bytes(const std::vector<uint8_t>& hay, std::string_view needle) {
  auto it = std::search(hay.begin(), hay.end(), needle.begin(), needle.end());
  REQUIRE(it != hay.end());
  return size_t(it - hay.begin());
}

template <class T>
void patch(std::vector<uint8_t>& image, size_t at, T v) {
  REQUIRE(at + sizeof(T) <= image.size());
  std::memcpy(image.data() + at, &v, sizeof(T));
}

// Walks everything a parsed file exposes; checks the invariants callers rely on.
void walk(const GgufFile& f) {
  size_t n = 0;
  for (const auto& [k, v] : f.metadata()) {
    CHECK(f.find(k) == &v);
    n += k.size();
  }
  for (const GgufTensorInfo& t : f.tensors()) {
    CHECK(f.find_tensor(t.name) == &t);
    REQUIRE(!t.dims.empty());
    CHECK(t.dims.size() <= 4);
    CHECK(t.elements() > 0);
    CHECK(t.file_offset == f.data_offset() + t.offset);
    CHECK(t.file_offset % f.alignment() == 0);
    CHECK(t.file_offset + t.nbytes <= f.file_size());
    CHECK(t.nbytes == uint64_t(row_bytes(t.type, t.dims[0]) * t.rows()));
  }
  (void)n;
}

}  // namespace

// ---------------------------------------------------------------- fixture models

TEST_CASE("gguf: stories260K.gguf known facts") {
  const GgufFile f = GgufFile::open(kStories);
  CHECK(f.path() == kStories);
  CHECK(f.version() == 3);
  CHECK(f.file_size() == 1185376);
  CHECK(f.alignment() == 32);
  CHECK(f.data_offset() == 14176);
  CHECK(f.metadata().size() == 19);
  CHECK(f.tensors().size() == 48);  // 3 + 5 layers x 9
  walk(f);

  CHECK(f.require_string("general.architecture") == "llama");
  CHECK(f.require_string("tokenizer.ggml.model") == "llama");
  CHECK(f.require_uint("llama.embedding_length") == 64);
  CHECK(f.require_uint("llama.block_count") == 5);
  CHECK(f.require_uint("llama.feed_forward_length") == 172);
  CHECK(f.require_uint("llama.attention.head_count") == 8);
  CHECK(f.require_uint("llama.attention.head_count_kv") == 4);
  CHECK(f.require_uint("llama.context_length") == 128);
  CHECK(f.require_uint("llama.rope.dimension_count") == 8);
  CHECK(f.require_uint("tokenizer.ggml.bos_token_id") == 1);
  CHECK(f.require_uint("tokenizer.ggml.eos_token_id") == 2);
  CHECK(f.require_uint("tokenizer.ggml.padding_token_id") == 4294967295u);
  CHECK(f.find("llama.embedding_length")->type == GgufValueType::UINT32);
  CHECK(f.require_float("llama.attention.layer_norm_rms_epsilon") == doctest::Approx(1e-5));
  CHECK(f.get_float("llama.embedding_length") == 64.0);  // integers read as numbers too
  CHECK(f.metadata().front().first == "tokenizer.ggml.tokens");  // file order kept

  const GgufArray& tokens = f.require_array("tokenizer.ggml.tokens");
  CHECK(tokens.elem_type == GgufValueType::STRING);
  REQUIRE(tokens.items.size() == 512);
  CHECK(*tokens.items[0].as_string() == "<unk>");
  CHECK(*tokens.items[1].as_string() == "<s>");
  CHECK(*tokens.items[2].as_string() == "</s>");
  const GgufArray& scores = f.require_array("tokenizer.ggml.scores");
  CHECK(scores.elem_type == GgufValueType::FLOAT32);
  CHECK(scores.items.size() == 512);
  const GgufArray& types = f.require_array("tokenizer.ggml.token_type");
  CHECK(types.elem_type == GgufValueType::INT32);
  REQUIRE(types.items.size() == 512);
  CHECK(types.items[0].as_int() == 2);
  CHECK(types.items[1].as_int() == 3);

  const GgufTensorInfo& emb = f.require_tensor("token_embd.weight");
  CHECK(emb.dims == std::vector<int64_t>{64, 512});
  CHECK(emb.type == GgmlType::F32);
  CHECK(emb.elements() == 64 * 512);
  CHECK(emb.rows() == 512);
  CHECK(emb.nbytes == 64 * 512 * 4);
  CHECK(emb.offset == 0);
  CHECK(emb.file_offset == 14176);
  CHECK(f.require_tensor("output_norm.weight").dims == std::vector<int64_t>{64});
  CHECK(f.require_tensor("output_norm.weight").offset == 131072);
  CHECK(f.require_tensor("blk.0.ffn_down.weight").dims == std::vector<int64_t>{172, 64});
  for (int l = 0; l < 5; ++l) {
    for (const char* part : {"attn_q", "attn_k", "attn_v", "attn_output", "attn_norm", "ffn_gate",
                             "ffn_down", "ffn_up", "ffn_norm"}) {
      const std::string name = "blk." + std::to_string(l) + "." + part + ".weight";
      CHECK_MESSAGE(f.find_tensor(name) != nullptr, name);
    }
  }

  // The mapped bytes are the file's bytes.
  std::ifstream in(kStories, std::ios::binary);
  in.seekg(std::streamoff(emb.file_offset));
  std::vector<char> expect(emb.nbytes);
  in.read(expect.data(), std::streamsize(expect.size()));
  REQUIRE(in);
  CHECK(std::memcmp(f.tensor_data(emb), expect.data(), expect.size()) == 0);

  // Absent keys and tensors.
  CHECK(f.find("no.such.key") == nullptr);
  CHECK(!f.get_uint("no.such.key"));
  CHECK(!f.get_float("no.such.key"));
  CHECK(!f.get_bool("no.such.key"));
  CHECK(f.get_string("no.such.key") == nullptr);
  CHECK(f.get_array("no.such.key") == nullptr);
  CHECK(f.find_tensor("no.such.tensor") == nullptr);
}

TEST_CASE("gguf: typed getters report the wrong type and missing keys") {
  const GgufFile f = GgufFile::open(kStories);
  auto err = [&](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      check_one_line(e.what(), kStories);
      return e.what();
    }
    FAIL("expected an Error");
    return {};
  };
  // A getter of another type names the key, its type and the type asked for.
  const std::pair<std::function<void()>, const char*> wrong_type[] = {
      {[&] { f.get_uint("general.architecture"); },
       ": key 'general.architecture' has type string, expected an unsigned integer"},
      {[&] { f.get_float("tokenizer.ggml.model"); }, "key 'tokenizer.ggml.model' has type string, expected a number"},
      {[&] { f.get_bool("llama.block_count"); }, "key 'llama.block_count' has type uint32, expected a bool"},
      {[&] { f.get_string("llama.block_count"); }, "key 'llama.block_count' has type uint32, expected a string"},
      {[&] { f.get_array("general.name"); }, "key 'general.name' has type string, expected an array"},
      {[&] { f.get_uint("tokenizer.ggml.tokens"); },
       "key 'tokenizer.ggml.tokens' has type array of string, expected an unsigned integer"},
      {[&] { f.get_uint("llama.attention.layer_norm_rms_epsilon"); }, "has type float32, expected an unsigned integer"},
  };
  for (const auto& [call, message] : wrong_type) {
    CAPTURE(message);
    CHECK(contains(err(call), message));
  }
  // Every require_* names what is missing.
  for (const std::string& e : {err([&] { f.require_float("llama.missing"); }),
                               err([&] { f.require_string("llama.missing"); }),
                               err([&] { f.require_array("llama.missing"); })})
    CHECK(contains(e, "missing required key 'llama.missing'"));
  CHECK(contains(err([&] { f.require_uint("llama.missing"); }), ": missing required key 'llama.missing'"));
  CHECK(contains(err([&] { f.require_tensor("blk.9.attn_q.weight"); }),
                 ": missing required tensor 'blk.9.attn_q.weight'"));
}

TEST_CASE("gguf: stories260K-wide-q4_k_m.gguf holds Q4_K and Q6_K tensors") {
  const GgufFile f = GgufFile::open(kWideQ4KM);
  walk(f);
  CHECK(f.version() == 3);
  CHECK(f.tensors().size() == 75);  // 3 + 8 layers x 9
  CHECK(f.require_uint("llama.embedding_length") == 256);
  CHECK(f.require_uint("llama.block_count") == 8);
  CHECK(f.require_uint("general.file_type") == 15);
  std::set<GgmlType> seen;
  for (const auto& t : f.tensors()) seen.insert(t.type);
  CHECK(seen == std::set<GgmlType>{GgmlType::F32, GgmlType::Q4_K, GgmlType::Q6_K});
  const GgufTensorInfo& out = f.require_tensor("output.weight");
  CHECK(out.type == GgmlType::Q6_K);
  CHECK(out.dims == std::vector<int64_t>{256, 512});
  CHECK(out.nbytes == 512 * sizeof(BlockQ6_K));
  const GgufTensorInfo& emb = f.require_tensor("token_embd.weight");
  CHECK(emb.type == GgmlType::Q4_K);
  CHECK(emb.nbytes == 512 * sizeof(BlockQ4_K));
}

TEST_CASE("gguf: every fixture model parses") {
  struct Case {
    const char* file;
    GgmlType must_have;
    size_t n_tensors;
  };
  for (const Case& c : {Case{"salty279K.gguf", GgmlType::F32, 48},
                        Case{"stories260K-wide-f32.gguf", GgmlType::F32, 75},
                        Case{"stories260K-wide-q8_0.gguf", GgmlType::Q8_0, 75},
                        Case{"stories260K-wide-q4_0.gguf", GgmlType::Q4_0, 75}}) {
    INFO(c.file);
    const GgufFile f = GgufFile::open(kModels + c.file);
    walk(f);
    CHECK(f.tensors().size() == c.n_tensors);
    bool found = false;
    for (const auto& t : f.tensors()) found |= t.type == c.must_have;
    CHECK(found);
    CHECK(f.require_array("tokenizer.ggml.tokens").items.size() == 512);
  }
}

TEST_CASE("gguf: a GgufFile can be moved and keeps its mapping") {
  GgufFile a = GgufFile::open(kStories);
  const uint8_t* p = a.tensor_data(a.require_tensor("output_norm.weight"));
  GgufFile b = std::move(a);
  CHECK(b.tensor_data(b.require_tensor("output_norm.weight")) == p);
  float x;
  std::memcpy(&x, p, 4);
  CHECK(std::isfinite(x));
}

// ---------------------------------------------------------------- writer round trip

TEST_CASE("gguf: writer round trip of every value type, nested arrays, v2 and v3") {
  for (uint32_t version : {2u, 3u}) {
    GgufWriter w;
    w.version = version;
    w.set("u8", gv_u8(200));
    w.set("i8", gv_i8(-100));
    w.set("u16", gv_u16(60000));
    w.set("i16", gv_i16(-30000));
    w.set("u32", gv_u32(4000000000u));
    w.set("i32", gv_i32(-2000000000));
    w.set("f32", gv_f32(1.5f));
    w.set("bool", gv_bool(true));
    w.set("str", gv_str("héllo"));
    w.set("empty", gv_str(""));
    w.set("u64", gv_u64(~uint64_t(0)));
    w.set("i64", gv_i64(std::numeric_limits<int64_t>::min()));
    w.set("f64", gv_f64(-2.25));
    w.set("tokens", gv_str_array({"a", "", "ccc"}));
    w.set("floats", gv_f32_array({0.5f, -1.0f}));
    w.set("ints", gv_i32_array({-1, 7}));
    w.set("none", gv_array(GgufValueType::UINT16, {}));
    w.set("bools", gv_array(GgufValueType::BOOL, {gv_bool(false), gv_bool(true)}));
    // 4 levels of arrays: allowed.
    GgufValue lvl = gv_u32_array({1, 2, 3});
    for (int i = 0; i < 3; ++i) lvl = gv_array(GgufValueType::ARRAY, {lvl, gv_array(lvl.as_array()->elem_type, {})});
    w.set("nested", lvl);
    w.set("general.alignment", gv_u32(64));
    w.add_tensor_f32("a", {3}, {1, 2, 3});
    w.add_tensor("b", {256, 3}, GgmlType::Q4_K);
    w.add_tensor("c", {32, 2, 2, 2}, GgmlType::Q4_0);
    w.add_tensor("d", {8}, GgmlType::BF16);

    const std::vector<uint8_t> image = w.bytes();
    const GgufFile f = GgufFile::parse(image, "rt.gguf");
    walk(f);
    CHECK(f.version() == version);
    CHECK(f.alignment() == 64);
    CHECK(f.data_offset() % 64 == 0);
    CHECK(f.get_uint("u8") == 200);
    CHECK(f.find("i8")->as_int() == -100);
    CHECK(f.find("i8")->type == GgufValueType::INT8);
    CHECK(f.get_uint("u16") == 60000);
    CHECK(f.find("i16")->as_int() == -30000);
    CHECK(f.get_uint("u32") == 4000000000u);
    CHECK(f.find("i32")->as_int() == -2000000000);
    CHECK(f.get_float("f32") == 1.5);
    CHECK(f.get_bool("bool") == true);
    CHECK(*f.get_string("str") == "héllo");
    CHECK(*f.get_string("empty") == "");
    CHECK(f.get_uint("u64") == ~uint64_t(0));
    CHECK(f.find("u64")->as_int() == std::nullopt);
    CHECK(f.find("i64")->as_int() == std::numeric_limits<int64_t>::min());
    CHECK(f.find("i64")->as_uint() == std::nullopt);
    CHECK(f.get_float("f64") == -2.25);
    CHECK(f.find("bool")->as_uint() == std::nullopt);
    CHECK(f.find("bool")->as_float() == std::nullopt);
    CHECK(f.find("str")->as_float() == std::nullopt);
    const GgufArray& t = *f.get_array("tokens");
    REQUIRE(t.items.size() == 3);
    CHECK(*t.items[2].as_string() == "ccc");
    CHECK(f.get_array("floats")->items[1].as_float() == -1.0);
    CHECK(f.get_array("ints")->items[0].as_int() == -1);
    CHECK(f.get_array("none")->elem_type == GgufValueType::UINT16);
    CHECK(f.get_array("none")->items.empty());
    CHECK(std::get<bool>(f.get_array("bools")->items[1].v) == true);
    const GgufArray* a = f.get_array("nested");
    for (int i = 0; i < 3; ++i) {
      REQUIRE(a->elem_type == GgufValueType::ARRAY);
      REQUIRE(a->items.size() == 2);
      a = a->items[0].as_array();
      REQUIRE(a);
    }
    CHECK(a->elem_type == GgufValueType::UINT32);
    CHECK(a->items[2].as_uint() == 3);

    const GgufTensorInfo& ta = f.require_tensor("a");
    float v[3];
    std::memcpy(v, f.tensor_data(ta), sizeof v);
    CHECK(v[2] == 3.0f);
    CHECK(f.require_tensor("b").nbytes == 3 * sizeof(BlockQ4_K));
    CHECK(f.require_tensor("c").nbytes == 8 * sizeof(BlockQ4_0));
    CHECK(f.require_tensor("c").rows() == 8);
    CHECK(f.require_tensor("d").nbytes == 16);
    for (const auto& ti : f.tensors()) CHECK(ti.offset % 64 == 0);
  }
}

TEST_CASE("gguf: GgufWriter::from copies a real model exactly") {
  const GgufFile src = GgufFile::open(kStories);
  GgufWriter w = GgufWriter::from(src);
  const std::vector<uint8_t> image = w.bytes();
  CHECK(image == read_file(kStories));  // same layout as the converter wrote

  // Derive a variant: another vocabulary, one tensor fewer.
  std::vector<std::string> vocab;
  for (int i = 0; i < 600; ++i) vocab.push_back(std::string("t").append(std::to_string(i)));
  w.set("tokenizer.ggml.tokens", gv_str_array(vocab));
  w.remove("tokenizer.ggml.scores");
  w.remove_tensor("output.weight");
  REQUIRE(w.tensor("token_embd.weight") != nullptr);
  TempFile tmp("fs-gguf-variant");
  w.write(tmp.path);
  const GgufFile f = GgufFile::open(tmp.path);
  walk(f);
  CHECK(f.require_array("tokenizer.ggml.tokens").items.size() == 600);
  CHECK(f.find("tokenizer.ggml.scores") == nullptr);
  CHECK(f.find_tensor("output.weight") == nullptr);
  CHECK(f.tensors().size() == 47);
  CHECK(f.metadata().front().first == "tokenizer.ggml.tokens");
  const auto& e0 = src.require_tensor("blk.4.ffn_up.weight");
  const auto& e1 = f.require_tensor("blk.4.ffn_up.weight");
  CHECK(std::memcmp(src.tensor_data(e0), f.tensor_data(e1), e0.nbytes) == 0);
}

TEST_CASE("gguf: a file without tensors or metadata is valid") {
  GgufWriter w;
  const auto image = w.bytes();
  CHECK(image.size() == 24);
  const GgufFile f = GgufFile::parse(image, "empty.gguf");
  CHECK(f.tensors().empty());
  CHECK(f.metadata().empty());
}

// ---------------------------------------------------------------- bad input: one per error

TEST_CASE("gguf: missing, unreadable and non-regular files") {
  const std::string missing = "/nonexistent-dir-flashspec/model.gguf";
  CHECK(open_error(missing) == missing + ": cannot open: No such file or directory");

  const std::string dir = shared_dir() + "/models";
  CHECK(open_error(dir) == dir + ": is a directory");

  CHECK(contains(open_error(std::string("/dev/null")), "/dev/null: not a regular file"));

  if (::geteuid() != 0) {  // root reads anything
    TempFile f("fs-gguf-unreadable");
    small_writer().write(f.path);
    REQUIRE(::chmod(f.path.c_str(), 0) == 0);
    CHECK(open_error(f.path) == f.path + ": cannot open: Permission denied");
  }

  // MappedFile itself.
  CHECK_THROWS_AS(MappedFile::open(missing), Error);
  TempFile e("fs-gguf-empty");
  const MappedFile m = MappedFile::open(e.path);
  CHECK(m.size() == 0);
  CHECK(m.bytes().empty());
}

TEST_CASE("gguf: empty file, bad magic and unsupported versions") {
  TempFile e("fs-gguf-empty");
  CHECK(open_error(e.path) == e.path + ": truncated at byte 0 while reading the magic");

  std::vector<uint8_t> image = small_writer().bytes();
  {
    auto bad = image;
    bad[3] = 'X';
    CHECK(contains(open_error(bad), ": not a GGUF file (bad magic)"));
  }
  CHECK(contains(open_error(std::vector<uint8_t>{'G', 'G'}), ": truncated at byte 2 while reading the magic"));
  CHECK(contains(open_error(std::vector<uint8_t>{'P', 'K'}), ": not a GGUF file (bad magic)"));
  {
    std::vector<uint8_t> text = {'h', 'e', 'l', 'l', 'o', '\n'};
    CHECK(contains(open_error(text), ": not a GGUF file (bad magic)"));
  }
  for (uint32_t v : {0u, 1u, 4u, 0xffffffffu}) {
    GgufWriter w = small_writer();
    w.version = v;
    const std::string msg = open_error(w);
    CHECK(contains(msg, ": unsupported GGUF version " + std::to_string(v)));
    CHECK(!contains(msg, "big-endian"));
  }
  GgufWriter be = small_writer();
  be.version = 0x03000000;  // a byte-swapped 3
  CHECK(contains(open_error(be), "unsupported GGUF version 50331648 (a big-endian file?"));
}

TEST_CASE("gguf: truncation is reported with the byte and the field") {
  const std::vector<uint8_t> image = small_writer().bytes();
  auto cut = [&](size_t n) { return std::vector<uint8_t>(image.begin(), image.begin() + long(n)); };
  CHECK(contains(open_error(cut(6)), ": truncated at byte 6 while reading the version"));
  CHECK(contains(open_error(cut(10)), ": truncated at byte 10 while reading the tensor count"));
  CHECK(contains(open_error(cut(20)), ": truncated at byte 20 while reading the metadata count"));

  // Inside a key / value: build files whose last field is the one cut.
  {
    GgufWriter w;
    w.set("some.key", gv_u32(7));
    w.set("other.key", gv_u64(7));
    auto b = w.bytes();
    b.resize(b.size() - 3);
    CHECK(contains(open_error(b), "truncated at byte " + std::to_string(b.size()) +
                                      " while reading the value of key 'other.key'"));
    b.resize(find_bytes(b, "other.key") - 3);
    CHECK(contains(open_error(b), "while reading the length of the key of metadata entry 1"));
    b = w.bytes();
    b.resize(find_bytes(b, "other.key") + 9 + 2);
    CHECK(contains(open_error(b), "while reading the value type of key 'other.key'"));
  }
  {
    GgufWriter w;
    w.set("k", gv_u32(1));
    w.set("arr", gv_array(GgufValueType::UINT32, {}));
    auto b = w.bytes();
    b.resize(b.size() - 3);  // inside the element count
    CHECK(contains(open_error(b), "while reading the array length of the value of key 'arr'"));
    b.resize(b.size() - 7);  // inside the element type
    CHECK(contains(open_error(b), "while reading the array element type of the value of key 'arr'"));
  }
  {
    GgufWriter w;
    w.set("k", gv_str_array({std::string(20, 'a'), std::string(20, 'b'), "three"}));
    auto b = w.bytes();
    b.resize(b.size() - 12);  // inside the length of element 2
    CHECK(contains(open_error(b), "while reading the length of element 2 of the value of key 'k'"));
  }

  // Inside the tensor infos.
  {
    GgufWriter w = small_writer();
    w.alignment = 1;  // no padding: the file ends right after the infos when data is empty
    auto b = w.bytes();
    const size_t at = find_bytes(b, std::string_view("\x01\0\0\0\0\0\0\0w", 9)) + 9;  // tensor "w"
    b.resize(at + 3);
    CHECK(contains(open_error(b), "while reading the dimension count of tensor 'w'"));
    b = w.bytes();
    b.resize(at + 4 + 8 + 3);
    CHECK(contains(open_error(b), "while reading dimension 1 of tensor 'w'"));
    b = w.bytes();
    b.resize(at + 4 + 16 + 2);
    CHECK(contains(open_error(b), "while reading the type of tensor 'w'"));
    b = w.bytes();
    b.resize(at + 4 + 16 + 4 + 7);
    CHECK(contains(open_error(b), "while reading the data offset of tensor 'w'"));
  }

  // Inside the data: the tensor's bytes lie outside the file.
  {
    GgufWriter w = small_writer();
    auto b = w.bytes();
    const GgufFile ok = GgufFile::parse(b, "x");
    const GgufTensorInfo& t = ok.require_tensor("w");
    CHECK(t.file_offset + t.nbytes == b.size());
    b.pop_back();
    CHECK(contains(open_error(b), ": tensor 'w' data [" + std::to_string(t.file_offset) + ", " +
                                      std::to_string(t.file_offset + t.nbytes) +
                                      ") lies outside the file (size " + std::to_string(b.size()) +
                                      ")"));
  }
}

TEST_CASE("gguf: absurd counts and lengths are rejected before allocating") {
  {
    GgufWriter w = small_writer();
    w.tensor_count = uint64_t(1) << 40;
    CHECK(contains(open_error(w), ": tensor count 1099511627776 is too large for the remaining"));
    w.tensor_count = ~uint64_t(0);
    CHECK(contains(open_error(w), ": tensor count 18446744073709551615 is too large"));
  }
  {
    GgufWriter w = small_writer();
    w.kv_count = ~uint64_t(0);
    CHECK(contains(open_error(w), ": metadata count 18446744073709551615 is too large for the remaining"));
    w.kv_count = 1000;  // fits the header check's estimate but not the real entries
    CHECK_THROWS_AS(GgufFile::parse(w.bytes(), "x"), Error);
  }
  {
    // Tensor count plausible for the bytes after the header, but not after the metadata.
    GgufWriter w;
    w.set("pad", gv_str(std::string(1000, 'x')));
    w.tensor_count = 20;
    CHECK(contains(open_error(w), "while reading the length of the name of tensor 0"));
  }
  {
    GgufWriter w;
    w.add_raw("k", uint32_t(GgufValueType::STRING), le<uint64_t>(uint64_t(1) << 50));
    CHECK(contains(open_error(w), ": string length 1125899906842624 of the value of key 'k' at byte "));
    CHECK(contains(open_error(w), "runs past the end of the file (size "));
  }
  {
    // Key length beyond the file.
    GgufWriter w;
    w.set("abcdef", gv_u8(1));
    auto b = w.bytes();
    patch<uint64_t>(b, find_bytes(b, "abcdef") - 8, ~uint64_t(0));
    CHECK(contains(open_error(b), ": string length 18446744073709551615 of the key of metadata entry 0"));
  }
  {
    // Tensor name length beyond the file.
    GgufWriter w = small_writer();
    auto b = w.bytes();
    patch<uint64_t>(b, find_bytes(b, "norm.weight") - 8, uint64_t(1) << 33);
    CHECK(contains(open_error(b), ": string length 8589934592 of the name of tensor 0"));
  }
  {
    GgufWriter w;
    w.add_raw("arr", uint32_t(GgufValueType::ARRAY),
              cat({le<uint32_t>(uint32_t(GgufValueType::UINT32)), le<uint64_t>(uint64_t(1) << 40)}));
    CHECK(contains(open_error(w), ": the value of key 'arr' is an array of 1099511627776 uint32 "
                                  "elements, more than the remaining 0 bytes of the file can hold"));
  }
  {
    // Strings need at least 8 bytes each: 100 string elements cannot fit in 500 bytes.
    GgufWriter w;
    w.add_raw("arr", uint32_t(GgufValueType::ARRAY),
              cat({le<uint32_t>(uint32_t(GgufValueType::STRING)), le<uint64_t>(100),
                   std::vector<uint8_t>(500, 0)}));
    CHECK(contains(open_error(w), "is an array of 100 string elements, more than the remaining 500 bytes"));
  }
  {
    // Nested: an inner array's count is checked too.
    GgufWriter w;
    w.add_raw("arr", uint32_t(GgufValueType::ARRAY),
              cat({le<uint32_t>(uint32_t(GgufValueType::ARRAY)), le<uint64_t>(1),
                   le<uint32_t>(uint32_t(GgufValueType::INT64)), le<uint64_t>(~uint64_t(0) / 2)}));
    CHECK(contains(open_error(w), ": element 0 of the value of key 'arr' is an array of "));
  }
  {
    // All arrays together are capped (each element becomes an object in memory).
    GgufWriter w;
    const uint64_t n = (uint64_t(1) << 24) + 1;
    std::vector<uint8_t> raw = cat({le<uint32_t>(uint32_t(GgufValueType::UINT8)), le<uint64_t>(n)});
    raw.resize(raw.size() + n, 1);
    w.add_raw("big", uint32_t(GgufValueType::ARRAY), std::move(raw));
    CHECK(contains(open_error(w), ": metadata arrays hold more than 16777216 elements in total"));
  }
}

TEST_CASE("gguf: unknown value types, bad bools and deep nesting") {
  {
    GgufWriter w;
    w.set("fine", gv_u8(1));
    w.add_raw("weird", 13, le<uint32_t>(0));
    CHECK(contains(open_error(w), ": key 'weird' has unknown value type 13"));
  }
  {
    GgufWriter w;
    w.add_raw("weird", 0x80000000u, {});
    CHECK(contains(open_error(w), ": key 'weird' has unknown value type 2147483648"));
  }
  {
    GgufWriter w;
    w.add_raw("arr", uint32_t(GgufValueType::ARRAY), cat({le<uint32_t>(99), le<uint64_t>(0)}));
    CHECK(contains(open_error(w), ": the value of key 'arr' has unknown array element type 99"));
  }
  {
    GgufWriter w;
    w.add_raw("flag", uint32_t(GgufValueType::BOOL), {2});
    CHECK(contains(open_error(w), ": the value of key 'flag' has invalid bool value 2"));
  }
  {
    GgufWriter w;
    w.add_raw("flags", uint32_t(GgufValueType::ARRAY),
              cat({le<uint32_t>(uint32_t(GgufValueType::BOOL)), le<uint64_t>(2), {1, 7}}));
    CHECK(contains(open_error(w), ": element 1 of the value of key 'flags' has invalid bool value 7"));
  }
  {
    GgufValue v = gv_u32_array({1});
    for (int i = 0; i < 4; ++i) v = gv_array(GgufValueType::ARRAY, {v});  // 5 levels
    GgufWriter w;
    w.set("deep", v);
    CHECK(contains(open_error(w), "has arrays nested more than 4 levels deep"));
  }
  {
    // Deep nesting is refused from the types alone, even with empty arrays.
    std::vector<uint8_t> raw;
    for (int i = 0; i < 4; ++i) {
      auto level = cat({le<uint32_t>(uint32_t(GgufValueType::ARRAY)), le<uint64_t>(1)});
      raw.insert(raw.end(), level.begin(), level.end());
    }
    auto last = cat({le<uint32_t>(uint32_t(GgufValueType::ARRAY)), le<uint64_t>(0)});
    raw.insert(raw.end(), last.begin(), last.end());
    GgufWriter w;
    w.add_raw("deep", uint32_t(GgufValueType::ARRAY), raw);
    CHECK(contains(open_error(w), "nested more than 4 levels deep"));
  }
}

TEST_CASE("gguf: general.alignment must be a nonzero power of two") {
  for (uint32_t a : {0u, 3u, 48u, 0xffffffffu}) {
    GgufWriter w = small_writer();
    w.alignment = 32;
    w.set("general.alignment", gv_u32(a));
    CHECK(contains(open_error(w), ": general.alignment " + std::to_string(a) + " is not a nonzero power of two"));
  }
  {
    GgufWriter w = small_writer();
    w.alignment = 32;
    w.set("general.alignment", gv_u64(uint64_t(1) << 40));
    CHECK(contains(open_error(w), ": general.alignment 1099511627776 is too large"));
  }
  {
    GgufWriter w = small_writer();
    w.set("general.alignment", gv_str("32"));
    CHECK(contains(open_error(w), ": key 'general.alignment' has type string, expected an unsigned integer"));
    w.set("general.alignment", gv_i32(-32));
    CHECK(contains(open_error(w), ": key 'general.alignment' has type int32, expected an unsigned integer"));
  }
  for (uint32_t a : {1u, 8u, 256u, 4096u}) {
    GgufWriter w = small_writer();
    w.set("general.alignment", gv_u32(a));
    const auto b = w.bytes();
    const GgufFile f = GgufFile::parse(b, "x");
    CHECK(f.alignment() == a);
    CHECK(f.data_offset() % a == 0);
    walk(f);
  }
}

TEST_CASE("gguf: tensor shape, type and offset errors") {
  auto with = [](auto&& edit) {
    GgufWriter w = small_writer();
    TensorSpec* t = w.tensor("w");
    REQUIRE(t);
    edit(*t);
    return open_error(w);
  };
  CHECK(contains(with([](TensorSpec& t) { t.n_dims = 0; }), ": tensor 'w' has 0 dimensions (must be 1 to 4)"));
  CHECK(contains(with([](TensorSpec& t) { t.n_dims = 5; }), ": tensor 'w' has 5 dimensions (must be 1 to 4)"));
  CHECK(contains(with([](TensorSpec& t) { t.n_dims = 0xffffffffu; }), ": tensor 'w' has 4294967295 dimensions"));
  CHECK(contains(with([](TensorSpec& t) { t.dims = {32, 0}; }), ": tensor 'w' dimension 1 is 0 (must be positive)"));
  CHECK(contains(with([](TensorSpec& t) { t.dims = {uint64_t(-32), 2}; }),
                 ": tensor 'w' dimension 0 is -32 (must be positive)"));
  CHECK(contains(with([](TensorSpec& t) { t.dims = {32, uint64_t(1) << 32, uint64_t(1) << 32}; }),
                 ": tensor 'w' element count overflows"));
  CHECK(contains(with([](TensorSpec& t) {
                   t.type = uint32_t(GgmlType::F32);
                   t.dims = {uint64_t(1) << 61, 2};
                 }),
                 ": tensor 'w' byte size overflows"));
  CHECK(contains(with([](TensorSpec& t) {
                   t.type = uint32_t(GgmlType::F32);
                   t.dims = {4, uint64_t(1) << 60};
                 }),
                 ": tensor 'w' byte size overflows"));
  CHECK(contains(with([](TensorSpec& t) { t.type = 3; }), ": tensor 'w' has unsupported type 3"));
  CHECK(contains(with([](TensorSpec& t) { t.type = 1000; }), ": tensor 'w' has unsupported type 1000"));
  CHECK(contains(with([](TensorSpec& t) { t.dims = {33, 2}; }),
                 ": tensor 'w' row length 33 is not a multiple of the Q8_0 block size 32"));
  CHECK(contains(with([](TensorSpec& t) {
                   t.type = uint32_t(GgmlType::Q4_K);
                   t.dims = {128, 2};
                 }),
                 ": tensor 'w' row length 128 is not a multiple of the Q4_K block size 256"));
  CHECK(contains(with([](TensorSpec& t) { t.offset = 4; }),
                 ": tensor 'w' data offset 4 is not a multiple of the alignment 32"));
  {
    GgufWriter w = small_writer();
    w.tensor("w")->offset = uint64_t(1) << 20;
    const auto b = w.bytes();
    const std::string msg = open_error(b);
    const GgufFile ok = GgufFile::parse(small_writer().bytes(), "x");
    const uint64_t a = ok.data_offset() + (uint64_t(1) << 20);
    CHECK(contains(msg, ": tensor 'w' data [" + std::to_string(a) + ", " + std::to_string(a + 68) +
                            ") lies outside the file (size " + std::to_string(b.size()) + ")"));
  }
  // Offsets near 2^64: the range is computed without wrapping.
  CHECK(contains(with([](TensorSpec& t) { t.offset = ~uint64_t(31); }), "lies outside the file"));
  CHECK(contains(with([](TensorSpec& t) {
                   t.type = uint32_t(GgmlType::F32);
                   t.dims = {uint64_t(1) << 30, uint64_t(1) << 30};
                 }),
                 "lies outside the file"));
}

TEST_CASE("gguf: MXFP4 tensors load as 17-byte blocks of 32, and a wrong byte size is refused") {
  // gpt-oss stores its experts as MXFP4 (ggml type 39), 3-D: columns x rows x experts.
  std::vector<uint8_t> experts(size_t(4 * 3 * 2 * 17));
  for (size_t i = 0; i < experts.size(); ++i) experts[i] = uint8_t(i * 37 + 11);
  auto writer = [&](size_t bytes, bool last) {
    GgufWriter w = small_writer();
    if (!last) w.remove_tensor("w");
    w.add_tensor("blk.0.ffn_up_exps.weight", {64, 3, 4}, GgmlType::MXFP4,
                 std::vector<uint8_t>(experts.begin(), experts.begin() + std::ptrdiff_t(bytes)));
    if (!last) w.add_tensor("w", {32, 2}, GgmlType::Q8_0);
    return w;
  };
  {
    const std::vector<uint8_t> b = writer(experts.size(), false).bytes();
    const GgufFile f = GgufFile::parse(b, "x");
    const GgufTensorInfo& t = f.require_tensor("blk.0.ffn_up_exps.weight");
    CHECK(t.type == GgmlType::MXFP4);
    CHECK(type_name(t.type) == "MXFP4");
    CHECK(t.rows() == 12);
    CHECK(t.nbytes == 12 * 2 * 17);
    CHECK(std::memcmp(f.tensor_data(t), experts.data(), experts.size()) == 0);
    CHECK(f.require_tensor("w").nbytes == 2 * 34);  // the tensor after it is where it belongs
    walk(f);
  }
  // Rows that are not whole blocks, and data that ends a byte early (a reader that took
  // the blocks for 16 bytes, without the exponent, would accept it).
  GgufWriter odd = writer(experts.size(), true);
  odd.tensor("blk.0.ffn_up_exps.weight")->dims = {48, 3, 4};
  CHECK(contains(open_error(odd), ": tensor 'blk.0.ffn_up_exps.weight' row length 48 is not a multiple of the "
                                  "MXFP4 block size 32"));
  const std::vector<uint8_t> whole = writer(experts.size(), true).bytes();
  const std::vector<uint8_t> shorter = writer(experts.size() - 1, true).bytes();
  REQUIRE(shorter.size() + 1 == whole.size());
  const uint64_t a = GgufFile::parse(whole, "x").require_tensor("blk.0.ffn_up_exps.weight").file_offset;
  CHECK(contains(open_error(shorter), ": tensor 'blk.0.ffn_up_exps.weight' data [" + std::to_string(a) + ", " +
                                          std::to_string(a + experts.size()) + ") lies outside the file (size " +
                                          std::to_string(shorter.size()) + ")"));
}

TEST_CASE("gguf: duplicate keys and tensor names") {
  {
    GgufWriter w = small_writer();
    w.add("llama.block_count", gv_u32(2));
    CHECK(contains(open_error(w), ": duplicate metadata key 'llama.block_count'"));
  }
  {
    GgufWriter w = small_writer();
    w.add_tensor_f32("norm.weight", {2}, {1, 2});
    CHECK(contains(open_error(w), ": duplicate tensor name 'norm.weight'"));
  }
}

TEST_CASE("gguf: names from the file cannot break the one-line message") {
  GgufWriter w;
  w.add("evil\nkey\x1b[31m", gv_u8(1));
  w.add("evil\nkey\x1b[31m", gv_u8(1));
  const std::string msg = open_error(w);
  CHECK(contains(msg, "duplicate metadata key 'evil\\x0akey\\x1b[31m'"));

  GgufWriter l;
  l.add(std::string(5000, 'k'), gv_u8(1));
  l.add(std::string(5000, 'k'), gv_u8(1));
  const std::string msg2 = open_error(l);
  CHECK(msg2.size() < 400);
  CHECK(contains(msg2, "...'"));

  // The name given to parse() is shown escaped too.
  const std::vector<uint8_t> junk = {'n', 'o', 'p', 'e', 0, 0, 0, 0};
  CHECK(parse_error(junk, "odd\nname") == "odd\\x0aname: not a GGUF file (bad magic)");
}

// ---------------------------------------------------------------- robustness sweeps

TEST_CASE("gguf: truncating real models anywhere throws Error") {
  for (const std::string& path : {kStories, kWideQ4KM}) {
    const std::vector<uint8_t> image = read_file(path);
    const GgufFile full = GgufFile::parse(image, path);
    const size_t data = full.data_offset();
    std::vector<size_t> cuts;
    for (size_t c = 0; c < data; c += 997) cuts.push_back(c);
    for (size_t c = 0; c < 300; ++c) cuts.push_back(c);               // header and first keys
    for (size_t c = data - 600; c <= data; ++c) cuts.push_back(c);    // last tensor infos, padding
    for (size_t c = data + 1; c < image.size(); c += image.size() / 37) cuts.push_back(c);
    cuts.push_back(image.size() - 1);
    for (size_t c : cuts) {
      INFO(path << " cut at " << c);
      try {
        GgufFile::parse(std::span(image.data(), c), "cut.gguf");
        FAIL("a truncated model parsed");
      } catch (const Error& e) {
        check_one_line(e.what(), "cut.gguf");
      }
    }
    // A few through the file path as well (mmap, temp files).
    for (size_t c : {size_t(3), size_t(100), data / 2, data + 5, image.size() - 1}) {
      TempFile f("fs-gguf-cut");
      write_file(f.path, std::span(image.data(), c));
      open_error(f.path);
    }
  }
}

TEST_CASE("gguf: random corruption of a real header throws Error or parses consistently") {
  const std::vector<uint8_t> image = read_file(kStories);
  const size_t header = GgufFile::parse(image, "x").data_offset();
  uint64_t s = 0x9e3779b97f4a7c15ull;
  auto rnd = [&] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  };
  int ok = 0, errors = 0;
  std::vector<uint8_t> m = image;
  for (int iter = 0; iter < 1500; ++iter) {
    std::copy(image.begin(), image.begin() + long(header), m.begin());
    const int flips = 1 + int(rnd() % 4);
    for (int i = 0; i < flips; ++i) {
      const size_t at = rnd() % header;
      switch (rnd() % 3) {
        case 0: m[at] ^= uint8_t(1u << (rnd() % 8)); break;
        case 1: m[at] = uint8_t(rnd()); break;
        default: m[at] = 0xff; break;
      }
    }
    try {
      const GgufFile f = GgufFile::parse(m, "fuzz.gguf");
      walk(f);
      ++ok;
    } catch (const Error& e) {
      check_one_line(e.what(), "fuzz.gguf");
      ++errors;
    }
  }
  CHECK(ok + errors == 1500);
  CHECK(errors > 0);
}

TEST_CASE("gguf: a 128k-token vocabulary parses quickly") {
  GgufWriter w;
  std::vector<std::string> vocab;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (int i = 0; i < 128000; ++i) {
    vocab.push_back("tok" + std::to_string(i));
    scores.push_back(float(-i));
    types.push_back(1);
  }
  w.set("tokenizer.ggml.tokens", gv_str_array(vocab));
  w.set("tokenizer.ggml.scores", gv_f32_array(scores));
  w.set("tokenizer.ggml.token_type", gv_i32_array(types));
  w.add_tensor("token_embd.weight", {4096, 4}, GgmlType::Q4_K);
  const std::vector<uint8_t> image = w.bytes();
  const auto t0 = std::chrono::steady_clock::now();
  const GgufFile f = GgufFile::parse(image, "big.gguf");
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("parsed 3 x 128000-element arrays in " << ms << " ms");
  CHECK(f.require_array("tokenizer.ggml.tokens").items.size() == 128000);
  CHECK(*f.require_array("tokenizer.ggml.tokens").items[127999].as_string() == "tok127999");
  CHECK(ms < 2000);  // tens of ms in a release build; generous for sanitizer builds
}
