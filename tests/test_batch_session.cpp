// In-flight batching: several sequences share each target pass, and none of them can
// tell. A row's logits are bit-identical alone or beside other sequences' rows; a
// sequence's greedy answer is the target's alone; a seeded sampled answer is the same
// alone or beside others; a prompt joining mid-way is prefilled in chunks while the
// others keep emitting; a sequence taken away mid-answer changes no other answer.
#include <doctest/doctest.h>

#include <optional>

#include "core/error.h"
#include "engine/batch_session.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/model.h"
#include "model/kv_footprint.h"
#include "tests/fixtures.h"
#include "tests/greedy_options.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

struct Models {
  CpuBackend backend{2};
  CpuBackend draft_backend{1};
  Model target, draft;
  Tokenizer tok;
  explicit Models(const std::string& target_name)
      : target(model_path(target_name), backend),
        draft(model_path("salty279K"), draft_backend),
        tok(Tokenizer::from_gguf(target.file())) {}
  std::vector<int32_t> ids(const std::string& text) const { return tok.encode(text, true); }
};

const std::vector<std::string> kPrompts = {
    "Once upon a time, there was a little girl",
    "The cat sat on the mat. The cat sat on the mat. The cat",
    "Tom and Sue went to the park",
    "One day, a big dog found a ball. The dog",
};

SpeculationParams tree(int64_t b) { return {.mode = SpeculationParams::Mode::Tree, .node_budget = b}; }
SpeculationParams chain(int64_t k) { return {.mode = SpeculationParams::Mode::Chain, .node_budget = k}; }
SpeculationParams tree_auto() { return {.mode = SpeculationParams::Mode::Auto, .node_budget = 1024}; }
SpeculationParams lookup_alone() {
  SpeculationParams p = tree(16);
  p.lookup = true;
  return p;
}

// Every prompt's answer, the prompts run together in one batch (or, `alone`, each in a
// batch of its own).
std::vector<GenerationResult> run_batch(Models& m, const std::optional<SpeculationParams>& policy,
                                        const GenerateOptions& opt, bool alone, int64_t prefill_rows = 64) {
  const bool draft = policy && !(policy->lookup && policy->mode == SpeculationParams::Mode::Tree && policy->node_budget == 16);
  std::vector<GenerationResult> out;
  if (alone) {
    for (const std::string& p : kPrompts) {
      BatchSession b(m.target, draft ? &m.draft : nullptr, policy, 2048, 1, prefill_rows);
      const int64_t id = b.add(m.ids(p), opt);
      b.run();
      out.push_back(b.take(id));
    }
    return out;
  }
  BatchSession b(m.target, draft ? &m.draft : nullptr, policy, 2048, int64_t(kPrompts.size()), prefill_rows);
  std::vector<int64_t> ids;
  for (const std::string& p : kPrompts) ids.push_back(b.add(m.ids(p), opt));
  b.run();
  CHECK(b.counters().most_sequences == int64_t(kPrompts.size()));
  for (int64_t id : ids) out.push_back(b.take(id));
  CHECK(b.sequences() == 0);
  return out;
}

}  // namespace

