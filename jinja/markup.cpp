#include "jinja/markup.h"

#include <algorithm>

namespace flashspec::jinja {

namespace {

void add_range(Markup& m, size_t begin, size_t end) {
  if (begin >= end) return;
  if (!m.empty() && m.back().end >= begin) {
    m.back().end = std::max(m.back().end, end);
    return;
  }
  m.push_back({begin, end});
}

}  // namespace

void MarkedText::append(std::string_view s, const Markup* s_markup) {
  const size_t base = text.size();
  text.append(s);
  if (!s_markup) return;
  for (const ByteRange& r : *s_markup) add_range(markup, base + std::min(r.begin, s.size()), base + std::min(r.end, s.size()));
}

void MarkedText::append_markup(std::string_view s) {
  add_range(markup, text.size(), text.size() + s.size());
  text.append(s);
}

void MarkedText::truncate(size_t n) {
  if (n >= text.size()) return;
  text.resize(n);
  while (!markup.empty() && markup.back().begin >= n) markup.pop_back();
  if (!markup.empty()) markup.back().end = std::min(markup.back().end, n);
}

std::shared_ptr<const Markup> slice_markup(const Markup* m, size_t begin, size_t end) {
  if (!m) return nullptr;
  Markup out;
  for (const ByteRange& r : *m) {
    const size_t b = std::max(r.begin, begin), e = std::min(r.end, end);
    if (b < e) out.push_back({b - begin, e - begin});
  }
  if (out.empty()) return nullptr;
  return std::make_shared<const Markup>(std::move(out));
}

std::shared_ptr<const Markup> all_markup(size_t size) {
  if (size == 0) return nullptr;
  return std::make_shared<const Markup>(Markup{{0, size}});
}

}  // namespace flashspec::jinja
