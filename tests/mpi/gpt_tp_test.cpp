// The GPT under tensor parallelism (src/model/gpt.h, docs/PARALLEL.md §3) with real ranks: ctest
// starts this binary under mpirun on 2 ranks (one TP group of 2) and on 4 (two TP groups of 2,
// each with its own data). For each of the four GPTs (learned or rotary positions, tied or
// untied head) every rank builds the tp = 1 model and its shard of the tp = 2 model from the
// same weights, runs one forward and backward of the same batch (some targets ignored) on each,
// and compares the losses, this rank's logit columns and every gradient (each rank's shard
// against the same shard cut from tp = 1's whole gradient). init_weights is checked to give
// every layout the same model, exactly.
//
// What may differ, and the limits (measured: the "[rank r] ..." lines this test prints, and the
// same checks on 16 batches, seeds 1000..1015, for the worst cases quoted):
//  - fp32 storage (GptT<float>, nothing rounded to bf16): only the fp32 summation order, where
//    the row-parallel GEMMs, the column-parallel input gradients and the vocab-parallel loss's
//    Σ exp are two partial sums added by the all-reduce instead of one sum. Measured over the
//    four GPTs: losses <= 1.1e-8 relative, logits <= 1.8e-7 and gradients <= 5.8e-7 of their
//    norms. Limits 1e-6 (loss) and 1e-5 (logits, each gradient tensor).
//  - bf16 storage: each of those (N, C) sums is two bf16-rounded partials added and rounded
//    again where tp = 1 rounds once, so elements differ by about one bf16 rounding (2^-9
//    relative), and every later activation and gradient inherits that. This is the bf16
//    model's own noise level: the same tp = 1 model in bf16 differs from itself in fp32 by up
//    to 2.5e-5 in the loss, 4.5e-3 in the logits and 1.05e-2 of a gradient tensor's norm on
//    these batches. Measured TP vs tp = 1: losses <= 4e-5 relative, logits <= 5.6e-3, gradients
//    <= 1.3e-2. Limits 2e-4 and 2e-2 (eight and two times the bf16 noise).
//  - A failure the limits catch, measured by breaking the model on purpose: fc2's bias added on
//    both TP ranks instead of rank 0 only (src/model/gpt.cpp) fails every gradient tensor of
//    every variant on both ranks. fp32: losses 8e-4 .. 3e-3 relative (800 .. 3000 times the
//    limit), logits 0.24 .. 0.35, gradients 0.043 .. 0.45 of their norms (4e3 .. 4.5e4 times
//    the limit). bf16: the same moves, 4 .. 15, 12 .. 17 and 2.2 .. 22 times its limits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "model/gpt.h"
#include "tp_test_support.h"