TEST_CASE("forward_many: each sequence's rows are bit-identical to its own forward, across chunked passes") {
  for (const char* name : {"stories260K", "stories260K-wide-q4_0", "tiny-qwen3moe"}) {
    CAPTURE(name);
    Models m(name);
    // Three sequences: a prompt, a prompt with a pending token tree after it, a single token.
    const std::vector<int32_t> a = m.ids(kPrompts[0]), b = m.ids(kPrompts[1]);
    TokenTree t(b.back());
    const int32_t c1 = t.add(42, 0, -0.1);
    t.add(7, 0, -0.5);
    t.add(99, c1, -0.2);
    const std::vector<int32_t> single = {m.ids(kPrompts[2])[1]};

    auto run = [&](bool together, int64_t max_batch, std::vector<std::vector<float>>& logits) {
      m.target.set_max_batch(max_batch);
      std::vector<SequenceCache> kv;
      for (int i = 0; i < 3; ++i) kv.push_back(m.target.make_cache(128));
      std::vector<float> pre;
      // b's prompt is committed first; its tree then runs after it.
      m.target.forward_causal(std::span(b).first(b.size() - 1), kv[1], LogitRows::None, pre);
      kv[1].commit_first(int64_t(b.size()) - 1);
      const std::vector<int32_t> pos_a = consecutive_positions(0, int64_t(a.size()));
      const std::vector<int32_t> pos_t = t.positions(kv[1].committed());
      const std::vector<uint8_t> mask = t.ancestor_mask();
      const std::vector<int32_t> pos_s = {0};
      logits.assign(3, {});
      const std::vector<SequenceBatch> batches = {
          {ForwardBatch{a, pos_a, {}}, &kv[0], LogitRows::All, &logits[0]},
          {ForwardBatch{t.tokens, pos_t, mask}, &kv[1], LogitRows::All, &logits[1]},
          {ForwardBatch{single, pos_s, {}}, &kv[2], LogitRows::Last, &logits[2]}};
      if (together) m.target.forward_many(batches);
      else
        for (const SequenceBatch& s : batches) m.target.forward_many({&s, 1});
      for (int i = 0; i < 3; ++i) CHECK(kv[size_t(i)].pending() == int64_t(batches[size_t(i)].batch.tokens.size()));
    };
    std::vector<std::vector<float>> alone, together, chunked;
    run(false, 512, alone);
    run(true, 512, together);
    run(true, 5, chunked);  // every sequence split over several passes
    m.target.set_max_batch(512);
    CHECK(bit_identical(alone, together));
    CHECK(bit_identical(alone, chunked));
    CHECK(alone[0].size() == a.size() * size_t(m.target.config().n_vocab));
    CHECK(alone[2].size() == size_t(m.target.config().n_vocab));
  }
}

TEST_CASE("forward_many refuses two batches on one cache") {
  Models m("stories260K");
  SequenceCache kv = m.target.make_cache(32);
  const std::vector<int32_t> tok = {1}, pos = {0};
  std::vector<float> l1, l2;
  const std::vector<SequenceBatch> batches = {{ForwardBatch{tok, pos, {}}, &kv, LogitRows::Last, &l1},
                                              {ForwardBatch{tok, pos, {}}, &kv, LogitRows::Last, &l2}};
  CHECK_THROWS_AS(m.target.forward_many(batches), Error);
}

TEST_CASE("batch session: every sequence's greedy answer is the target's alone, beside three others") {
  Models m("stories260K");
  std::vector<GenerationResult> want;
  for (const std::string& p : kPrompts) want.push_back(generate_target_only(m.target, m.ids(p), greedy(48)));
  const std::vector<std::optional<SpeculationParams>> policies = {std::nullopt, tree(8),        chain(4),
                                                                  tree_auto(),  lookup_alone()};
  for (const auto& policy : policies) {
    CAPTURE(policy ? int(policy->mode) : -1);
    const std::vector<GenerationResult> got = run_batch(m, policy, greedy(48), false);
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      CAPTURE(kPrompts[i]);
      CHECK(got[i].tokens == want[i].tokens);
      CHECK(got[i].stats.generated == 48);
    }
  }
}

TEST_CASE("batch session: a seeded sampled answer is the same alone as beside others") {
  Models m("stories260K");
  GenerateOptions opt = greedy(40);
  opt.sampling.temperature = 1.0f;
  opt.sampling.seed = 1234;
  for (const auto& policy : std::vector<std::optional<SpeculationParams>>{std::nullopt, tree(8), chain(4), tree_auto()}) {
    CAPTURE(policy ? int(policy->mode) : -1);
    const std::vector<GenerationResult> alone = run_batch(m, policy, opt, true);
    const std::vector<GenerationResult> together = run_batch(m, policy, opt, false);
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      CHECK(alone[i].tokens == together[i].tokens);
      // A fixed budget grows the same trees whether a sequence drafts alone or in
      // lockstep with others (one draft forward per level for all).
      if (policy && !policy->auto_budget()) {
        CHECK(alone[i].stats.drafted == together[i].stats.drafted);
        CHECK(alone[i].stats.accepted_by_depth == together[i].stats.accepted_by_depth);
      }
    }
    // Sampling did happen: the answers are not all the greedy ones.
    bool differs = false;
    for (size_t i = 0; i < kPrompts.size(); ++i)
      differs |= alone[i].tokens != generate_target_only(m.target, m.ids(kPrompts[i]), greedy(40)).tokens;
    CHECK(differs);
  }
}

