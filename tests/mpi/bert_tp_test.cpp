// BERT and RoBERTa under tensor parallelism (src/model/bert.h) with real ranks: ctest starts this
// binary under mpirun on 2 ranks (one TP group of 2) and on 4 (two TP groups of 2, each with its
// own data). Every rank builds the tp = 1 model and its shard of the tp = 2 model from the same
// weights, runs one forward and backward of the same padded batch with dropout 0.1 on each, and
// compares the losses, the MLM and NSP correct counts and every gradient (each rank's shard
// against the same shard cut from tp = 1's whole gradient). init_weights is checked to give
// every layout the same model, exactly.
//
// What may differ, and the limits (measured: the "[rank r] ..." lines this test prints):
//  - fp32 storage (BertT<float>, nothing rounded to bf16): only the fp32 summation order, where
//    the row-parallel GEMMs and the column-parallel input gradients are two partial sums added by
//    the all-reduce instead of one sum. Measured: losses <= 2e-8 relative, gradients <= 5e-7 of
//    each tensor's norm. Limits 1e-6 and 1e-5.
//  - bf16 storage: each of those (N, C) sums is two bf16-rounded partials added and rounded
//    again where tp = 1 rounds once, so elements differ by about one bf16 rounding (2^-9
//    relative), and every later activation and gradient inherits that. This is the bf16 model's
//    own noise level: the same tp = 1 model in bf16 differs from itself in fp32 by up to 7e-5 in
//    the MLM loss and 1.2e-2 of a gradient tensor's norm on these batches. Measured TP vs
//    tp = 1: losses <= 2.5e-5 relative, gradients 3e-3 .. 1.1e-2. Limits 2e-4 and 2e-2 (about
//    three and two times the bf16 noise).
//  - Failures the limits catch, each measured by breaking the model on purpose: attention
//    dropout numbered by local heads 0.33 of a gradient's norm; proj or fc2 bias added on both
//    ranks 0.13; positions added before the word all-reduce 0.46; hidden dropout keyed per rank
//    0.61; a column-parallel input gradient not all-reduced 0.03 .. 1.1; replicated gradients
//    summed instead of averaged 1.0 (fp32 runs all fail these by orders of magnitude).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "dist/backend_choice.h"
#include "dist/staged_comm.h"
#include "model/bert.h"
#include "tp_test_support.h"

