// The first expert layer's guess from a pass's tokens (model/token_routes.h).
#include <doctest/doctest.h>

#include <vector>

#include "model/token_routes.h"

using namespace flashspec;

TEST_CASE("token routes: a guess names the tokens' last experts, the most named first") {
  TokenRoutes r(1, 2);
  CHECK(r.guess(0, std::vector<int32_t>{5, 6}).empty());  // nothing routed yet
  r.record(0, std::vector<int32_t>{5, 6, 7}, std::vector<int32_t>{3, 1, 1, 4, 0, 2});
  CHECK(r.guess(0, std::vector<int32_t>{5}) == std::vector<int32_t>{1, 3});  // ties by id
  // Expert 1 named twice (tokens 5 and 6), the others once, token 9 never routed.
  CHECK(r.guess(0, std::vector<int32_t>{6, 9, 5}) == std::vector<int32_t>{1, 3, 4});
  // A token routed again: its newer experts replace the older.
  r.record(0, std::vector<int32_t>{5}, std::vector<int32_t>{2, 0});
  CHECK(r.guess(0, std::vector<int32_t>{5, 7}) == std::vector<int32_t>{0, 2});
  const std::span<const int32_t> last = r.last(0, 5);
  CHECK(std::vector<int32_t>(last.begin(), last.end()) == std::vector<int32_t>{2, 0});
  CHECK(r.last(0, 9).empty());
  // A routing that is not k experts per token is not recorded.
  r.record(0, std::vector<int32_t>{9}, std::vector<int32_t>{1, 2, 3});
  CHECK(r.guess(0, std::vector<int32_t>{9}).empty());
}

TEST_CASE("token routes: every layer apart, a bounded table, and how often a token's last routing is right") {
  TokenRoutes r(3, 2, 2);  // 3 layers, 2 experts a row, at most 2 tokens
  r.record(0, std::vector<int32_t>{5}, std::vector<int32_t>{1, 2});
  r.record(2, std::vector<int32_t>{5}, std::vector<int32_t>{3, 4});
  CHECK(r.guess(2, std::vector<int32_t>{5}) == std::vector<int32_t>{3, 4});
  CHECK(r.last(1, 5).empty());  // never routed at layer 1
  CHECK(r.last(3, 5).empty());  // no such layer
  CHECK(r.hit_rate() == 1.0);   // nothing compared yet
  // Token 5 again at layer 0: one of its two experts is the one named before.
  r.record(0, std::vector<int32_t>{5}, std::vector<int32_t>{2, 7});
  CHECK(r.hit_rate() == doctest::Approx(0.5));
  // A third token replaces the first one remembered (5), every layer of it.
  r.record(0, std::vector<int32_t>{6, 8}, std::vector<int32_t>{0, 1, 0, 2});
  CHECK(r.last(0, 5).empty());
  CHECK(r.last(2, 5).empty());
  CHECK(r.last(0, 6).size() == 2);
  CHECK(r.guess(0, std::vector<int32_t>{6, 8}) == std::vector<int32_t>{0, 1, 2});
  // Token 5 comes back into a slot of its own, nothing of its old routing left.
  r.record(1, std::vector<int32_t>{5}, std::vector<int32_t>{6, 7});
  CHECK(r.last(0, 5).empty());
  CHECK(r.last(1, 5).size() == 2);
  CHECK(r.last(0, 6).empty());  // 6 was the oldest left
}
