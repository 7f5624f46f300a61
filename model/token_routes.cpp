#include "model/token_routes.h"

#include <algorithm>
#include <map>

namespace flashspec {

void TokenRoutes::record(std::span<const int32_t> tokens, std::span<const int32_t> experts) {
  if (experts.size() != tokens.size() * size_t(k_)) return;  // not one routing per token
  for (size_t t = 0; t < tokens.size(); ++t) {
    const int32_t* e = experts.data() + t * size_t(k_);
    last_[tokens[t]].assign(e, e + k_);
  }
}

std::span<const int32_t> TokenRoutes::last(int32_t token) const {
  const auto it = last_.find(token);
  return it == last_.end() ? std::span<const int32_t>{} : std::span<const int32_t>(it->second);
}

std::vector<int32_t> TokenRoutes::guess(std::span<const int32_t> tokens) const {
  std::map<int32_t, int64_t> named;  // expert -> rows whose token named it (ordered: ties by id)
  for (int32_t t : tokens)
    for (int32_t e : last(t)) ++named[e];
  std::vector<int32_t> out;
  out.reserve(named.size());
  for (const auto& [e, n] : named) out.push_back(e);
  std::stable_sort(out.begin(), out.end(), [&](int32_t a, int32_t b) { return named.at(a) > named.at(b); });
  return out;
}

}  // namespace flashspec