namespace collage {
namespace {

using namespace tp_test;

constexpr uint64_t kInitSeed = 1234, kDropoutSeed = 77, kDropoutIndex = 5;

// Two layers, C 64, 4 heads (2 per rank), F 256. BERT's vocabulary (300) pads to 384 at tp = 1
// and 512 at tp = 2, so rank 1 holds 44 real rows; RoBERTa's (200) pads to 256 either way.
ModelConfig tiny_config(const std::string& arch) {
  ModelConfig c;
  c.arch = arch;
  c.n_layer = 2, c.hidden_size = 64, c.n_head = 4, c.ffn_hidden_size = 0;
  c.vocab_size = arch == "bert" ? 300 : 200;
  c.max_position_embeddings = 40;
  c.type_vocab_size = arch == "bert" ? 2 : 1;
  c.pad_token_id = arch == "bert" ? 0 : 1;
  c.layernorm_eps = 1e-12f;
  c.hidden_dropout = 0.1f, c.attention_dropout = 0.1f;
  return c;
}

// A padded batch: sequence b has T − 3b − (0..2) real tokens, then padding; up to P labelled
// positions per sequence (fewer for later sequences, zero-padded as the HDF5 files hold them).
struct Batch {
  int B = 3, T = 24, P = 6;
  std::vector<int32_t> ids, mask, segments, positions, labels, nsp;
  BertInputs inputs() const {
    return {ids.data(),       mask.data(),   segments.data(),
            positions.data(), labels.data(), nsp.empty() ? nullptr : nsp.data()};
  }
};

Batch make_batch(const ModelConfig& c, uint64_t seed) {
  Batch k;
  std::mt19937 rng{uint32_t(seed)};
  auto uniform = [&](int lo, int hi) { return lo + int(rng() % uint32_t(hi - lo)); };  // [lo, hi)
  const int B = k.B, T = k.T, P = k.P;
  k.ids.assign(B * T, c.pad_token_id), k.mask.assign(B * T, 0), k.segments.assign(B * T, 0);
  k.positions.assign(B * P, 0), k.labels.assign(B * P, 0);
  for (int b = 0; b < B; b++) {
    const int length = T - 3 * b - uniform(0, 3);
    for (int t = 0; t < length; t++) {
      k.ids[b * T + t] = t == 0 ? 2 : uniform(3, c.vocab_size);
      k.mask[b * T + t] = 1;
      if (c.type_vocab_size > 1 && t >= length / 2) k.segments[b * T + t] = 1;
    }
    std::vector<int32_t> candidates(length - 1);
    for (int t = 1; t < length; t++) candidates[t - 1] = t;
    std::shuffle(candidates.begin(), candidates.end(), rng);
    const int labelled = P - b;
    std::sort(candidates.begin(), candidates.begin() + labelled);
    for (int j = 0; j < labelled; j++) {
      k.positions[b * P + j] = candidates[j];
      k.labels[b * P + j] = uniform(0, c.vocab_size);
    }
  }
  if (c.arch == "bert")
    for (int b = 0; b < B; b++) k.nsp.push_back(uniform(0, 2));
  return k;
}

// One forward + backward of a model loaded with `params` (this rank's values, memory order), on
// a fresh cpu backend unless `device` is given (then `comm` works on its memory). The logits
// are (M, Vp/tp), this rank's columns.
struct ModelRun : TpRun {
  double mlm_sum = 0, nsp_sum = 0;
  int64_t mlm_count = 0, nsp_count = 0, mlm_correct = 0, nsp_correct = 0;
};

template <typename S>
ModelRun run(const ModelConfig& config, const Batch& k, ParallelLayout layout, Comm* comm,
             const std::vector<float>& params, BackendT<S>* device = nullptr) {
  std::unique_ptr<BackendT<S>> cpu = device ? nullptr : cpu_backend<S>();
  BackendT<S>* backend = device ? device : cpu.get();
  // micro_batch B + 1: a forward of fewer sequences than the model was planned for; memory
  // multiple 64: zeros behind the parameters, as ZeRO-1 asks.
  BertT<S> model(config, *backend, k.B + 1, k.T, k.P, layout, comm, /*memory_multiple=*/64);
  model.load_parameters(params.data());
  model.zero_gradients();
  const auto loss = model.forward(k.inputs(), k.B, /*dropout=*/true, kDropoutSeed, kDropoutIndex);
  model.backward(float(1.0 / double(loss.mlm_count)),
                 loss.nsp_count ? float(1.0 / double(loss.nsp_count)) : 0.0f);
  model.all_reduce_replicated_gradients();
  ModelRun r;
  r.mlm_sum = loss.mlm_sum, r.mlm_count = loss.mlm_count;
  r.nsp_sum = loss.nsp_sum, r.nsp_count = loss.nsp_count;
  r.mlm_correct = model.mlm_correct(), r.nsp_correct = model.nsp_correct();
  read_back(model, *backend, model.mlm_logits(),
            loss.mlm_count * (config.padded_vocab(layout.tp) / layout.tp), r);
  return r;
}

// What init_weights(kInitSeed) gives this rank (memory order), and the rank's table.
template <typename S>
std::vector<float> initial_params(const ModelConfig& config, const Batch& k, ParallelLayout layout,
                                  Comm* comm, std::vector<ParameterInfo>* table) {
  auto backend = cpu_backend<S>();
  BertT<S> model(config, *backend, k.B, k.T, k.P, layout, comm);
  model.init_weights(kInitSeed);
  std::vector<float> params(size_t(model.num_parameters()));
  model.save_parameters(params.data());
  *table = model.parameters();
  return params;
}

// Labels that make the correct counts mean something and robust to rounding: the even labelled
// rows whose tp = 1 argmax leads the runner-up by a clear margin get that argmax as their label,
// the others the row's smallest logit (never the argmax). Labels do not change the logits.
template <typename S>
int relabel_by_argmax(const ModelConfig& config, const std::vector<float>& params, Batch& k) {
  const ModelRun first = run<S>(config, k, {}, nullptr, params);
  const int64_t Vp = config.padded_vocab(), V = config.vocab_size;
  int row = 0, argmax_rows = 0;
  for (int b = 0; b < k.B; b++) {
    for (int j = 0; j < k.P && k.positions[b * k.P + j] != 0; j++, row++) {
      const float* x = first.logits.data() + int64_t{row} * Vp;
      std::vector<float> sorted(x, x + V);
      std::sort(sorted.begin(), sorted.end());
      // The logits are within ±1, where a bf16 ulp is 0.004 at most: 0.02 is 5 ulps.
      const float gap = sorted[V - 1] - sorted[V - 2];
      const bool take_argmax = row % 2 == 0 && gap > 0.02f;
      k.labels[b * k.P + j] =
          int32_t((take_argmax ? std::max_element(x, x + V) : std::min_element(x, x + V)) - x);
      argmax_rows += take_argmax;
    }
  }
  return argmax_rows;
}

template <typename S>
void check_tensor_parallel_matches_one_rank(const std::string& arch, const Limits& limits) {
  CommGroups groups = make_mpi_comm_groups(2);
  Comm& tp_comm = *groups.tensor_parallel;
  const ParallelLayout layout{2, tp_comm.rank()};
  const ModelConfig config = tiny_config(arch);
  // Each TP group (data-parallel replica) its own batch: the groups must not interfere.
  Batch k = make_batch(config, 1000 + uint64_t(world_rank() / 2));

  // init_weights gives every layout the same model: each rank's shard of tp = 1's, exactly.
  std::vector<ParameterInfo> table_one, table_two;
  const std::vector<float> init_one = initial_params<S>(config, k, {}, nullptr, &table_one);
  const std::vector<float> init_two = initial_params<S>(config, k, layout, &tp_comm, &table_two);
  EXPECT_TRUE(init_two == shards_of_whole_memory(init_one, table_one, table_two, layout))
      << "init_weights depends on the tensor-parallel layout";
  const std::vector<float> params_one =
      perturbed(init_one, table_one, "mlm.decoder.bias", config.vocab_size);
  const std::vector<float> params_two =
      shards_of_whole_memory(params_one, table_one, table_two, layout);

  const int argmax_rows = relabel_by_argmax<S>(config, params_one, k);
  ASSERT_GE(argmax_rows, 3) << "the test batch should label a few rows with their argmax";
  const ModelRun one = run<S>(config, k, {}, nullptr, params_one);
  const ModelRun two = run<S>(config, k, layout, &tp_comm, params_two);

  // The model's own numbers: planned activations, padded memory, replicated tensors behind.
  EXPECT_EQ(two.activation_bytes,
            BertT<S>::planned_activation_bytes(config, k.B + 1, k.T, k.P, /*tp=*/2));
  ASSERT_NO_FATAL_FAILURE(check_memory_layout(two));

  // Losses and accuracy. The MLM counts are exact: every labelled row's tp = 1 argmax leads by
  // a margin, and is either its label or far from it.
  ASSERT_EQ(two.mlm_count, one.mlm_count);
  EXPECT_NEAR(two.mlm_sum, one.mlm_sum, limits.loss * one.mlm_sum) << "MLM loss sum";
  EXPECT_EQ(two.mlm_correct, one.mlm_correct);
  EXPECT_GE(one.mlm_correct, argmax_rows);
  EXPECT_EQ(two.nsp_count, one.nsp_count);
  if (arch == "bert") {
    EXPECT_NEAR(two.nsp_sum, one.nsp_sum, limits.loss * one.nsp_sum) << "NSP loss sum";
    EXPECT_EQ(two.nsp_correct, one.nsp_correct);
  }
  // Every TP rank returns the same (global) loss and counts, bit for bit.
  const double mine[4] = {two.mlm_sum, two.nsp_sum, double(two.mlm_correct),
                          double(two.nsp_correct)};
  EXPECT_TRUE(same_on_every_tp_rank(tp_comm, mine)) << "the TP ranks disagree on the loss";

  // Every gradient within the limit.
  WorstGradient worst;
  ASSERT_NO_FATAL_FAILURE(check_gradients(one, two, layout, config.vocab_size,
                                          {"embeddings.word.weight", "mlm.decoder.bias"},
                                          limits.grad, &worst));
  std::printf("[rank %d] %s %s: MLM loss %.3g relative, NSP %.3g, worst gradient %.3g (%s)\n",
              world_rank(), arch.c_str(), std::is_same_v<S, bf16> ? "bf16" : "fp32",
              std::abs(two.mlm_sum - one.mlm_sum) / one.mlm_sum,
              one.nsp_sum > 0 ? std::abs(two.nsp_sum - one.nsp_sum) / one.nsp_sum : 0.0,
              worst.error, worst.name.c_str());

  check_replicated_gradients_agree(two, tp_comm);
}

TEST(BertTensorParallel, BertFp32MatchesOneRank) {
  check_tensor_parallel_matches_one_rank<float>("bert", {1e-6, 1e-5});
}
TEST(BertTensorParallel, RobertaFp32MatchesOneRank) {
  check_tensor_parallel_matches_one_rank<float>("roberta", {1e-6, 1e-5});
}
TEST(BertTensorParallel, BertBf16MatchesOneRank) {
  check_tensor_parallel_matches_one_rank<bf16>("bert", {2e-4, 2e-2});
}
TEST(BertTensorParallel, RobertaBf16MatchesOneRank) {
  check_tensor_parallel_matches_one_rank<bf16>("roberta", {2e-4, 2e-2});
}

// Equal maxima in two shards: the argmax is the first column, as at tp = 1. Word rows 10 (TP
// rank 0's) and 400 (rank 1's) are zero with decoder bias 100, so every labelled row's logits
// are exactly 100 there and far below elsewhere; labels alternate 10 and 400, and only the 10s
// count. (Counting a target whenever its logit equals the row maximum would count them all.)
TEST(BertTensorParallel, AccuracyTiesResolveAcrossShardsAsOneRank) {
  CommGroups groups = make_mpi_comm_groups(2);
  Comm& tp_comm = *groups.tensor_parallel;
  const ParallelLayout layout{2, tp_comm.rank()};
  const ModelConfig config = tiny_config("bert");
  const int32_t first = 10, second = 400;  // global ids: shard 0 [0, 256), shard 1 [256, 512)
  ModelConfig wide = config;
  wide.vocab_size = 450;  // both ids real; pads to 512 at tp = 1 and tp = 2 alike
  Batch k = make_batch(wide, 7);
  int expected = 0, row = 0;
  for (int b = 0; b < k.B; b++)
    for (int j = 0; j < k.P && k.positions[b * k.P + j] != 0; j++, row++) {
      k.labels[b * k.P + j] = row % 2 == 0 ? first : second;
      expected += row % 2 == 0;
    }

  auto tied_params = [&](const ParallelLayout& at, Comm* comm) {
    std::vector<ParameterInfo> table;
    std::vector<float> params = initial_params<float>(wide, k, at, comm, &table);
    const ParameterInfo& word = find(table, "embeddings.word.weight");
    const ParameterInfo& bias = find(table, "mlm.decoder.bias");
    const int64_t rows = word.shape[0], begin = at.tp_rank * rows, C = wide.hidden_size;
    for (int32_t id : {first, second}) {
      if (id < begin || id >= begin + rows) continue;  // another rank's row
      std::fill_n(params.begin() + word.offset + (id - begin) * C, C, 0.0f);
      params[bias.offset + (id - begin)] = 100.0f;
    }
    return params;
  };
  const ModelRun one = run<float>(wide, k, {}, nullptr, tied_params({}, nullptr));
  const ModelRun two = run<float>(wide, k, layout, &tp_comm, tied_params(layout, &tp_comm));
  EXPECT_EQ(one.mlm_correct, expected);
  EXPECT_EQ(two.mlm_correct, expected);
}

// The emulated cuda backend at tp = 2 against the cpu at tp = 2, same weights and batch, dropout
// on: its attention kernels run per sequence on offset slices there, and its Comm stages device
// buffers through the host. As tests/cuda/bert_test.cpp at tp = 1, the two differ only in the
// kernels' summation orders (measured: losses within 1.2e-8 relative, gradients within 1.2e-4
// of a tensor's norm); limits as there, 1e-5 of the losses and 1e-3 of each gradient's norm.
// As there the cpu runs its OpenBLAS engine: the model's small heads run the SIMT attention
// kernels, whose probabilities stay fp32 as that engine's do (docs/ARCHITECTURE.md, "cpu
// attention").
TEST(BertTensorParallel, EmulatedCudaFollowsTheCpu) {
  CommGroups groups = make_mpi_comm_groups(2);
  Comm& tp_comm = *groups.tensor_parallel;
  const ParallelLayout layout{2, tp_comm.rank()};
  for (const std::string arch : {"bert", "roberta"}) {
    SCOPED_TRACE(arch);
    const ModelConfig config = tiny_config(arch);
    const Batch k = make_batch(config, 2000 + uint64_t(world_rank() / 2));
    std::vector<ParameterInfo> table;
    const std::vector<float> params =
        perturbed(initial_params<bf16>(config, k, layout, &tp_comm, &table), table,
                  "mlm.decoder.bias", config.vocab_size);
    auto emulated = make_cuda_emulated_backend();
    auto staged = make_staged_comm(tp_comm, *emulated);
    auto cpu = make_cpu_backend(1, "openblas");  // fp32 probabilities, as the SIMT kernels
    const ModelRun want = run<bf16>(config, k, layout, &tp_comm, params, cpu.get());
    const ModelRun got = run<bf16>(config, k, layout, staged.get(), params, emulated.get());
    EXPECT_NEAR(got.mlm_sum, want.mlm_sum, 1e-5 * want.mlm_sum);
    EXPECT_NEAR(got.nsp_sum, want.nsp_sum, 1e-5 * want.nsp_sum);
    EXPECT_EQ(got.mlm_correct, want.mlm_correct);
    EXPECT_EQ(got.nsp_correct, want.nsp_correct);
    double worst = 0;
    for (const ParameterInfo& info : table) {
      const double error = relative_error(got.grads.data() + info.offset,
                                          want.grads.data() + info.offset, info.numel);
      EXPECT_LT(error, 1e-3) << info.name;
      worst = std::max(worst, error);
    }
    std::printf(
        "[rank %d] %s cuda-emulated vs cpu at tp 2: MLM loss %.3g relative, worst "
        "gradient %.3g\n",
        world_rank(), arch.c_str(), std::abs(got.mlm_sum - want.mlm_sum) / want.mlm_sum, worst);
  }
}

// The constructor's checks name what is wrong.
TEST(BertTensorParallel, ConstructorRefusesBadLayouts) {
  CommGroups groups = make_mpi_comm_groups(2);
  auto backend = make_cpu_backend_fp32(1);
  auto message = [&](ModelConfig config, ParallelLayout layout, Comm* comm) -> std::string {
    try {
      BertT<float> model(config, *backend, 2, 16, 4, layout, comm);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const ModelConfig config = tiny_config("bert");
  EXPECT_NE(message(config, {2, 0}, nullptr).find("needs the tensor-parallel group's Comm"),
            std::string::npos);
  EXPECT_NE(message(config, {2, 2}, groups.tensor_parallel.get()).find("tensor-parallel rank 2"),
            std::string::npos);
  EXPECT_NE(message(config, {8, 0}, nullptr).find("model.n_head"), std::string::npos);  // 4 heads
  ModelConfig odd_ffn = config;
  odd_ffn.ffn_hidden_size = 255;
  EXPECT_NE(message(odd_ffn, {2, 0}, groups.tensor_parallel.get()).find("model.ffn_hidden_size"),
            std::string::npos);
  EXPECT_EQ(message(config, {2, groups.tensor_parallel->rank()}, groups.tensor_parallel.get()), "");
}

}  // namespace
}  // namespace collage
