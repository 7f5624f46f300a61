// Speculative decoding on hybrid Qwen3.5 targets (qwen35, qwen35moe: Gated DeltaNet layers
// whose recurrent state per sequence follows the draft tree's branches, attention every
// 4th layer), and with hybrid drafts:
//   - greedy is lossless: --tree 16, --tree auto and --chain 4 give the target's own 64
//     tokens and, bit for bit, its logits at every generated position (rows are
//     batch-invariant and a commit rebuilds the recurrent state "bit for bit as
//     verified"), with the draft the same file, a near copy of it (accepts partial
//     paths), the other hybrid fixture, or a non-hybrid draft (tiny-qwen3 relabelled to
//     the qwen35 pre-tokenizer); a non-hybrid target with hybrid drafts; and through the
//     CLI with the target streamed (resident, --tree auto never drafts with these
//     drafts, as costly as the target; streamed at 20 MB/s it does);
//   - sampling is lossless: test_speculative.cpp's chi-square check with a hybrid target
//     and hybrid drafts (vocabulary cut to 4096 ids for speed);
//   - several sequences (BatchSession, serve --parallel 4), two of them sharing a ~100
//     token system prompt, answer as one at a time;
//   - a 3-turn chat with a draft equals the same conversation without, and a turn that
//     ends (a caller's stop, an end token, a stop text; in a Session, through run_turn,
//     in the server) inside an accepted draft path -- the recurrent state is then
//     truncated back into that path -- continues as the target alone would.
// The tiny fixtures have a 151669-token head: every verified or drafted row costs a
// full-vocabulary logits row, so the cases keep their row counts small.
#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>

#include "core/gguf.h"
#include "engine/batch_session.h"
#include "engine/engine.h"
#include "engine/session.h"
#include "engine/turn.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/model.h"
#include "tests/chi_square.h"
#include "tests/cli_runner.h"
#include "tests/derived_fixture.h"
#include "tests/fixtures.h"
#include "tests/gguf_writer.h"
#include "tests/greedy_options.h"
#include "tests/http_client.h"
#include "tests/json_file.h"
#include "tests/server_helpers.h"
#include "tests/server_process.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;
using json = nlohmann::json;

namespace {

std::string qwen35() { return made_fixture_path("tiny-qwen35"); }
std::string qwen35moe() { return made_fixture_path("tiny-qwen35moe"); }

// tiny-qwen3 (a plain attention model) with tokenizer.ggml.pre = "qwen35", so that its
// vocabulary is the hybrid fixtures' ("tokenizers differ ('gpt2/qwen2' vs 'gpt2/qwen35')"
// otherwise).
const std::string& qwen3_as_qwen35() {
  return derived_fixture("tiny-qwen3-pre-qwen35", model_path("tiny-qwen3"),
                         [](GgufWriter& w) { w.set("tokenizer.ggml.pre", gv_str("qwen35")); });
}

// A near copy of a hybrid fixture: its recurrent layers' output projections (ssm_out)
// scaled by 0.9. As a draft it agrees with the original mostly but not always, so tree
// passes accept paths of every depth (the recurrent state's commits of partial paths).
const std::string& near_copy(const std::string& src, const std::string& name) {
  return derived_fixture(name + "-near", src, [](GgufWriter& w) { scale_tensors(w, "ssm_out.weight", 0.9f); });
}

// About 100 tokens of ordinary prose (a long prompt, and the shared system prompt).
const std::string kLongText =
    "In a small village at the edge of a great forest there lived an old clockmaker named Elias. Every "
    "morning he opened his shop, wound the hundred clocks that lined its walls, and listened as they ticked "
    "together like a single heart. Children pressed their noses to the window to watch him work, and "
    "travellers stopped to ask the time, though every clock told it a little differently. One winter evening "
    "a stranger in a grey coat knocked on the door and asked";

const std::vector<std::string> kGreedyPrompts = {"Once upon a time", "The quick brown fox jumps over the lazy dog. Then",
                                                 kLongText};
constexpr int64_t kGreedyTokens = 64;

SpeculationParams chain(int64_t k) { return {.mode = SpeculationParams::Mode::Chain, .node_budget = k}; }
SpeculationParams tree(int64_t b) { return {.mode = SpeculationParams::Mode::Tree, .node_budget = b}; }
SpeculationParams tree_auto() { return {.mode = SpeculationParams::Mode::Auto, .node_budget = 1024}; }

std::string policy_name(const std::optional<SpeculationParams>& p) {
  if (!p) return "target alone";
  if (p->chain()) return "--chain " + std::to_string(p->node_budget);
  if (p->auto_budget()) return "--tree auto";
  return "--tree " + std::to_string(p->node_budget);
}

struct Pair {
  CpuBackend backend{2};
  CpuBackend draft_backend{1};  // its own, as in the CLI
  Model target, draft;
  Tokenizer tok;
  Pair(const std::string& target_path, const std::string& draft_path)
      : target(target_path, backend), draft(draft_path, draft_backend), tok(Tokenizer::from_gguf(target.file())) {}
  std::vector<int32_t> ids(const std::string& text) const { return tok.encode(text, true); }
};

std::string ids_text(std::span<const int32_t> v) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < v.size(); ++i) o << (i ? " " : "") << v[i];
  o << "]";
  return o.str();
}

