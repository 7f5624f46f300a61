#pragma once
// What a render may spend, and the clock strftime_now reads. Templates come from untrusted
// model files: every loop, string, value and recursion is bounded by these, and passing a
// bound is a flashspec::Error, never a hang or a crash.
#include <cstddef>
#include <cstdint>
#include <optional>

namespace flashspec::jinja {

struct RenderLimits {
  size_t max_output_bytes = 16u << 20;  // the rendering, and any string built on the way
  // Work units: every expression or statement run, every loop iteration, every element made,
  // and every 64 bytes of text made.
  uint64_t max_steps = 4'000'000;
  // Nesting while running (expressions within statements within macro calls) and of values
  // (arrays / objects in the context or built by the template).
  size_t max_depth = 400;
};

// The calendar time strftime_now formats (local time of the render's machine when unset).
struct DateTime {
  int year = 1970, month = 1, day = 1, hour = 0, minute = 0;
};

struct RenderOptions {
  RenderLimits limits;
  std::optional<DateTime> now;
};

}  // namespace flashspec::jinja
