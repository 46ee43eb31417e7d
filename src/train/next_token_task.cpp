// The next-token training task (training_task.h) of a causal language model such as the GPT:
// (seq_len + 1)-token windows from the Megatron datasets of training_data.h, Megatron's
// pretraining sampler over the data-parallel ranks, the next-token loss averaged over every
// token of the global batch.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "config/architecture.h"
#include "data/megatron/pretraining_sampler.h"
#include "model/model_family.h"
#include "plan/memory_plan.h"
#include "train/training_data.h"
#include "train/training_task.h"

namespace collage {
namespace {

class NextTokenTask : public TrainingTask {
 public:
  NextTokenTask(const Config& config, Backend& backend, ParallelRun& parallel)
      : config_(config), parallel_(parallel), layout_(parallel.layout()) {
    const TrainingConfig& tc = config.training;
    const int B = tc.micro_batch_size, T = config.data.seq_len;
    const int64_t eval_count = tc.eval_interval > 0 ? tc.max_steps / tc.eval_interval + 1 : 1;
    parallel.lead_rank_first([&] {
      data_ = load_training_data(config, tc.max_steps * tc.global_batch_size,
                                 std::max<int64_t>(1, int64_t(tc.eval_iters) * B * eval_count));
    });
    model_ = make_causal_lm(config.model, backend, model_shape(config),
                            {ParallelLayout{layout_.tp, layout_.tp_rank}, &parallel.tp(),
                             zero_memory_multiple(layout_.dp, layout_.zero)});
    window_.resize(T + 1);
    tokens_.resize(int64_t(B) * T);
    targets_.resize(int64_t(B) * T);
  }

  TrainableModel& model() override { return *model_; }
  std::string data_summary() const override { return data_.summary; }
  double tokens_per_step() const override {
    return double(config_.training.global_batch_size) * config_.data.seq_len;
  }

  TaskFigures train_step(int64_t consumed_samples) override {
    const int B = config_.training.micro_batch_size;
    const int micro_batches = config_.training.global_batch_size / (B * layout_.dp);
    const float dloss = float(1.0 / tokens_per_step());  // mean over the global batch's tokens
    model_->zero_gradients();
    double loss_sum = 0;
    for (int micro = 0; micro < micro_batches; micro++) {
      load_batch(data_.train, micro_batch_sample_indices(consumed_samples, B, layout_.dp,
                                                         layout_.dp_rank, data_.train.size));
      consumed_samples += int64_t(B) * layout_.dp;
      loss_sum += model_->forward(batch(), B).sum;
      model_->backward(dloss);
    }
    parallel_.host_dp().all_reduce_sum(&loss_sum, 1);
    return {loss_sum / tokens_per_step(), nlohmann::json::object(), ""};
  }

  // Validation batch i is samples [i·B, (i+1)·B) of the valid split, whatever the layout;
  // data-parallel rank r evaluates the batches i ≡ r (mod dp) and the sums are reduced.
  TaskFigures validate() override { return validate_batches(config_.training.eval_iters); }

  TaskFigures validate_batches(int batches) override {
    const int B = config_.training.micro_batch_size;
    double sums[2] = {0, 0};  // Σ token losses, token count
    for (int i = layout_.dp_rank; i < batches; i += layout_.dp) {
      std::vector<int64_t> indices(B);
      for (int b = 0; b < B; b++) indices[b] = int64_t(i) * B + b;
      load_batch(data_.valid, indices);
      const CausalLanguageModel::Loss loss = model_->forward(batch(), B);
      sums[0] += loss.sum;
      sums[1] += double(loss.count);
    }
    parallel_.host_dp().all_reduce_sum(sums, 2);
    return {sums[0] / std::max(sums[1], 1.0), nlohmann::json::object(), ""};
  }

 private:
  Batch batch() const { return {.input_ids = tokens_.data(), .targets = targets_.data()}; }

  // Fills tokens/targets (B, T) from samples `indices` of a split.
  void load_batch(const SampleSet& split, const std::vector<int64_t>& indices) {
    const int T = config_.data.seq_len;
    for (size_t b = 0; b < indices.size(); b++) {
      split.get(indices[b] % split.size, window_.data());
      std::copy(window_.begin(), window_.begin() + T, tokens_.begin() + int64_t(b) * T);
      std::copy(window_.begin() + 1, window_.end(), targets_.begin() + int64_t(b) * T);
    }
  }

  const Config& config_;
  ParallelRun& parallel_;
  const RankLayout& layout_;
  TrainingData data_;
  std::unique_ptr<CausalLanguageModel> model_;
  std::vector<int32_t> window_, tokens_, targets_;  // (T + 1), (B, T), (B, T)
};

}  // namespace

std::unique_ptr<TrainingTask> make_next_token_task(const Config& config, Backend& backend,
                                                   ParallelRun& parallel) {
  return std::make_unique<NextTokenTask>(config, backend, parallel);
}

std::unique_ptr<TrainingTask> make_training_task(const Config& config, Backend& backend,
                                                 ParallelRun& parallel) {
  switch (architecture(config.model).objective) {
    case Objective::next_token:
      return make_next_token_task(config, backend, parallel);
    case Objective::masked_lm:
      return make_masked_lm_task(config, backend, parallel);
  }
  fail("model.arch {}: no training task", config.model.arch);
}

}  // namespace collage