// Where two token lists first differ, for the failure message ("" when equal).
std::string token_difference(const std::vector<int32_t>& want, const std::vector<int32_t>& got) {
  if (want == got) return "";
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  std::ostringstream o;
  o << "first difference at generated token " << i << " of " << want.size() << "/" << got.size() << ": want "
    << (i < want.size() ? std::to_string(want[i]) : "(end)") << " got " << (i < got.size() ? std::to_string(got[i]) : "(end)")
    << "; want " << ids_text(want) << " got " << ids_text(got);
  return o.str();
}

// The first generated position whose logits differ in any bit, and by how much at most.
std::string logits_difference(const std::vector<std::vector<float>>& want, const std::vector<std::vector<float>>& got) {
  if (bit_identical(want, got)) return "";
  if (want.size() != got.size())
    return "logits kept for " + std::to_string(want.size()) + " vs " + std::to_string(got.size()) + " positions";
  for (size_t p = 0; p < want.size(); ++p) {
    if (want[p].size() == got[p].size() && std::memcmp(want[p].data(), got[p].data(), want[p].size() * 4) == 0) continue;
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < std::min(want[p].size(), got[p].size()); ++i) {
      const double d = std::fabs(double(want[p][i]) - double(got[p][i]));
      if (d > worst || std::isnan(d)) { worst = d; at = i; }
    }
    std::ostringstream o;
    o << "logits first differ at generated position " << p << ": largest difference " << worst << " at id " << at;
    return o.str();
  }
  return "";
}

// The largest difference between two runs' logits (infinity when their shapes differ).
double max_logit_difference(const std::vector<std::vector<float>>& want, const std::vector<std::vector<float>>& got) {
  if (want.size() != got.size()) return INFINITY;
  double worst = 0;
  for (size_t p = 0; p < want.size(); ++p) {
    if (want[p].size() != got[p].size()) return INFINITY;
    for (size_t i = 0; i < want[p].size(); ++i) {
      const double d = std::fabs(double(want[p][i]) - double(got[p][i]));
      if (!(d <= worst)) worst = d;  // NaN too
    }
  }
  return worst;
}

