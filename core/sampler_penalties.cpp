#include "core/sampler_penalties.h"

#include <algorithm>
#include <limits>

namespace flashspec {

PenaltyWindow::PenaltyWindow(const SamplingParams& p, std::span<const int32_t> history)
    : p_(p),
      counting_(p.penalised()),
      window_(p.repeat_last_n < 0 ? std::numeric_limits<size_t>::max() : size_t(p.repeat_last_n)) {
  if (!counting_) return;
  // Only the window's own tokens can ever leave it: older ones need not be kept.
  const size_t keep = std::min(window_, history.size());
  tail_.assign(history.end() - std::ptrdiff_t(keep), history.end());
  for (int32_t t : tail_) ++counts_[t];
}

void PenaltyWindow::push(int32_t token) {
  if (!counting_) return;
  if (tail_.size() >= window_) {
    const int32_t leaving = tail_[tail_.size() - window_];
    if (--counts_[leaving] == 0) counts_.erase(leaving);
  }
  tail_.push_back(token);
  ++counts_[token];
}

void PenaltyWindow::pop() {
  if (!counting_) return;
  const int32_t token = tail_.back();
  tail_.pop_back();
  if (--counts_[token] == 0) counts_.erase(token);
  if (tail_.size() >= window_) ++counts_[tail_[tail_.size() - window_]];
}

int32_t PenaltyWindow::count(int32_t token) const {
  const auto it = counts_.find(token);
  return it == counts_.end() ? 0 : it->second;
}

void PenaltyWindow::apply(std::span<float> logits) const {
  const size_t n = logits.size();
  for (const auto& [token, bias] : p_.logit_bias)
    if (token >= 0 && size_t(token) < n) logits[size_t(token)] += bias;
  if (!counting_) return;
  for (const auto& [token, c] : counts_) {
    if (token < 0 || size_t(token) >= n) continue;
    float& l = logits[size_t(token)];
    l = l <= 0.0f ? l * p_.repeat_penalty : l / p_.repeat_penalty;
    l -= float(c) * p_.frequency_penalty + p_.presence_penalty;
  }
}

void apply_penalties(const SamplingParams& p, std::span<const int32_t> history, std::span<float> logits) {
  if (!p.adjusts_logits()) return;
  PenaltyWindow(p, history).apply(logits);
}

}  // namespace flashspec
