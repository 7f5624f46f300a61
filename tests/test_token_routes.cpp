// The first expert layer's guess from a pass's tokens (model/token_routes.h).
#include <doctest/doctest.h>

#include <vector>

#include "model/token_routes.h"

using namespace flashspec;

TEST_CASE("token routes: a guess names the tokens' last experts, the most named first") {
  TokenRoutes r(2);
  CHECK(r.guess(std::vector<int32_t>{5, 6}).empty());  // nothing routed yet
  r.record(std::vector<int32_t>{5, 6, 7}, std::vector<int32_t>{3, 1, 1, 4, 0, 2});
  CHECK(r.guess(std::vector<int32_t>{5}) == std::vector<int32_t>{1, 3});  // ties by id
  // Expert 1 named twice (tokens 5 and 6), the others once, token 9 never routed.
  CHECK(r.guess(std::vector<int32_t>{6, 9, 5}) == std::vector<int32_t>{1, 3, 4});
  // A token routed again: its newer experts replace the older.
  r.record(std::vector<int32_t>{5}, std::vector<int32_t>{2, 0});
  CHECK(r.guess(std::vector<int32_t>{5, 7}) == std::vector<int32_t>{0, 2});
  const std::span<const int32_t> last = r.last(5);
  CHECK(std::vector<int32_t>(last.begin(), last.end()) == std::vector<int32_t>{2, 0});
  CHECK(r.last(9).empty());
  // A routing that is not k experts per token is not recorded.
  r.record(std::vector<int32_t>{9}, std::vector<int32_t>{1, 2, 3});
  CHECK(r.guess(std::vector<int32_t>{9}).empty());
}
