#include "engine/quantize.h"

#include <algorithm>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_encode.h"
#include "core/printable.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quantize_fast.h"
#include "kernels/cpu/quantize_weights.h"
#include "kernels/cpu/thread_pool.h"

namespace flashspec {

namespace {

struct Named {
  std::string_view name;
  GgmlType type;
  uint32_t file_type;  // llama.cpp's LLAMA_FTYPE_MOSTLY_* for a file of mostly this type
};
constexpr Named kTypes[] = {
    {"q8_0", GgmlType::Q8_0, 7},  {"q4_0", GgmlType::Q4_0, 2},   {"q5_0", GgmlType::Q5_0, 8},
    {"q5_1", GgmlType::Q5_1, 9},  {"iq4_nl", GgmlType::IQ4_NL, 25}, {"q2_k", GgmlType::Q2_K, 10},
    {"q3_k", GgmlType::Q3_K, 11}, {"q4_k", GgmlType::Q4_K, 14},  {"q5_k", GgmlType::Q5_K, 16},
    {"q6_k", GgmlType::Q6_K, 18}, {"f16", GgmlType::F16, 1},     {"f32", GgmlType::F32, 0},
    // gpt-oss's expert type; llama.cpp's MOSTLY_MXFP4_MOE labels a file of MXFP4 weights.
    {"mxfp4", GgmlType::MXFP4, 38},
};

bool is_float(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

// The type a row of `cols` weights gets: `want`, or llama.cpp's fallback when the row is
// not whole blocks of it (K-quants fall back to a 32-weight type), or F16.
GgmlType fitting_type(GgmlType want, int64_t cols, bool& fell_back) {
  fell_back = false;
  if (cols % traits(want).block_elems == 0) return want;
  fell_back = true;
  GgmlType f = GgmlType::F16;
  switch (want) {
    case GgmlType::Q2_K:
    case GgmlType::Q3_K: f = GgmlType::IQ4_NL; break;
    case GgmlType::Q4_K: f = GgmlType::Q5_0; break;
    case GgmlType::Q5_K: f = GgmlType::Q5_1; break;
    case GgmlType::Q6_K: f = GgmlType::Q8_0; break;
    default: break;
  }
  return cols % traits(f).block_elems == 0 ? f : GgmlType::F16;
}

}  // namespace

int64_t QuantizeResult::fallbacks() const {
  int64_t n = 0;
  for (const auto& [type, count] : fell_back) n += count;
  return n;
}

std::string quantize_type_names() {
  std::string s;
  for (const Named& n : kTypes) s += (s.empty() ? "" : ", ") + std::string(n.name);
  return s;
}

std::string_view quantize_type_name(GgmlType t) {
  for (const Named& n : kTypes)
    if (n.type == t) return n.name;
  return type_name(t);
}

std::optional<GgmlType> quantize_type_from_name(std::string_view name) {
  for (const Named& n : kTypes)
    if (n.name == name) return n.type;
  return std::nullopt;
}

std::vector<GgmlType> plan_quantization(const GgufFile& in, const QuantizeOptions& o) {
  const bool tied = in.find_tensor("output.weight") == nullptr;
  std::vector<GgmlType> out;
  for (const GgufTensorInfo& t : in.tensors()) {
    // Norms, biases (gpt-oss's expert biases are 2-D: one row per expert), RoPE factors and
    // sinks: kept exact, as llama.cpp quantizes only tensors named *.weight of 2 or more dims.
    if (t.dims.size() < 2 || !t.name.ends_with(".weight")) {
      out.push_back(GgmlType::F32);
      continue;
    }
    // MoE routers stay as they are, as llama.cpp keeps them: a few rows whose small
    // differences pick the experts, so rounding them would change the routing.
    if (t.name.ends_with("ffn_gate_inp.weight")) {
      out.push_back(t.type);
      continue;
    }
    // Matrices, and expert tensors (3-D: experts x rows rows of dims[0]), are quantized.
    const bool head = t.name == "output.weight" || (tied && t.name == "token_embd.weight");
    if (o.head == OutputHead::Keep && head) {
      out.push_back(t.type);
      continue;
    }
    bool fell_back = false;
    const GgmlType want = fitting_type(o.type, t.dims[0], fell_back);
    if (want != t.type && !is_float(t.type) && o.quantized_inputs == QuantizedInputs::Refuse)
      throw Error(printable(in.path()) + ": tensor " + in_quotes(t.name) + " is already " +
                  std::string(type_name(t.type)) + "; quantizing it again to " + std::string(type_name(want)) +
                  " compounds the errors (quantize the F32/F16 original, or pass --allow-requantize)");
    out.push_back(want);
  }
  return out;
}

uint64_t quantized_model_bytes(const GgufFile& in, const QuantizeOptions& o) {
  const std::vector<GgmlType> types = plan_quantization(in, o);
  uint64_t bytes = 0;
  for (size_t i = 0; i < types.size(); ++i) {
    const GgufTensorInfo& t = in.tensors()[i];
    bytes += uint64_t(t.rows() * row_bytes(types[i], t.dims.empty() ? 0 : t.dims[0]));
  }
  return bytes;
}

QuantizeResult quantize_model(const GgufFile& in, const QuantizeOptions& o, ThreadPool& pool,
                              const std::function<void(std::span<const uint8_t>)>& sink,
                              const std::function<void(uint64_t, uint64_t)>& progress) {
  if (o.scales == BlockScales::RangeBased && !can_quantize_fast(o.type))
    throw Error("internal: no fast quantizer for " + std::string(type_name(o.type)));
  const std::vector<GgmlType> types = plan_quantization(in, o);
  QuantizeResult r;

  std::vector<std::pair<std::string, GgufValue>> kv = in.metadata();
  auto set = [&kv](const std::string& key, GgufValue v) {
    for (auto& [k, old] : kv)
      if (k == key) return void(old = std::move(v));
    kv.emplace_back(key, std::move(v));
  };
  uint32_t file_type = 0;
  for (const Named& n : kTypes)
    if (n.type == o.type) file_type = n.file_type;
  set("general.file_type", GgufValue{GgufValueType::UINT32, uint64_t(file_type)});
  set("general.quantization_version", GgufValue{GgufValueType::UINT32, uint64_t(2)});

  std::vector<GgufTensorLayout> layout;
  uint64_t total = 0;
  for (size_t i = 0; i < types.size(); ++i) {
    const GgufTensorInfo& t = in.tensors()[i];
    layout.push_back({t.name, t.dims, types[i]});
    total += t.nbytes;
    bool fell_back = false;
    if (t.dims.size() >= 2 && types[i] != t.type) {
      ++r.quantized;
      const GgmlType got = fitting_type(o.type, t.dims[0], fell_back);
      if (got != o.type) ++r.fell_back[got];
    }
  }
  const std::vector<uint8_t> header = gguf_header(kv, layout, in.alignment());
  sink(header);
  r.bytes = header.size();

  std::vector<uint8_t> data, pad;
  uint64_t done = 0, at = 0;
  for (size_t i = 0; i < types.size(); ++i) {
    const GgufTensorInfo& t = in.tensors()[i];
    const GgufTensorLayout& out = layout[i];
    pad.assign(size_t(out.offset - at), 0);
    if (!pad.empty()) sink(pad);
    if (types[i] == t.type) {  // kept as is
      sink(std::span(in.tensor_data(t), size_t(t.nbytes)));
    } else {
      const int64_t cols = t.dims.empty() ? 1 : t.dims[0], rows = t.rows();
      const int64_t in_row = row_bytes(t.type, cols), out_row = row_bytes(types[i], cols);
      data.resize(size_t(out.nbytes));
      const uint8_t* src = in.tensor_data(t);
      pool.parallel_for(rows, std::max<int64_t>(1, rows / (8 * pool.size())), [&](int64_t r0, int64_t r1) {
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = r0; r < r1; ++r) {
          dequantize_row(t.type, src + r * in_row, row.data(), cols);
          uint8_t* dst = data.data() + r * out_row;
          if (o.scales == BlockScales::RangeBased && can_quantize_fast(types[i]))
            quantize_row_fast(types[i], row.data(), dst, cols);
          else
            quantize_row(types[i], row.data(), dst, cols);
        }
      });
      sink(data);
    }
    at = out.offset + out.nbytes;
    done += t.nbytes;
    if (progress) progress(done, total);
  }
  r.bytes += at;
  return r;
}

}  // namespace flashspec