TEST_CASE("batch session: a prompt joining mid-way is prefilled in chunks while the others keep emitting") {
  Models m("stories260K");
  BatchSession b(m.target, &m.draft, tree(8), 512, 4, 8);
  const int64_t first = b.add(m.ids(kPrompts[0]), greedy(64));
  for (int i = 0; i < 3; ++i) b.step();
  std::string long_prompt;
  for (int i = 0; i < 6; ++i) long_prompt += kPrompts[size_t(i % 4)] + ". ";
  const std::vector<int32_t> late_ids = m.ids(long_prompt);
  REQUIRE(late_ids.size() > 24);  // at least three chunks of 8
  int64_t emitted = 0;
  GenerateOptions late_opt = greedy(16);
  late_opt.on_token = [&](int32_t) { ++emitted; };
  const int64_t late = b.add(late_ids, late_opt);
  const int64_t chunks = (int64_t(late_ids.size()) + 7) / 8;
  // Until its last chunk, the newcomer emits nothing and the first sequence emits in
  // every pass.
  for (int64_t c = 0; c + 1 < chunks; ++c) {
    const int64_t before = int64_t(b.counters().passes);
    const size_t rows_before = size_t(b.counters().prefill_rows);
    b.step();
    CHECK(b.counters().passes == before + 1);
    CHECK(b.counters().prefill_rows == int64_t(rows_before) + 8);
    CHECK(emitted == 0);
  }
  b.step();  // the last chunk: its first token
  CHECK(emitted == 1);
  b.run();
  const GenerationResult r1 = b.take(first), r2 = b.take(late);
  CHECK(r1.tokens == generate_target_only(m.target, m.ids(kPrompts[0]), greedy(64)).tokens);
  CHECK(r2.tokens == generate_target_only(m.target, late_ids, greedy(16)).tokens);
  CHECK(r2.stats.prompt_tokens == int64_t(late_ids.size()));
  // The first sequence emitted in every pass after its own prompt's two chunks.
  REQUIRE(r1.stats.passes.size() > 2);
  CHECK(r1.stats.passes[0].emitted == 0);
  for (size_t i = 1; i < r1.stats.passes.size(); ++i) CHECK(r1.stats.passes[i].emitted >= 1);
}

TEST_CASE("batch session: beside a decoding sequence a prompt on a resident target is prefilled in two halves, alone in one pass") {
  Models m("stories260K");
  BatchSession b(m.target, nullptr, std::nullopt, 512, 2, 64);
  const std::vector<int32_t> first_ids = m.ids(kPrompts[0]);
  const int64_t first = b.add(first_ids, greedy(32));
  b.step();  // alone: the whole prompt in one pass
  CHECK(b.counters().prefill_rows == int64_t(first_ids.size()));
  std::string long_prompt;
  for (int i = 0; i < 3; ++i) long_prompt += kPrompts[size_t(i)] + ". ";
  const std::vector<int32_t> late_ids = m.ids(long_prompt);
  REQUIRE(late_ids.size() > 30);
  REQUIRE(late_ids.size() < 64);  // fits one pass's prefill rows
  const int64_t late = b.add(late_ids, greedy(8));
  const int64_t half = (int64_t(late_ids.size()) + 1) / 2;
  b.step();
  CHECK(b.counters().prefill_rows == int64_t(first_ids.size()) + half);
  b.step();
  CHECK(b.counters().prefill_rows == int64_t(first_ids.size() + late_ids.size()));
  b.run();
  CHECK(b.take(first).tokens == generate_target_only(m.target, first_ids, greedy(32)).tokens);
  CHECK(b.take(late).tokens == generate_target_only(m.target, late_ids, greedy(8)).tokens);
}

