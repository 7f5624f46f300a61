#pragma once
// Whether a grammar's matcher takes a whole text, byte by byte, and may end after it.
#include <string_view>

#include "grammar/matcher.h"

namespace flashspec::testing {

inline bool accepts(grammar::Matcher& m, std::string_view doc) {
  grammar::MatchState s = m.start();
  for (char c : doc) {
    s = m.accept_byte(s, uint8_t(c));
    if (s.dead()) return false;
  }
  return m.can_end(s);
}

}  // namespace flashspec::testing
