#include "core/vocab_compat.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "core/tokenizer.h"

namespace flashspec {

namespace {
// Token text made printable for a one-line message.
std::string shown(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return "'" + out + "'";
}
}  // namespace

void check_vocab_compatible(const Tokenizer& d, const std::string& dp, const Tokenizer& t,
                            const std::string& tp) {
  const std::string who = "draft " + dp + " and target " + tp + ": ";
  if (d.model() != t.model())
    throw Error(who + "tokenizer models differ ('" + d.model() + "' vs '" + t.model() + "')");
  if (std::abs(d.n_vocab() - t.n_vocab()) > kMaxVocabDifference)
    throw Error(who + "vocabulary sizes " + std::to_string(d.n_vocab()) + " and " +
                std::to_string(t.n_vocab()) + " differ by more than " +
                std::to_string(kMaxVocabDifference));
  if (d.bos() != t.bos() || d.eos() != t.eos())
    throw Error(who + "special tokens differ (bos " + std::to_string(d.bos()) + "/" +
                std::to_string(t.bos()) + ", eos " + std::to_string(d.eos()) + "/" +
                std::to_string(t.eos()) + ")");
  if (d.add_bos() != t.add_bos()) throw Error(who + "one adds BOS to prompts and the other does not");
  const int32_t shared = std::min(d.n_vocab(), t.n_vocab());
  for (int32_t id = 0; id < shared; ++id) {
    if (d.token_text(id) != t.token_text(id) || d.token_type(id) != t.token_type(id))
      throw Error(who + "token " + std::to_string(id) + " differs (" + shown(d.token_text(id)) +
                  " vs " + shown(t.token_text(id)) + ")");
  }
}

}  // namespace flashspec