TEST_CASE("batch session: two prompts with one prefix joining beside a decoding sequence prefill its full blocks once, in halves") {
  Models m("stories260K");
  BatchSession b(m.target, nullptr, std::nullopt, 512, 3, 64);
  const std::vector<int32_t> first_ids = m.ids(kPrompts[0]);
  const int64_t first = b.add(first_ids, greedy(32));
  b.step();
  b.step();  // decoding now
  std::string shared_prompt;
  for (int i = 0; i < 3; ++i) shared_prompt += kPrompts[size_t(i)] + ". ";
  const std::vector<int32_t> ids = m.ids(shared_prompt);
  REQUIRE(ids.size() > size_t(2 * BatchSession::kKvBlockRows));
  const int64_t a = b.add(ids, greedy(8)), c = b.add(ids, greedy(8));
  b.run();
  // The second waits for the first's chunks and takes every full block of the prompt: it
  // computes at most the last, partial one (the first keeps writing into it).
  const GenerationResult ra = b.take(a), rc = b.take(c);
  CHECK(ra.stats.prompt_tokens == int64_t(ids.size()));
  CHECK(rc.stats.prompt_tokens >= 1);
  CHECK(rc.stats.prompt_tokens <= BatchSession::kKvBlockRows);
  CHECK(b.counters().prefill_rows == int64_t(first_ids.size() + ids.size()) + rc.stats.prompt_tokens);
  const std::vector<int32_t> want = generate_target_only(m.target, ids, greedy(8)).tokens;
  CHECK(ra.tokens == want);
  CHECK(rc.tokens == want);
  CHECK(b.take(first).tokens == generate_target_only(m.target, first_ids, greedy(32)).tokens);
}

TEST_CASE("batch session: a sequence taken away mid-answer changes no other answer, and frees its slot") {
  Models m("stories260K");
  BatchSession b(m.target, &m.draft, tree_auto(), 2048, 2, 64);
  const int64_t a = b.add(m.ids(kPrompts[0]), greedy(40));
  const int64_t gone = b.add(m.ids(kPrompts[1]), greedy(40));
  for (int i = 0; i < 4; ++i) b.step();
  CHECK_THROWS_AS(b.add(m.ids(kPrompts[2]), greedy(8)), Error);  // two are running
  const GenerationResult cut = b.take(gone);
  CHECK(cut.tokens.size() < 40);
  const int64_t c = b.add(m.ids(kPrompts[2]), greedy(40));
  b.run();
  CHECK(b.take(a).tokens == generate_target_only(m.target, m.ids(kPrompts[0]), greedy(40)).tokens);
  CHECK(b.take(c).tokens == generate_target_only(m.target, m.ids(kPrompts[2]), greedy(40)).tokens);
  CHECK(b.running() == 0);
  CHECK_FALSE(b.step());
}

TEST_CASE("batch session: a request larger than a sequence's context is refused with the numbers") {
  Models m("stories260K");
  BatchSession b(m.target, nullptr, std::nullopt, 64, 2, 64);
  try {
    b.add(m.ids(kPrompts[0]), greedy(100));
    FAIL("accepted a request past the context");
  } catch (const Error& e) {
    // 64 rows, less the scratch rows of a pass: what a request's prompt and answer may use.
    CHECK(std::string(e.what()).find("exceed the context size " + std::to_string(64 - b.scratch_rows())) !=
          std::string::npos);
  }
  CHECK(b.sequences() == 0);
}

