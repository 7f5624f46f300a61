#include "model/token_routes.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace flashspec {

TokenRoutes::TokenRoutes(int64_t layers, int64_t k, int64_t max_tokens)
    : layers_(layers), k_(k), max_tokens_(max_tokens) {
  if (layers < 1 || k < 1 || max_tokens < 1)
    throw Error("internal: token routes of " + std::to_string(layers) + " layers, " + std::to_string(k) +
                " experts, " + std::to_string(max_tokens) + " tokens");
}

int32_t TokenRoutes::slot_of(int32_t token) {
  if (const auto it = slot_.find(token); it != slot_.end()) return it->second;
  const size_t per_slot = size_t(layers_ * k_);
  int32_t s;
  if (int64_t(token_of_.size()) < max_tokens_) {
    s = int32_t(token_of_.size());
    token_of_.push_back(token);
    experts_.resize(experts_.size() + per_slot, -1);
  } else {
    s = next_;
    next_ = int32_t((next_ + 1) % max_tokens_);
    slot_.erase(token_of_[size_t(s)]);
    token_of_[size_t(s)] = token;
    std::fill_n(experts_.begin() + std::ptrdiff_t(size_t(s) * per_slot), per_slot, -1);
  }
  slot_[token] = s;
  return s;
}

void TokenRoutes::record(int64_t layer, std::span<const int32_t> tokens, std::span<const int32_t> experts) {
  if (layer < 0 || layer >= layers_ || experts.size() != tokens.size() * size_t(k_)) return;  // not one routing per token
  for (size_t t = 0; t < tokens.size(); ++t) {
    const int32_t* e = experts.data() + t * size_t(k_);
    const size_t slot = size_t(slot_of(tokens[t]));  // before data(): a new slot may move the table
    int32_t* kept = experts_.data() + (slot * size_t(layers_) + size_t(layer)) * size_t(k_);
    if (kept[0] >= 0) {
      for (int64_t i = 0; i < k_; ++i) hits_ += std::find(kept, kept + k_, e[i]) != kept + k_;
      compared_ += double(k_);
    }
    std::copy(e, e + k_, kept);
  }
}

std::span<const int32_t> TokenRoutes::last(int64_t layer, int32_t token) const {
  const auto it = slot_.find(token);
  if (it == slot_.end() || layer < 0 || layer >= layers_) return {};
  const int32_t* kept = experts_.data() + (size_t(it->second) * size_t(layers_) + size_t(layer)) * size_t(k_);
  return kept[0] < 0 ? std::span<const int32_t>{} : std::span<const int32_t>(kept, size_t(k_));
}

std::vector<int32_t> TokenRoutes::guess(int64_t layer, std::span<const int32_t> tokens) const {
  std::map<int32_t, int64_t> named;  // expert -> rows whose token named it (ordered: ties by id)
  for (int32_t t : tokens)
    for (int32_t e : last(layer, t)) ++named[e];
  std::vector<int32_t> out;
  out.reserve(named.size());
  for (const auto& [e, n] : named) out.push_back(e);
  std::stable_sort(out.begin(), out.end(), [&](int32_t a, int32_t b) { return named.at(a) > named.at(b); });
  return out;
}

}  // namespace flashspec