namespace collage {
namespace {

using namespace tp_test;

constexpr uint64_t kInitSeed = 4321;

// Two layers, C 64, 4 heads (2 per rank), head size 16, F 256. The vocabulary (300) pads to
// 384 at tp = 1 and 512 at tp = 2, so rank 1 holds 44 real rows and 212 padding rows.
ModelConfig tiny_config(const std::string& positions, bool tied) {
  ModelConfig c;
  c.n_layer = 2, c.hidden_size = 64, c.n_head = 4, c.ffn_hidden_size = 0;
  c.vocab_size = 300;
  c.max_position_embeddings = 40;
  c.position_embedding = positions;
  c.tie_embeddings = tied;
  return c;
}

// B sequences of T random tokens; the targets are the next tokens, every seventh ignored (-1).
struct Batch {
  int B = 3, T = 24;
  std::vector<int32_t> tokens, targets;
};

Batch make_batch(const ModelConfig& c, uint64_t seed) {
  Batch k;
  std::mt19937 rng{uint32_t(seed)};
  const int n = k.B * k.T;
  for (int i = 0; i < n; i++) k.tokens.push_back(int32_t(rng() % uint32_t(c.vocab_size)));
  for (int i = 0; i < n; i++) {
    const bool last = i % k.T == k.T - 1;
    k.targets.push_back(i % 7 == 3 ? -1
                        : last     ? int32_t(rng() % uint32_t(c.vocab_size))
                                   : k.tokens[i + 1]);
  }
  return k;
}

// One forward + backward (mean loss) of a model loaded with `params` (this rank's values,
// memory order) on a fresh cpu backend; the logits are (B·T, Vp/tp), this rank's columns.
struct ModelRun : TpRun {
  double loss_sum = 0;
  int64_t loss_count = 0;
};

template <typename S>
ModelRun run(const ModelConfig& config, const Batch& k, ParallelLayout layout, Comm* comm,
             const std::vector<float>& params) {
  std::unique_ptr<BackendT<S>> backend = cpu_backend<S>();
  // micro_batch B + 1: a forward of fewer sequences than the model was planned for; memory
  // multiple 64: zeros behind the parameters, as ZeRO-1 asks.
  GptT<S> model(config, *backend, k.B + 1, k.T, layout, comm, /*memory_multiple=*/64);
  model.load_parameters(params.data());
  model.zero_gradients();
  const auto loss = model.forward(k.tokens.data(), k.targets.data(), k.B);
  model.backward(float(1.0 / double(loss.count)));
  model.all_reduce_replicated_gradients();
  ModelRun r;
  r.loss_sum = loss.sum, r.loss_count = loss.count;
  read_back(model, *backend, model.logits(),
            int64_t{k.B} * k.T * (config.padded_vocab(layout.tp) / layout.tp), r);
  return r;
}

// What init_weights(kInitSeed) gives this rank (table order), and the rank's table.
template <typename S>
std::vector<float> initial_params(const ModelConfig& config, const Batch& k, ParallelLayout layout,
                                  Comm* comm, std::vector<ParameterInfo>* table) {
  auto backend = cpu_backend<S>();
  GptT<S> model(config, *backend, k.B, k.T, layout, comm);
  model.init_weights(kInitSeed);
  std::vector<float> params(size_t(model.num_parameters()));
  model.save_parameters(params.data());
  *table = model.parameters();
  return params;
}

template <typename S>
void check_tensor_parallel_matches_one_rank(const std::string& positions, bool tied,
                                            const Limits& limits) {
  CommGroups groups = make_mpi_comm_groups(2);
  Comm& tp_comm = *groups.tensor_parallel;
  const ParallelLayout layout{2, tp_comm.rank()};
  const ModelConfig config = tiny_config(positions, tied);
  // Each TP group (data-parallel replica) its own batch: the groups must not interfere.
  const Batch k = make_batch(config, 1000 + uint64_t(world_rank() / 2));

  // init_weights gives every layout the same model: each rank's shard of tp = 1's, exactly.
  std::vector<ParameterInfo> table_one, table_two;
  const std::vector<float> init_one = initial_params<S>(config, k, {}, nullptr, &table_one);
  const std::vector<float> init_two = initial_params<S>(config, k, layout, &tp_comm, &table_two);
  EXPECT_TRUE(init_two == shards_of_whole_memory(init_one, table_one, table_two, layout))
      << "init_weights depends on the tensor-parallel layout";
  const std::vector<float> params_one = perturbed(init_one, table_one);
  const std::vector<float> params_two =
      shards_of_whole_memory(params_one, table_one, table_two, layout);

  const ModelRun one = run<S>(config, k, {}, nullptr, params_one);
  const ModelRun two = run<S>(config, k, layout, &tp_comm, params_two);

  // The model's own numbers: planned activations, padded memory, replicated tensors behind.
  EXPECT_EQ(two.activation_bytes,
            GptT<S>::planned_activation_bytes(config, k.B + 1, k.T, /*tp=*/2));
  ASSERT_NO_FATAL_FAILURE(check_memory_layout(two));

  // The loss: the same targets counted, the sum within the limit.
  ASSERT_EQ(two.loss_count, one.loss_count);
  EXPECT_EQ(one.loss_count,
            std::count_if(k.targets.begin(), k.targets.end(), [](int32_t t) { return t >= 0; }));
  EXPECT_NEAR(two.loss_sum, one.loss_sum, limits.loss * one.loss_sum) << "loss sum";
  // Every TP rank returns the same (global) loss, bit for bit.
  const double mine[2] = {two.loss_sum, double(two.loss_count)};
  EXPECT_TRUE(same_on_every_tp_rank(tp_comm, mine)) << "the TP ranks disagree on the loss";

  // This rank's logit columns: the real vocabulary's as tp = 1's, the padding's zero.
  const int64_t N = int64_t{k.B} * k.T, Vp_one = config.padded_vocab();
  const int64_t Vl = config.padded_vocab(2) / 2, first = layout.tp_rank * Vl;
  const int64_t real = std::clamp<int64_t>(config.vocab_size - first, 0, Vl);
  std::vector<float> got_logits, want_logits;
  for (int64_t row = 0; row < N; row++) {
    for (int64_t j = 0; j < Vl; j++) {
      const float x = two.logits[row * Vl + j];
      if (j >= real) {
        ASSERT_EQ(x, 0.0f) << "padding logit " << first + j << " of row " << row;
        continue;
      }
      got_logits.push_back(x);
      want_logits.push_back(one.logits[row * Vp_one + first + j]);
    }
  }
  const double logits_error =
      relative_error(got_logits.data(), want_logits.data(), int64_t(got_logits.size()));
  EXPECT_LT(logits_error, limits.grad) << "logits (rank " << layout.tp_rank << ")";

  // Every gradient within the limit.
  WorstGradient worst;
  ASSERT_NO_FATAL_FAILURE(check_gradients(one, two, layout, config.vocab_size,
                                          {"wte.weight", "lm_head.weight"}, limits.grad, &worst));
  std::printf("[rank %d] %s %s %s: loss %.3g relative, logits %.3g, worst gradient %.3g (%s)\n",
              world_rank(), positions.c_str(), tied ? "tied" : "untied",
              std::is_same_v<S, bf16> ? "bf16" : "fp32",
              std::abs(two.loss_sum - one.loss_sum) / one.loss_sum, logits_error, worst.error,
              worst.name.c_str());

  check_replicated_gradients_agree(two, tp_comm);
}

constexpr Limits kFp32{1e-6, 1e-5}, kBf16{2e-4, 2e-2};

TEST(GptTensorParallel, LearnedTiedFp32MatchesOneRank) {
  check_tensor_parallel_matches_one_rank<float>("learned", true, kFp32);
}
TEST(GptTensorParallel, LearnedUntiedFp32MatchesOneRank) {
  check_tensor_parallel_matches_one_rank<float>("learned", false, kFp32);
}
TEST(GptTensorParallel, RopeTiedFp32MatchesOneRank) {
  check_tensor_parallel_matches_one_rank<float>("rope", true, kFp32);
}
TEST(GptTensorParallel, RopeUntiedFp32MatchesOneRank) {
  check_tensor_parallel_matches_one_rank<float>("rope", false, kFp32);
}
TEST(GptTensorParallel, LearnedTiedBf16MatchesOneRank) {
  check_tensor_parallel_matches_one_rank<bf16>("learned", true, kBf16);
}
TEST(GptTensorParallel, LearnedUntiedBf16MatchesOneRank) {
  check_tensor_parallel_matches_one_rank<bf16>("learned", false, kBf16);
}
TEST(GptTensorParallel, RopeTiedBf16MatchesOneRank) {
  check_tensor_parallel_matches_one_rank<bf16>("rope", true, kBf16);
}
TEST(GptTensorParallel, RopeUntiedBf16MatchesOneRank) {
  check_tensor_parallel_matches_one_rank<bf16>("rope", false, kBf16);
}

}  // namespace
}  // namespace collage