// The target alone vs each policy with the draft, on each prompt: the same tokens, and the
// same logits bit for bit at every generated position.
void check_greedy_lossless(const std::string& target_path, const std::string& draft_path,
                           const std::vector<std::string>& prompts, bool draft_is_target) {
  Pair m(target_path, draft_path);
  const std::vector<SpeculationParams> policies = {tree(16), tree_auto(), chain(4)};
  for (const std::string& prompt : prompts) {
    const std::vector<int32_t> ids = m.ids(prompt);
    const GenerationResult want = generate_target_only(m.target, ids, greedy(kGreedyTokens, kGreedyTokens));
    REQUIRE(want.tokens.size() == size_t(kGreedyTokens));
    for (const SpeculationParams& p : policies) {
      CAPTURE(target_path);
      CAPTURE(draft_path);
      const std::string prompt_start = prompt.size() > 48 ? prompt.substr(0, 48) + "..." : prompt;
      CAPTURE(prompt_start);
      CAPTURE(ids.size());
      const std::string policy = policy_name(p);
      CAPTURE(policy);
      const GenerationResult got =
          generate_in_new_session(m.target, &m.draft, p, ids, greedy(kGreedyTokens, kGreedyTokens));
      const std::string tdiff = token_difference(want.tokens, got.tokens);
      CAPTURE(tdiff);
      CHECK(got.tokens == want.tokens);
      const std::string ldiff = logits_difference(want.logits, got.logits);
      CAPTURE(ldiff);
      CHECK(ldiff.empty());
      MESSAGE(policy << ", prompt of " << ids.size() << " tokens: passes " << got.stats.target_passes << " (alone "
                     << want.stats.target_passes << "), drafted " << got.stats.drafted << ", accepted "
                     << got.stats.accepted);
      // The draft that is the target itself agrees with it: accepted paths (and their
      // commits into the recurrent state) happen. --tree auto may rightly stop drafting
      // with a draft as costly as the target.
      if (draft_is_target && !p.auto_budget()) CHECK(got.stats.accepted > 0);
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------
// 1. Greedy: lossless, resident, through the engine's Session.
// ---------------------------------------------------------------------------------------

TEST_CASE("hybrid spec: greedy lossless: tiny-qwen35 target drafting for itself") {
  check_greedy_lossless(qwen35(), qwen35(), kGreedyPrompts, true);
}

TEST_CASE("hybrid spec: greedy lossless: tiny-qwen35moe target drafting for itself") {
  check_greedy_lossless(qwen35moe(), qwen35moe(), kGreedyPrompts, true);
}

TEST_CASE("hybrid spec: greedy lossless: tiny-qwen35 target with a near copy of itself as draft") {
  check_greedy_lossless(qwen35(), near_copy(qwen35(), "tiny-qwen35"), kGreedyPrompts, false);
}

TEST_CASE("hybrid spec: greedy lossless: tiny-qwen35moe target with a near copy of itself as draft") {
  check_greedy_lossless(qwen35moe(), near_copy(qwen35moe(), "tiny-qwen35moe"), kGreedyPrompts, false);
}

// The pairs of different models accept little, so each pass verifies a whole tree: the
// short prompts only (the 92-token prompt runs in the cases above), one pair of each
// kind: hybrid draft for hybrid target, non-hybrid draft for hybrid target, the reverse.
namespace {
const std::vector<std::string> kShortPrompts(kGreedyPrompts.begin(), kGreedyPrompts.begin() + 2);
}  // namespace

TEST_CASE("hybrid spec: greedy lossless: tiny-qwen35 target with tiny-qwen35moe draft: short prompts") {
  check_greedy_lossless(qwen35(), qwen35moe(), kShortPrompts, false);
}
TEST_CASE("hybrid spec: greedy lossless: tiny-qwen35 target with non-hybrid tiny-qwen3 draft: short prompts") {
  check_greedy_lossless(qwen35(), qwen3_as_qwen35(), kShortPrompts, false);
}
TEST_CASE("hybrid spec: greedy lossless: non-hybrid tiny-qwen3 target with tiny-qwen35 draft: short prompts") {
  check_greedy_lossless(qwen3_as_qwen35(), qwen35(), kShortPrompts, false);
}

namespace {
json cli_json_or_fail(const std::vector<std::string>& args) {
  const CliResult r = run_cli(args, "", 120);
  CAPTURE(r.err);
  std::string cmd = "flashspec";
  for (const std::string& a : args) cmd += " '" + a + "'";
  CAPTURE(cmd);
  REQUIRE(r.exit_code == 0);
  return json::parse(r.out);
}
}  // namespace

namespace {

struct StreamRun {
  std::string target, draft;
  std::vector<std::string> policy;
  bool throttled = false;  // --io-bw 20M
  bool must_draft = false;
};

// Each run's draft and policy on a target streamed under --ram-budget 1M (every layer of
// either fixture streams: inspect says 8 layers streamed) against the target alone,
// resident: the same 64 tokens, and the same logits at the first 8 positions.
void check_streamed(const std::vector<StreamRun>& runs) {
  using Run = StreamRun;
  std::map<std::string, json> alone;  // the target alone, resident, per target
  for (const Run& run : runs) {
    const std::vector<std::string> base = {"generate", "-m", run.target, "-p", kGreedyPrompts[0], "-n",
                                           std::to_string(kGreedyTokens), "--temp", "0", "--ignore-eos", "--json",
                                           "--logits", "8", "-t", "2"};
    if (!alone.count(run.target)) alone[run.target] = cli_json_or_fail(base);
    const json& want = alone[run.target];
    std::vector<std::string> a = base;
    a.insert(a.end(), {"-d", run.draft});
    a.insert(a.end(), run.policy.begin(), run.policy.end());
    a.insert(a.end(), {"--stream", "--ram-budget", "1M"});
    if (run.throttled) a.insert(a.end(), {"--io-bw", "20M"});
    const json got = cli_json_or_fail(a);
    CAPTURE(run.target);
    CAPTURE(run.draft);
    CAPTURE(run.policy[1]);
    CAPTURE(run.throttled);
    const std::vector<int32_t> wt = want.at("tokens").get<std::vector<int32_t>>();
    const std::vector<int32_t> gt = got.at("tokens").get<std::vector<int32_t>>();
    const std::string tdiff = token_difference(wt, gt);
    CAPTURE(tdiff);
    CHECK(gt == wt);
    for (size_t p = 0; p < 8; ++p) {
      CAPTURE(p);
      CHECK(got.at("logits")[p] == want.at("logits")[p]);
    }
    const json& st = got.at("stats");
    CHECK(st.at("bytes_read").get<int64_t>() > 0);  // it did stream
    if (run.must_draft) CHECK(st.at("accepted").get<int64_t>() > 0);
    const std::string how = run.policy[0] + " " + run.policy[1] + (run.throttled ? " at 20 MB/s" : "");
    MESSAGE(how << ", streamed: passes " << st.at("target_passes") << ", drafted " << st.at("drafted")
                << ", accepted " << st.at("accepted"));
  }
}

}  // namespace

TEST_CASE("hybrid spec: greedy lossless through the CLI with the target streamed: fixed trees and chains") {
  check_streamed({
      {qwen35(), qwen35moe(), {"--chain", "4"}},
      {qwen35(), qwen35(), {"--tree", "16"}, false, true},
      {qwen35moe(), qwen35moe(), {"--tree", "16"}, false, true},
      {qwen35moe(), qwen3_as_qwen35(), {"--tree", "16"}},
  });
}

TEST_CASE("hybrid spec: greedy lossless through the CLI with the target streamed: --tree auto at 20 MB/s") {
  // Resident, --tree auto never drafts with these drafts (each costs what the target
  // does); streamed at 20 MB/s a target pass costs ~0.14 s, and it does.
  check_streamed({
      {qwen35(), near_copy(qwen35(), "tiny-qwen35"), {"--tree", "auto"}, true, true},
      {qwen35moe(), near_copy(qwen35moe(), "tiny-qwen35moe"), {"--tree", "auto"}, true, true},
  });
}

// ---------------------------------------------------------------------------------------
// 2. Sampled: the target's distribution (test_speculative.cpp's chi-square check).
// ---------------------------------------------------------------------------------------

namespace {
}  // namespace

TEST_CASE("hybrid spec: sampling is lossless: hybrid target with hybrid drafts (chi-square over tokens 2..4)") {
  // test_speculative.cpp's check, on a hybrid target: 800 seeded runs of 5 tokens, target
  // alone against speculative, the triples of tokens 2..4 compared by chi-square. Token 0
  // comes from the prefill pass, so tokens 2..4 are drawn in the first tree pass and, where
  // it accepted little, in later ones after a commit of its accepted path into the
  // recurrent state. Temperature 1, top-k 20 (the whole-vocabulary sort of top-k 0 was
  // most of the time).
  // The models: tiny-qwen35 and tiny-qwen35moe with their vocabulary cut to the first 4096
  // ids (the same layers; with the 151669-row head such a check took 10 minutes), and a
  // near copy of the cut tiny-qwen35 (its ssm_out scaled by 0.9) that agrees with it often
  // but not always, so both acceptance and the residual rule run. A tree's sampled
  // answer does not depend on the draft (the target draws, the tree is searched for its
  // draw), chains do (rejection sampling): one tree, two chains.
  constexpr uint64_t kRows = 4096;
  const std::string target = derived_fixture("tiny-qwen35-cut", qwen35(), [](GgufWriter& w) { cut_vocabulary(w, kRows); });
  const std::string near = derived_fixture("tiny-qwen35-cut-near", qwen35(), [](GgufWriter& w) {
    cut_vocabulary(w, kRows);
    scale_tensors(w, "ssm_out.weight", 0.9f);
  });
  const std::string other = derived_fixture("tiny-qwen35moe-cut", qwen35moe(), [](GgufWriter& w) { cut_vocabulary(w, kRows); });
  const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(qwen35()));
  std::vector<int32_t> ids;  // the long text's first 8 ids under the cut
  for (int32_t id : tok.encode(kLongText, true))
    if (id < int32_t(kRows) && ids.size() < 8) ids.push_back(id);
  REQUIRE(ids.size() == 8);
  CAPTURE(ids_text(ids));

  CpuBackend backend(1), draft_backend(1);  // one thread: as fast at this size
  Model t(target, backend);
  const auto seeded = seeded_runs(20);
  const auto reference = target_triples(t, ids, seeded);
  struct Run {
    std::string draft;
    SpeculationParams policy;
  };
  for (const Run& run : {Run{near, tree(8)}, Run{near, chain(3)}, Run{other, chain(3)}}) {
    Model d(run.draft, draft_backend);
    Session session(t, &d, run.policy, 64);
    check_speculative_sampling(session, ids, seeded, reference,
                               policy_name(run.policy) + " draft " + run.draft);
  }
}

// ---------------------------------------------------------------------------------------
// 3. Several sequences: BatchSession and serve --parallel 4.
// ---------------------------------------------------------------------------------------

namespace {

// Two short prompts, and two sharing kLongText as a system prompt.
const std::vector<std::string> kBatchPrompts = {
    "Once upon a time",
    "The quick brown fox jumps over the lazy dog. Then",
    kLongText + " Question: what is the capital of France?",
    kLongText + " Question: write a short poem about the sea.",
};
constexpr int64_t kBatchTokens = 32;

constexpr int64_t kBatchPrefillRows = 16;

int64_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  int64_t n = 0;
  while (n < int64_t(std::min(a.size(), b.size())) && a[size_t(n)] == b[size_t(n)]) ++n;
  return n;
}

// A sequence's logits in a batch against its logits alone. A prompt the batch prefills in
// one chunk (the short ones) computes exactly the rows it computes alone: bit-identical.
// A long prompt is prefilled in chunks of 16 rows, or from a shared prefix's recurrent
// snapshot plus the rest, where alone it ran as one causal run of 64+ rows in the chunked
// form of the recurrence (README: "prompts of 64 rows or more run the chunked form"):
// the same values up to rounding, so only close there.
void check_batch_logits(const std::vector<std::vector<float>>& want, const std::vector<std::vector<float>>& got,
                        size_t prompt_tokens) {
  CAPTURE(prompt_tokens);
  const std::string ldiff = logits_difference(want, got);
  CAPTURE(ldiff);
  if (prompt_tokens <= size_t(kBatchPrefillRows)) {
    CHECK(ldiff.empty());
  } else {
    const double d = max_logit_difference(want, got);
    CAPTURE(d);
    CHECK(d < 0.02);
  }
}

void check_batch(const std::string& target_path, const std::string& draft_path,
                 const std::vector<std::optional<SpeculationParams>>& policies) {
  Pair m(target_path, draft_path);
  std::vector<GenerationResult> want;
  for (const std::string& p : kBatchPrompts)
    want.push_back(generate_target_only(m.target, m.ids(p), greedy(kBatchTokens, 4)));
  for (const auto& policy : policies) {
    const std::string pname = policy_name(policy);
    CAPTURE(target_path);
    CAPTURE(draft_path);
    CAPTURE(pname);
    // All four at once (prompts prefilled 16 rows per pass: the long ones take several
    // chunks; the second long one finds the first one's prefix being prefilled).
    {
      BatchSession b(m.target, policy ? &m.draft : nullptr, policy, 1024, 4, kBatchPrefillRows);
      std::vector<int64_t> ids;
      for (const std::string& p : kBatchPrompts) ids.push_back(b.add(m.ids(p), greedy(kBatchTokens, 4)));
      b.run();
      CHECK(b.counters().most_sequences >= 3);
      for (size_t i = 0; i < ids.size(); ++i) {
        CAPTURE(i);
        const GenerationResult got = b.take(ids[i]);
        const std::string tdiff = token_difference(want[i].tokens, got.tokens);
        CAPTURE(tdiff);
        CHECK(got.tokens == want[i].tokens);
        check_batch_logits(want[i].logits, got.logits, m.ids(kBatchPrompts[i]).size());
      }
      MESSAGE(pname << ", 4 together: passes " << b.counters().passes << ", most sequences in a pass "
                    << b.counters().most_sequences << ", prompt rows taken from shared blocks "
                    << b.counters().prefix_rows);
    }
    // The shared-prefix pair one after the other in one batch: the second takes the
    // first one's blocks of the system prompt (the prefix index keeps them).
    {
      BatchSession b(m.target, policy ? &m.draft : nullptr, policy, 1024, 4, kBatchPrefillRows);
      const int64_t first = b.add(m.ids(kBatchPrompts[2]), greedy(kBatchTokens, 4));
      b.run();
      const GenerationResult r2 = b.take(first);
      const int64_t second = b.add(m.ids(kBatchPrompts[3]), greedy(kBatchTokens, 4));
      b.run();
      const GenerationResult r3 = b.take(second);
      const int64_t shared = b.counters().prefix_rows;
      CAPTURE(shared);
      std::string tdiff = token_difference(want[2].tokens, r2.tokens);
      CAPTURE(tdiff);
      CHECK(r2.tokens == want[2].tokens);
      tdiff = token_difference(want[3].tokens, r3.tokens);
      CHECK(r3.tokens == want[3].tokens);
      check_batch_logits(want[2].logits, r2.logits, m.ids(kBatchPrompts[2]).size());
      check_batch_logits(want[3].logits, r3.logits, m.ids(kBatchPrompts[3]).size());
      MESSAGE(pname << ", shared prefix one after the other: prompt rows taken from shared blocks " << shared);
      CHECK(shared > 0);  // the prefix-sharing path ran
      // The second prompt left the known blocks at the end of the system prompt's last
      // whole block, and a snapshot there: a third question after the same system prompt
      // takes all of it.
      const std::string third = kLongText + " Question: how many legs does a spider have?";
      const int64_t boundary = common_prefix(m.ids(kBatchPrompts[2]), m.ids(kBatchPrompts[3])) / 16 * 16;
      const int64_t before = b.counters().prefix_rows;
      const int64_t id3 = b.add(m.ids(third), greedy(kBatchTokens, 4));
      b.run();
      const GenerationResult r4 = b.take(id3);
      CHECK(b.counters().prefix_rows - before == boundary);
      CHECK(r4.tokens == generate_target_only(m.target, m.ids(third), greedy(kBatchTokens, 4)).tokens);
    }
  }
}

}  // namespace

TEST_CASE("hybrid spec: batch session: 4 sequences of tiny-qwen35 (drafting for itself) answer as one at a time") {
  check_batch(qwen35(), qwen35(), {std::nullopt, tree(8), chain(4), tree_auto()});
}

TEST_CASE("hybrid spec: batch session: 4 sequences of tiny-qwen35moe with a tiny-qwen35 draft") {
  check_batch(qwen35moe(), qwen35(), {std::nullopt, tree(8)});
}

namespace {

json completion(const std::string& prompt, int max_tokens) {
  return {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

struct Answer {
  std::string text;
  std::vector<int32_t> tokens;
  int64_t cached = 0;
};

Answer answer_of(const HttpResponse& r) {
  CAPTURE(r.body);
  REQUIRE(r.status == 200);
  const json j = r.json();
  return {j.at("choices").at(0).at("text").get<std::string>(), j.at("flashspec").at("tokens").get<std::vector<int32_t>>(),
          j.at("usage").at("prompt_tokens_details").at("cached_tokens").get<int64_t>()};
}

}  // namespace

TEST_CASE("hybrid spec: serve --parallel 4 on tiny-qwen35 with a draft answers as generate does alone") {
  // The reference: `generate` with the target alone, one prompt at a time.
  const std::string target = qwen35();
  std::vector<std::vector<int32_t>> want;
  for (const std::string& p : kBatchPrompts)
    want.push_back(generate_reference(target, p, int(kBatchTokens)).at("tokens").get<std::vector<int32_t>>());
  const std::string kFifthPrompt = kLongText + " Question: how many clocks were there?";
  const std::vector<int32_t> want_fifth =
      generate_reference(target, kFifthPrompt, int(kBatchTokens)).at("tokens").get<std::vector<int32_t>>();

  for (const std::vector<std::string>& spec : {std::vector<std::string>{"-d", qwen35moe(), "--tree", "8"},
                                               std::vector<std::string>{"-d", target, "--chain", "4"}}) {
    std::vector<std::string> args = {"-m", target, "-t", "2", "--temp", "0", "--parallel", "4"};
    args.insert(args.end(), spec.begin(), spec.end());
    ServerProcess srv(args);
    CAPTURE(srv.log());
    CAPTURE(spec[1]);
    CAPTURE(spec[3]);
    const int port = srv.port();
    std::vector<std::future<HttpResponse>> f;
    for (const std::string& p : kBatchPrompts)
      f.push_back(std::async(std::launch::async,
                             [=] { return http_post(port, "/v1/completions", completion(p, int(kBatchTokens))); }));
    for (size_t i = 0; i < f.size(); ++i) {
      CAPTURE(i);
      const Answer a = answer_of(f[i].get());
      const std::string tdiff = token_difference(want[i], a.tokens);
      CAPTURE(tdiff);
      CHECK(a.tokens == want[i]);
    }
    std::string m = http_get(port, "/metrics").body;
    MESSAGE(spec[2] << " " << spec[3] << ": most sequences in a pass " << metric(m, "flashspec_batch_most_sequences")
                    << ", prefix rows " << metric(m, "flashspec_batch_prefix_rows_total"));
    CHECK(metric(m, "flashspec_batch_most_sequences") > 1);
    // Again, one at a time: the shared system prompt's blocks are known by now.
    for (size_t i : {size_t(3), size_t(2)}) {
      CAPTURE(i);
      const Answer a = answer_of(http_post(port, "/v1/completions", completion(kBatchPrompts[i], int(kBatchTokens))));
      const std::string tdiff = token_difference(want[i], a.tokens);
      CAPTURE(tdiff);
      CAPTURE(a.cached);
      CHECK(a.tokens == want[i]);
      MESSAGE("prompt " << i << " again: cached_tokens " << a.cached);
    }
    // A new prompt with the same system prompt: it may take a snapshot of the shared part.
    {
      const Answer a = answer_of(http_post(port, "/v1/completions", completion(kFifthPrompt, int(kBatchTokens))));
      const std::string tdiff = token_difference(want_fifth, a.tokens);
      CAPTURE(tdiff);
      CAPTURE(a.cached);
      CHECK(a.tokens == want_fifth);
      MESSAGE("a fifth prompt with the same system prompt: cached_tokens " << a.cached);
    }
    m = http_get(port, "/metrics").body;
    CHECK(metric(m, "flashspec_batch_prefix_rows_total") > 0);  // the prefix-sharing path ran
    CHECK(srv.stop(SIGTERM) == 0);
  }
}

// ---------------------------------------------------------------------------------------
// 4. Chat turns, and turns that end inside an accepted draft path.
// ---------------------------------------------------------------------------------------

TEST_CASE("hybrid spec: a 3-turn chat with a draft says what the target alone says") {
  const std::string input = "Tell me a story about a cat.\nWhat did the dog do?\nAnd then?\n";
  struct Run {
    std::string target;
    std::vector<std::vector<std::string>> specs;
  };
  const std::vector<Run> runs = {
      {qwen35(), {{"-d", qwen35(), "--tree", "16"}, {"-d", qwen35moe(), "--chain", "4"}}},
      {qwen35moe(), {{"-d", qwen3_as_qwen35(), "--tree", "16"}, {"-d", qwen35moe(), "--tree", "auto"}}},
  };
  for (const Run& run : runs) {
    const std::vector<std::string> base = {"chat", "-m", run.target, "--temp", "0", "-n", "24", "--json", "-t", "2"};
    const CliResult alone = run_cli(base, input);
    CAPTURE(alone.err);
    REQUIRE(alone.exit_code == 0);
    const std::vector<json> want = json_lines(alone.out);
    REQUIRE(want.size() == 3);
    for (const std::vector<std::string>& spec : run.specs) {
      std::vector<std::string> a = base;
      a.insert(a.end(), spec.begin(), spec.end());
      const CliResult s = run_cli(a, input);
      CAPTURE(run.target);
      CAPTURE(spec[1]);
      CAPTURE(spec[3]);
      CAPTURE(s.err);
      REQUIRE(s.exit_code == 0);
      const std::vector<json> got = json_lines(s.out);
      REQUIRE(got.size() == 3);
      int64_t accepted = 0;
      for (size_t t = 0; t < 3; ++t) {
        CAPTURE(t);
        const std::string tdiff = token_difference(want[t].at("tokens").get<std::vector<int32_t>>(),
                                                   got[t].at("tokens").get<std::vector<int32_t>>());
        CAPTURE(tdiff);
        CHECK(got[t].at("tokens") == want[t].at("tokens"));
        CHECK(got[t].at("text") == want[t].at("text"));
        CHECK(got[t].at("prompt_tokens") == want[t].at("prompt_tokens"));
        CHECK(got[t].at("history_tokens") == want[t].at("history_tokens"));
        accepted += got[t].at("stats").at("accepted").get<int64_t>();
      }
      MESSAGE(spec[2] << " " << spec[3] << " draft " << spec[1] << ": accepted " << accepted << " over 3 turns");
    }
  }
}

namespace {

// A conversation on a Session: turn 1 on `first` ends after `stop_after` emitted tokens
// (a caller's stop) or on the end token `end_token`; turn 2 feeds `second` and generates
// 24 tokens, keeping their logits.
struct Conversation {
  GenerationResult turn1, turn2;
  std::vector<int32_t> history;  // the session's tokens after turn 1
};

Conversation converse(Model& target, Model* draft, const std::optional<SpeculationParams>& policy,
                      const std::vector<int32_t>& first, const std::vector<int32_t>& second, int64_t stop_after,
                      int32_t end_token) {
  Session s(target, draft, policy, 512);
  GenerateOptions o = greedy(48);
  int64_t emitted = 0;
  if (stop_after > 0) {
    o.on_token = [&](int32_t) { ++emitted; };
    o.should_stop = [&] { return emitted >= stop_after; };
  }
  if (end_token >= 0) {
    o.ignore_eos = false;
    o.is_end = [end_token](int32_t id) { return id == end_token; };
  }
  Conversation c;
  c.turn1 = s.generate(first, o);
  c.history = s.tokens();
  c.turn2 = s.generate(second, greedy(24, 24));
  return c;
}

// Whether turn 1's last pass emitted fewer tokens than it accepted plus its bonus, i.e.
// the turn ended inside an accepted path (or what the pass record says).
std::string last_pass(const GenerationResult& r) {
  if (r.stats.passes.empty()) return "no pass records";
  const PassRecord& p = r.stats.passes.back();
  std::ostringstream o;
  o << "last pass: " << p.tree_tokens << " rows verified, " << p.draft_nodes << " draft nodes, emitted " << p.emitted;
  return o.str();
}

void check_conversation(Pair& m, const SpeculationParams& policy, const std::vector<int32_t>& first,
                        const std::vector<int32_t>& second, int64_t stop_after, int32_t end_token) {
  const Conversation want = converse(m.target, nullptr, std::nullopt, first, second, stop_after, end_token);
  const Conversation got = converse(m.target, &m.draft, policy, first, second, stop_after, end_token);
  const std::string pname = policy_name(policy);
  CAPTURE(pname);
  CAPTURE(stop_after);
  CAPTURE(end_token);
  const std::string where = last_pass(got.turn1);
  CAPTURE(where);
  std::string tdiff = token_difference(want.turn1.tokens, got.turn1.tokens);
  CAPTURE(tdiff);
  CHECK(got.turn1.tokens == want.turn1.tokens);
  CHECK(got.history == want.history);
  const std::string tdiff2 = token_difference(want.turn2.tokens, got.turn2.tokens);
  CAPTURE(tdiff2);
  CHECK(got.turn2.tokens == want.turn2.tokens);
  const std::string ldiff = logits_difference(want.turn2.logits, got.turn2.logits);
  CAPTURE(ldiff);
  CHECK(ldiff.empty());
  // And as a fresh run of the whole conversation so far.
  std::vector<int32_t> all = want.history;
  all.insert(all.end(), second.begin(), second.end());
  const GenerationResult fresh = generate_target_only(m.target, all, greedy(24));
  CHECK(fresh.tokens == want.turn2.tokens);
  MESSAGE(pname << ", turn 1 ended after " << got.turn1.tokens.size() << " tokens (" << where << "), turn 2 accepted "
                << got.turn2.stats.accepted);
}

}  // namespace

TEST_CASE("hybrid spec: a turn that stops inside an accepted draft path continues as the target alone") {
  // The draft is the target itself, so each tree pass accepts a path several tokens deep:
  // a stop after k tokens lands inside one, and the session truncates the recurrent state
  // back into that path before the next turn.
  Pair m(qwen35(), qwen35());
  const std::vector<int32_t> first = m.ids("Once upon a time");
  const std::vector<int32_t> second = m.ids(" The end. Now tell me another story.");
  for (const SpeculationParams& p : {tree(16), chain(4)})
    for (int64_t k : {2, 3, 4, 6})
      check_conversation(m, p, first, second, k, -1);
}

TEST_CASE("hybrid spec: a turn that ends on an end token inside an accepted draft path continues as the target alone") {
  for (const std::string& path : {qwen35(), qwen35moe()}) {
    CAPTURE(path);
    Pair m(path, path);
    const std::vector<int32_t> first = m.ids("The quick brown fox jumps over the lazy dog. Then");
    const std::vector<int32_t> second = m.ids(" Go on.");
    // The end token: the first greedy token after the first two that was not emitted
    // before (the target's answer is its own until there).
    const GenerationResult plain = generate_target_only(m.target, first, greedy(32));
    int32_t end = -1;
    for (size_t i = 2; i < plain.tokens.size() && end < 0; ++i)
      if (std::find(plain.tokens.begin(), plain.tokens.begin() + long(i), plain.tokens[i]) == plain.tokens.begin() + long(i))
        end = plain.tokens[i];
    CAPTURE(ids_text(plain.tokens));
    REQUIRE(end >= 0);
    check_conversation(m, tree(16), first, second, 0, end);
  }
}

TEST_CASE("hybrid spec: a chat turn cut by a stop text inside an accepted draft path continues as the target alone") {
  // Through the Engine and run_turn, as chat and serve run turns: the stop text is the
  // text of the target's 4th greedy token, so the turn ends inside the path the self-draft
  // made the target accept.
  const std::string target = qwen35();
  EngineOptions alone_opt;
  alone_opt.target_path = target;
  alone_opt.threads = 2;
  alone_opt.greedy = true;
  EngineOptions spec_opt = alone_opt;
  spec_opt.draft_path = target;
  spec_opt.speculation.mode = SpeculationMode::Tree;
  spec_opt.speculation.tree_size = 16;
  Engine alone(alone_opt), spec(spec_opt);
  const Tokenizer& tok = alone.tokenizer();
  const std::vector<int32_t> first = tok.encode("Once upon a time", true);
  const std::vector<int32_t> second = tok.encode(" And what happened next?", false);

  TurnRequest probe;
  probe.sampling.temperature = 0;
  probe.max_tokens = 16;
  probe.ignore_eos = true;
  Session ps = alone.new_session(512);
  const TurnResult plain = run_turn(alone, ps, first, probe);
  REQUIRE(plain.tokens.size() >= 6);
  // The 4th token's text, when it does not occur in the text before it.
  std::string before;
  for (size_t i = 0; i < 3; ++i) before += tok.token_to_piece(plain.tokens[i]);
  const std::string stop = tok.token_to_piece(plain.tokens[3]);
  CAPTURE(ids_text(plain.tokens));
  CAPTURE(stop);
  REQUIRE(!stop.empty());
  if ((before + stop).find(stop) != before.size()) {
    MESSAGE("the 4th token's text occurs earlier; the stop lands earlier, still inside the path");
  }

  TurnRequest r = probe;
  r.stop = {stop};
  TurnRequest r2 = probe;
  r2.max_tokens = 24;
  Session sa = alone.new_session(512), ss = spec.new_session(512);
  const TurnResult a1 = run_turn(alone, sa, first, r), s1 = run_turn(spec, ss, first, r);
  CHECK(a1.finish == AnswerEnd::StopText);
  CHECK(s1.finish == AnswerEnd::StopText);
  CHECK(s1.tokens == a1.tokens);
  CHECK(s1.text == a1.text);
  CHECK(ss.tokens() == sa.tokens());
  MESSAGE("stop text turn: " << s1.tokens.size() << " tokens, " << last_pass(GenerationResult{{}, {}, s1.stats}));
  const TurnResult a2 = run_turn(alone, sa, second, r2), s2 = run_turn(spec, ss, second, r2);
  const std::string tdiff = token_difference(a2.tokens, s2.tokens);
  CAPTURE(tdiff);
  CHECK(s2.tokens == a2.tokens);
  CHECK(s2.text == a2.text);
  CHECK(s1.stats.accepted + s2.stats.accepted > 0);
}

TEST_CASE("hybrid spec: serve with a draft: a completion cut by a stop text then one that continues it answer as generate") {
  // The server keeps the last request's sequence and takes a later prompt's common prefix
  // from it (with the recurrent state at a block boundary, README). The stop text is the
  // text of the target's 4th greedy token, so the first answer ends inside the path the
  // self-draft made the target accept; the second prompt continues that text.
  const std::string target = qwen35();
  const std::string prompt = kLongText;
  const json plain = generate_reference(target, prompt, 8);
  const std::vector<int32_t> plain_tokens = plain.at("tokens").get<std::vector<int32_t>>();
  REQUIRE(plain_tokens.size() == 8);
  const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(target));
  std::string text;  // the first 4 tokens' text
  for (size_t i = 0; i < 4; ++i) text += tok.token_to_piece(plain_tokens[i]);
  const std::string stop = tok.token_to_piece(plain_tokens[3]);
  CAPTURE(ids_text(plain_tokens));
  CAPTURE(stop);
  REQUIRE(!stop.empty());
  const std::string upto = text.substr(0, text.find(stop));  // the answer: the text before the stop
  const std::string next = prompt + upto + " And then the clockmaker said";
  const std::vector<int32_t> want_next = generate_reference(target, next, 24).at("tokens").get<std::vector<int32_t>>();

  for (const std::vector<std::string>& spec : {std::vector<std::string>{"-d", target, "--tree", "16"},
                                               std::vector<std::string>{"-d", target, "--chain", "4"}}) {
    std::vector<std::string> args = {"-m", target, "-t", "2", "--temp", "0"};
    args.insert(args.end(), spec.begin(), spec.end());
    ServerProcess srv(args);
    CAPTURE(srv.log());
    CAPTURE(spec[3]);
    json body = completion(prompt, 16);
    body["stop"] = json::array({stop});
    const HttpResponse r1 = http_post(srv.port(), "/v1/completions", body);
    CAPTURE(r1.body);
    REQUIRE(r1.status == 200);
    const json j1 = r1.json();
    CHECK(j1.at("choices").at(0).at("finish_reason") == "stop");
    CHECK(j1.at("choices").at(0).at("text").get<std::string>() == upto);
    const std::vector<int32_t> got1 = j1.at("flashspec").at("tokens").get<std::vector<int32_t>>();
    CHECK(got1 == std::vector<int32_t>(plain_tokens.begin(), plain_tokens.begin() + long(got1.size())));
    const Answer a2 = answer_of(http_post(srv.port(), "/v1/completions", completion(next, 24)));
    const std::string tdiff = token_difference(want_next, a2.tokens);
    CAPTURE(tdiff);
    CAPTURE(a2.cached);
    CHECK(a2.tokens == want_next);
    MESSAGE(spec[2] << " " << spec[3] << ": first answer " << got1.size() << " tokens (stop "
                    << j1.at("choices").at(0).at("finish_reason") << "), the continuation took " << a2.cached
                    << " cached tokens");
    CHECK(srv.stop(SIGTERM) == 0);
  }
}
