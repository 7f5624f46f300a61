#include "tokenizer/vocab_compat.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "core/printable.h"
#include "tokenizer/tokenizer.h"

namespace flashspec {

namespace {
std::string ids(const std::vector<int32_t>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "}";
}
}  // namespace

void check_vocab_compatible(const Tokenizer& d, const std::string& dp, const Tokenizer& t, const std::string& tp) {
  const std::string who = "draft " + printable(dp) + " and target " + printable(tp) + ": ";
  if (d.model() != t.model() || d.pre() != t.pre())
    throw Error(who + "tokenizers differ ('" + d.model() + (d.pre().empty() ? "" : "/" + d.pre()) + "' vs '" +
                t.model() + (t.pre().empty() ? "" : "/" + t.pre()) + "')");
  if (std::abs(d.n_vocab() - t.n_vocab()) > kMaxVocabDifference)
    throw Error(who + "vocabulary sizes " + std::to_string(d.n_vocab()) + " and " + std::to_string(t.n_vocab()) +
                " differ by more than " + std::to_string(kMaxVocabDifference));
  if (d.bos() != t.bos() || d.eos() != t.eos())
    throw Error(who + "special tokens differ (bos " + std::to_string(d.bos()) + "/" + std::to_string(t.bos()) +
                ", eos " + std::to_string(d.eos()) + "/" + std::to_string(t.eos()) + ")");
  if (d.add_bos() != t.add_bos() || d.add_eos() != t.add_eos())
    throw Error(who + "one adds BOS/EOS to prompts and the other does not");
  const int32_t shared = std::min(d.n_vocab(), t.n_vocab());
  for (int32_t id = 0; id < shared; ++id) {
    if (d.token_text(id) != t.token_text(id) || d.token_type(id) != t.token_type(id))
      throw Error(who + "token " + std::to_string(id) + " differs (" + in_quotes(d.token_text(id)) + " vs " +
                  in_quotes(t.token_text(id)) + ")");
  }
  // Both must stop on the same tokens, or the draft would draft past the target's end.
  auto in_shared = [shared](const std::vector<int32_t>& v) {
    std::vector<int32_t> out;
    std::copy_if(v.begin(), v.end(), std::back_inserter(out), [shared](int32_t id) { return id < shared; });
    return out;
  };
  if (in_shared(d.end_of_generation()) != in_shared(t.end_of_generation()))
    throw Error(who + "end-of-generation tokens differ (" + ids(in_shared(d.end_of_generation())) + " vs " +
                ids(in_shared(t.end_of_generation())) + ")");
}

}  // namespace flashspec