TEST_CASE("paged attention: a cache in scattered blocks of a pool gives the contiguous cache's logits bit for bit") {
  for (const char* name : {"stories260K", "tiny-qwen3"}) {
    CAPTURE(name);
    Models m(name);
    const ModelConfig& c = m.target.config();
    const std::vector<int32_t> prompt = m.ids(kPrompts[1]);
    TokenTree t(prompt.back());
    const int32_t a = t.add(42, 0, -0.1);
    t.add(7, 0, -0.5);
    t.add(99, a, -0.2);
    auto run = [&](SequenceCache& kv, std::vector<std::vector<float>>& out) {
      out.assign(2, {});
      m.target.forward_causal(std::span(prompt).first(prompt.size() - 1), kv, LogitRows::All, out[0]);
      kv.commit_first(int64_t(prompt.size()) - 1);
      const std::vector<int32_t> pos = t.positions(kv.committed());
      m.target.forward(ForwardBatch{t.tokens, pos, t.ancestor_mask()}, kv, LogitRows::All, out[1]);
    };
    SequenceCache flat = m.target.make_cache(64);
    std::vector<std::vector<float>> want, got;
    run(flat, want);
    KvPool pool(m.backend, kv_widths(c), 16, 4, m.target.key_type(), m.target.value_type());
    // Blocks handed out in a scattered order: two other caches take some first.
    REQUIRE(pool.reserve(16));
    KvCache other1(pool, 8, {}, 0, 2), other2(pool, 8, {}, 0, 2);
    other1.prepare_rows(5);
    SequenceCache paged = m.target.make_cache(KvCache(pool, 64, {}, 0, 12));
    other2.prepare_rows(8);
    run(paged, got);
    CHECK(bit_identical(want, got));
    CHECK(paged.kv().blocks().size() == (prompt.size() - 1 + 4 + 3) / 4);
    CHECK(paged.kv().blocks()[0] != 0);  // not simply the first rows of the pool
  }
}

namespace {
// A system prompt of about 200 tokens and four questions after it.
std::vector<std::vector<int32_t>> system_prompted(const Models& m) {
  std::string system;
  for (int i = 0; system.size() < 700; ++i) system += kPrompts[size_t(i % 4)] + ". ";
  std::vector<std::vector<int32_t>> out;
  for (const std::string& q : kPrompts) out.push_back(m.ids(system + "Question: " + q));
  return out;
}
}  // namespace

TEST_CASE("shared prefix: four requests with one system prompt prefill it once and share its blocks") {
  Models m("stories260K");
  const std::vector<std::vector<int32_t>> prompts = system_prompted(m);
  size_t common = 0;
  while (prompts[0][common] == prompts[1][common]) ++common;
  REQUIRE(common > 150);
  BatchSession b(m.target, &m.draft, tree(8), 2048, 4, 512);
  std::vector<int64_t> ids;
  for (const auto& p : prompts) ids.push_back(b.add(p, greedy(24)));
  int64_t most_shared = 0;
  while (b.step()) most_shared = std::max(most_shared, b.kv_figures().shared);
  const int64_t whole = int64_t(common) / BatchSession::kKvBlockRows;
  // Three of the four took the common prefix's whole blocks instead of prefilling them.
  CHECK(b.counters().prefix_rows >= 3 * whole * BatchSession::kKvBlockRows);
  int64_t prompt_rows = 0;
  for (const auto& p : prompts) prompt_rows += int64_t(p.size());
  CHECK(b.counters().prefill_rows == prompt_rows - b.counters().prefix_rows);
  CHECK(most_shared >= whole);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const GenerationResult r = b.take(ids[i]);
    CHECK(r.tokens == generate_target_only(m.target, prompts[i], greedy(24)).tokens);
  }
  // Every block is back: the index alone holds what it knows, nothing is reserved.
  const KvFigures kv = b.kv_figures();
  CHECK(kv.used == kv.known);
  CHECK(kv.shared == 0);
}

