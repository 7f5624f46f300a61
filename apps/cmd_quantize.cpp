// `flashspec quantize IN.gguf OUT.gguf --type T`: re-quantizes a model's weights (our own
// quantizers: each block's scales searched for the least squared error), ggml's formats,
// so llama.cpp loads the result. Written atomically (a temporary file renamed over OUT).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "apps/commands.h"
#include "apps/output.h"
#include "core/error.h"
#include "core/units.h"
#include "core/gguf.h"
#include "core/printable.h"
#include "engine/quantize.h"
#include "kernels/cpu/thread_pool.h"
#include "offload/layer_plan.h"

namespace flashspec {

namespace {

struct QuantizeArgs {
  std::string in, out, type;
  bool keep_output = false, allow_requantize = false;
  int threads = 0;
};

int run_quantize(const QuantizeArgs& a) {
  QuantizeOptions o;
  o.type = *quantize_type_from_name(a.type);  // checked by CLI11
  o.head = a.keep_output ? OutputHead::Keep : OutputHead::Quantize;
  o.quantized_inputs = a.allow_requantize ? QuantizedInputs::Requantize : QuantizedInputs::Refuse;
  const GgufFile in = GgufFile::open(a.in);
  plan_quantization(in, o);  // refuses a requantization before anything is written
  OutputFile out(a.out);
  ThreadPool pool(thread_count(a.threads));
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  const auto t0 = std::chrono::steady_clock::now();
  const QuantizeResult r = quantize_model(
      in, o, pool, [&](std::span<const uint8_t> b) { out.write({reinterpret_cast<const char*>(b.data()), b.size()}); },
      [&](uint64_t done, uint64_t total) {
        if (!tty) return;
        const int width = 40, fill = total ? int(double(done) / double(total) * width) : width;
        std::fprintf(stderr, "\r[%s%s] %3d%%", std::string(size_t(fill), '#').c_str(),
                     std::string(size_t(width - fill), '.').c_str(), total ? int(100 * done / total) : 100);
      });
  out.commit();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (tty) std::fputs("\n", stderr);
  // Which types rows that are not whole blocks fell back to, as llama.cpp's quantize does.
  std::string fallbacks;
  for (const auto& [type, n] : r.fell_back)
    fallbacks += (fallbacks.empty() ? "" : ", ") + std::to_string(n) + " to " + std::string(quantize_type_name(type));
  std::fprintf(stderr, "[flashspec] %s -> %s: %s, %lld tensors quantized to %s (%lld by fallback%s%s), %s -> %s in %.1f s (%.1f MB/s of input)\n",
               printable(a.in).c_str(), printable(a.out).c_str(), a.type.c_str(), (long long)r.quantized,
               a.type.c_str(), (long long)r.fallbacks(), fallbacks.empty() ? "" : ": ", fallbacks.c_str(),
               format_bytes(in.file_size()).c_str(), format_bytes(r.bytes).c_str(), s, double(in.file_size()) / 1e6 / s);
  return 0;
}

}  // namespace

Action register_quantize(CLI::App& app) {
  auto [sub, args] = add_command<QuantizeArgs>(
      app, "quantize", "re-quantize a model's 2-D weights to one type (1-D tensors stay F32), as llama-quantize --pure");
  sub->add_option("input", args->in, "model to quantize (GGUF)")->required();
  sub->add_option("output", args->out, "where to write the result (replaced atomically)")->required();
  sub->add_option("--type", args->type, "target type: " + quantize_type_names())
      ->required()
      ->check(CLI::Validator(
          [](std::string& s) {
            return quantize_type_from_name(s) ? std::string() : s + " is not one of " + quantize_type_names();
          },
          "TYPE"));
  sub->add_flag("--keep-output", args->keep_output, "keep the output head (output.weight, or a tied embedding) as it is");
  sub->add_flag("--allow-requantize", args->allow_requantize,
                "quantize weights that are already quantized (errors compound: prefer the F32/F16 original)");
  sub->add_option("-t,--threads", args->threads, "threads (default: all cores)")->check(CLI::Range(1, 1024));
  return [args] { return run_quantize(*args); };
}

}  // namespace flashspec
