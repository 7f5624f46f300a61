#include "engine/session.h"

#include <algorithm>

#include "core/error.h"
#include "model/model.h"

namespace flashspec {

int64_t Session::scratch_rows(const std::optional<SpeculationParams>& policy) {
  return 2 + (policy ? policy->max_verified() : 0);
}

Session::Session(Model& target, Model* draft, std::optional<SpeculationParams> policy,
                 int64_t capacity, const BudgetPolicy* learned)
    : pipeline_(target, draft, policy, learned), run_(std::make_unique<SequenceRun>()) {
  run_->cache.emplace(target.make_cache(capacity));
  pipeline_.equip(*run_, capacity, /*pre_grow=*/true);
}

void Session::reset() {
  run_->cache->truncate(0);
  run_->seq.clear();
  if (run_->drafter) run_->drafter->reset();
  if (run_->mtp) run_->mtp->reset();
}

void Session::rewind(int64_t n) {
  std::vector<int32_t>& seq = run_->seq;
  if (n < 0 || n > int64_t(seq.size())) throw Error("internal: rewinding a session past its sequence");
  seq.resize(size_t(n));
  if (seq.empty()) return reset();
  run_->cache->truncate(std::min(run_->cache->committed(), n));  // every kept token keeps its row
  if (run_->drafter) run_->drafter->sync(seq);
  if (run_->mtp) run_->mtp->sync(seq);
}

void Session::resync() {
  SequenceCache& cache = *run_->cache;
  const int64_t keep = std::min<int64_t>(cache.committed(), int64_t(run_->seq.size()) - 1);
  cache.truncate(std::max<int64_t>(keep, 0));
  if (run_->drafter && !run_->seq.empty()) run_->drafter->sync(run_->seq);
  if (run_->mtp) run_->mtp->sync(run_->seq);
}

GenerationResult Session::generate(std::span<const int32_t> input, const GenerateOptions& opt) {
  SequenceRun& run = *run_;
  SequenceCache& cache = *run.cache;
  if (run.seq.empty() && input.empty())
    throw Error("prompt: it tokenized to nothing (empty prompt without BOS)");
  const int64_t need = int64_t(run.seq.size() + input.size()) + opt.n_predict + scratch_rows(pipeline_.policy());
  if (need > cache.capacity())
    throw Error("context full: " + std::to_string(run.seq.size() + input.size()) + " tokens plus " +
                std::to_string(opt.n_predict) + " to generate exceed the context size " +
                std::to_string(cache.capacity() - scratch_rows(pipeline_.policy())) + " (raise --ctx)");
  run.seq.insert(run.seq.end(), input.begin(), input.end());
  // The last token's row must be computed to have the logits that follow it.
  if (cache.committed() >= int64_t(run.seq.size())) cache.truncate(int64_t(run.seq.size()) - 1);
  run.begin(opt);
  // One pass over every row not computed yet, then one per tree.
  run.prefill = int64_t(run.seq.size()) - cache.committed();
  run.result.stats.prompt_tokens = run.prefill;
  pipeline_.run_pass({&run}, {});
  while (!run.done) pipeline_.run_pass({}, {&run});
  resync();
  if (opt.constraint)
    if (const std::exception_ptr failed = opt.constraint->failure()) std::rethrow_exception(failed);
  return std::move(run.result);
}

}  // namespace flashspec
