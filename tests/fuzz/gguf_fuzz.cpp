// libFuzzer harness for the GGUF reader: any byte string must either parse into a
// self-consistent GgufFile or throw flashspec::Error with a one-line message. Anything
// else (a crash, a sanitizer report, another exception type, a leak) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/error.h"
#include "core/ggml_type.h"
#include "core/gguf.h"

using namespace flashspec;

namespace {

constexpr std::string_view kName = "fuzz.gguf";

volatile uint64_t g_sink;

[[noreturn]] void bug(const char* what) {
  std::fprintf(stderr, "gguf_fuzz: invariant broken: %s\n", what);
  std::abort();
}

void check_message(const char* msg) {
  const std::string_view m(msg);
  if (m.substr(0, kName.size() + 2) != "fuzz.gguf: ") bug("message lacks the name prefix");
  if (m.find('\n') != std::string_view::npos || m.find('\r') != std::string_view::npos)
    bug("message is not one line");
}

uint64_t walk_value(const GgufValue& v, int depth) {
  if (depth > 8) bug("nesting deeper than the reader allows");
  uint64_t h = uint64_t(v.type);
  if (auto u = v.as_uint()) h += *u;
  if (auto i = v.as_int()) h += uint64_t(*i);
  if (auto d = v.as_float()) h += (*d == *d) ? 1 : 2;
  if (const std::string* s = v.as_string()) {
    h += s->size();
    if (!s->empty()) h += uint8_t(s->front()) + uint8_t(s->back());
  }
  if (const GgufArray* a = v.as_array()) {
    for (const GgufValue& item : a->items) {
      if (item.type != a->elem_type) bug("array item type differs from the element type");
      h += walk_value(item, depth + 1);
    }
  }
  return h;
}

// Typed getters may throw Error for a wrong type; nothing else.
template <class F>
void try_get(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    check_message(e.what());
  }
}

void walk(const GgufFile& f, size_t size) {
  uint64_t h = 0;
  if (f.file_size() != size) bug("file size");
  if (f.version() != 2 && f.version() != 3) bug("version");
  if (f.alignment() == 0 || (f.alignment() & (f.alignment() - 1)) != 0) bug("alignment");
  if (f.data_offset() % f.alignment() != 0) bug("data offset alignment");
  for (const auto& kv : f.metadata()) {
    const std::string& key = kv.first;  // (clang 14 cannot capture structured bindings)
    const GgufValue& value = kv.second;
    if (f.find(key) != &value) bug("find() does not return the entry");
    h += walk_value(value, 0);
    try_get([&] { h += f.get_uint(key).value_or(0); });
    try_get([&] { h += uint64_t(f.get_float(key).value_or(0) != 0); });
    try_get([&] { h += f.get_bool(key).value_or(false); });
    try_get([&] { h += f.get_string(key) != nullptr; });
    try_get([&] { h += f.get_array(key) != nullptr; });
  }
  for (const char* key : {"general.architecture", "llama.block_count", "tokenizer.ggml.tokens",
                          "llama.attention.layer_norm_rms_epsilon", "general.alignment"}) {
    try_get([&] { h += f.require_uint(key); });
    try_get([&] { h += uint64_t(f.require_float(key) != 0); });
    try_get([&] { h += f.require_string(key).size(); });
    try_get([&] { h += f.require_array(key).items.size(); });
  }
  for (const GgufTensorInfo& t : f.tensors()) {
    if (f.find_tensor(t.name) != &t) bug("find_tensor() does not return the tensor");
    if (t.dims.empty() || t.dims.size() > 4) bug("dims");
    for (int64_t d : t.dims)
      if (d <= 0) bug("dim");
    if (!type_traits(uint32_t(t.type))) bug("type");
    const int64_t n = t.elements();
    if (n <= 0 || n % t.dims[0] != 0) bug("elements");
    if (t.rows() * t.dims[0] != n) bug("rows");
    if (uint64_t(row_bytes(t.type, t.dims[0]) * t.rows()) != t.nbytes) bug("nbytes");
    if (t.file_offset != f.data_offset() + t.offset) bug("file offset");
    if (t.file_offset > size || t.nbytes > size - t.file_offset) bug("tensor data outside");
    h += type_name(t.type).size();
    // Touch the first and last byte: ASan reports a read outside the input.
    const uint8_t* p = f.tensor_data(t);
    h += p[0] + p[t.nbytes - 1];
  }
  try_get([&] { f.require_tensor("token_embd.weight"); });
  g_sink = g_sink + h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    GgufFile f = GgufFile::parse({data, size}, std::string(kName));
    GgufFile moved = std::move(f);
    walk(moved, size);
  } catch (const Error& e) {
    check_message(e.what());
  }
  return 0;
}