TEST_CASE("shared prefix: a prompt diverging inside a block copies it before writing, and the block's owner is unchanged") {
  Models m("stories260K");
  const std::vector<int32_t> first = m.ids(kPrompts[0] + ". " + kPrompts[2] + ". " + kPrompts[3]);
  REQUIRE(first.size() > 40);
  // The same first 20 tokens (block 0 whole, 4 tokens into block 1), then others.
  std::vector<int32_t> second(first.begin(), first.begin() + 20);
  const std::vector<int32_t> tail = m.ids(kPrompts[1]);
  second.insert(second.end(), tail.begin() + 1, tail.end());
  BatchSession b(m.target, nullptr, std::nullopt, 1024, 2, 512);
  const int64_t a = b.add(first, greedy(16));
  b.run();
  const GenerationResult ra = b.take(a);
  const int64_t used_before = b.kv_figures().used;
  const int64_t s = b.add(second, greedy(16));
  CHECK(b.counters().prefix_rows == 20);  // the partial block taken too
  b.run();
  CHECK(b.take(s).tokens == generate_target_only(m.target, second, greedy(16)).tokens);
  CHECK(b.kv_figures().used > used_before);  // the copy, and the new blocks it filled
  // The first prompt again: it takes its own blocks back, unchanged by the copy.
  const int64_t again = b.add(first, greedy(16));
  CHECK(b.counters().prefix_rows >= 20 + int64_t(first.size()) / BatchSession::kKvBlockRows * BatchSession::kKvBlockRows);
  b.run();
  CHECK(b.take(again).tokens == ra.tokens);
  CHECK(ra.tokens == generate_target_only(m.target, first, greedy(16)).tokens);
}

TEST_CASE("kv pool: blocks are accounted for under cancellation, and a full pool makes a request wait") {
  Models m("stories260K");
  // Room for two sequences of 96 positions.
  BatchSession b(m.target, &m.draft, chain(4), 96, 4, 64, 192);
  const std::vector<int32_t> p0 = m.ids(kPrompts[0]), p1 = m.ids(kPrompts[2]);
  CHECK(b.has_room(p0, 60));
  const int64_t x = b.add(p0, greedy(60));
  const int64_t y = b.add(p1, greedy(60));
  CHECK_FALSE(b.has_room(p0, 60));  // the pool is promised to the two running
  CHECK_THROWS_AS(b.has_room(std::vector<int32_t>(10, 1), 200), Error);  // never fits: refused, not queued
  for (int i = 0; i < 3; ++i) b.step();
  b.take(y);  // a client gone mid-answer
  CHECK(b.has_room(p0, 60));
  const int64_t z = b.add(p1, greedy(60));
  b.run();
  CHECK(b.take(x).tokens == generate_target_only(m.target, p0, greedy(60)).tokens);
  CHECK(b.take(z).tokens == generate_target_only(m.target, p1, greedy(60)).tokens);
  const KvFigures kv = b.kv_figures();
  CHECK(kv.used == kv.known);
  CHECK(kv.blocks == 12);
}

TEST_CASE("kv pool: a pool of exactly one request's blocks serves prompts one after another, sharing what it can") {
  Models m("stories260K");
  // 64 rows: each prompt, its answer and 6 scratch rows (chain 4) take 57 rows, 4 blocks:
  // the whole pool.
  BatchSession b(m.target, &m.draft, chain(4), 64, 1, 64, 64);
  for (int round = 0; round < 2; ++round)
    for (const std::string& p : kPrompts) {
      const std::vector<int32_t> ids = m.ids(p);
      CAPTURE(p);
      // Every prompt starts with BOS: a block known in part, which the pool has no room
      // to copy beside a whole request's blocks: it is not taken, and the request fits.
      const int64_t n = 57 - 6 - int64_t(ids.size());
      REQUIRE(b.has_room(ids, n));
      const int64_t id = b.add(ids, greedy(n));
      b.run();
      CHECK(b.take(id).tokens == generate_target_only(m.target, ids, greedy(n)).tokens);
    }
  CHECK(b.kv_figures().used == b.kv_figures().known);
}

TEST_CASE("batch session: a prompt prefilled in chunks counts one pass that produced tokens, so tau is at least 1") {
  Models m("stories260K");
  GenerateOptions opt;
  opt.n_predict = 2;
  opt.ignore_eos = true;
  // 4-row chunks: each prompt takes several passes before its first token.
  const std::vector<GenerationResult> got = run_batch(m, std::nullopt, opt, /*alone=*/true, /*prefill_rows=*/4);
  for (const GenerationResult& r : got) {
    CHECK(r.tokens.size() == 2);
    CHECK(r.stats.passes.size() > r.stats.target_passes);  // the chunks before the last emitted nothing
    CHECK(r.stats.target_passes == 2);                      // the prompt's last chunk, then one decode pass
    CHECK(r.stats.tau() >= 1.0);
  }
}
