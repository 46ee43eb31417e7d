// `collage plan`: its numbers are the trainer's real allocations (a model and optimizer are
// constructed and compared, for every strategy), the bytes per parameter of docs/PRECISION.md
// §6, the per-rank shard sizes at tensor-parallel t, the largest micro-batch that fits, and the
// command line end to end.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <map>
#include <string>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "config/config.h"
#include "model/gpt.h"
#include "optim/optimizer.h"
#include "plan/kernel_costs.h"
#include "plan/memory_plan.h"
#include "plan/model_flops.h"
#include "run_collage.h"

namespace collage {
namespace {

constexpr Precision kAll[] = {Precision::fp32_master,  Precision::bf16,  Precision::collage_light,
                              Precision::collage_plus, Precision::kahan, Precision::stochastic};

Config small_config(const std::string& model_yaml, Precision precision, int micro_batch) {
  Config c = parse_config("model: " + model_yaml +
                              "\ndata: {datasets: x, seq_len: 24}\n"
                              "training: {micro_batch_size: " +
                              std::to_string(micro_batch) + ", global_batch_size: 12}\n",
                          "small.yaml");
  c.optimizer.precision = precision;
  return c;
}

void expect_same(const MemoryReport& planned, const MemoryReport& real) {
  EXPECT_EQ(planned.parameters, real.parameters);
  EXPECT_EQ(planned.parameter_bytes, real.parameter_bytes);
  EXPECT_EQ(planned.gradient_bytes, real.gradient_bytes);
  EXPECT_EQ(planned.state_bytes, real.state_bytes);
  ASSERT_EQ(planned.state.size(), real.state.size());
  for (size_t i = 0; i < planned.state.size(); i++) {
    EXPECT_EQ(planned.state[i].name, real.state[i].name);
    EXPECT_EQ(planned.state[i].bytes, real.state[i].bytes);
  }
  EXPECT_EQ(planned.activation_bytes, real.activation_bytes);
  EXPECT_EQ(planned.total_bytes(), real.total_bytes());
}

TEST(Plan, EqualsTheAllocationsOfARealModelAndOptimizer) {
  auto backend = make_cpu_backend(1);
  for (const char* model :
       {"{n_layer: 2, hidden_size: 48, n_head: 4, vocab_size: 300, max_position_embeddings: 32}",
        "{n_layer: 3, hidden_size: 32, n_head: 2, vocab_size: 77, position_embedding: rope, "
        "tie_embeddings: false, ffn_hidden_size: 72}"}) {
    for (Precision p : kAll) {
      for (int micro_batch : {1, 3}) {
        SCOPED_TRACE(std::string(model) + " " + precision_name(p) +
                     " B=" + std::to_string(micro_batch));
        const Config c = small_config(model, p, micro_batch);
        GPT gpt(c.model, *backend, micro_batch, c.data.seq_len);
        Optimizer optimizer(c.optimizer, *backend, {{0, gpt.num_parameters(), true}},
                            gpt.parameter_memory(), gpt.gradient_memory(), gpt.num_parameters());
        expect_same(plan_memory(c, 1, 1, micro_batch), measure_memory(gpt, optimizer));
      }
    }
  }
}

// docs/PRECISION.md §6: weights + grads + optimizer state, bytes per parameter.
TEST(Plan, BytesPerParameterOfEveryStrategyMatchTheCollageTable) {
  const std::map<Precision, double> table = {
      {Precision::bf16, 8},   {Precision::collage_light, 10}, {Precision::collage_plus, 12},
      {Precision::kahan, 10}, {Precision::stochastic, 8},     {Precision::fp32_master, 16}};
  Config big = load_config(std::string(COLLAGE_SOURCE_DIR) + "/configs/gpt/6.7b.yaml");
  auto backend = make_cpu_backend(1);
  for (Precision p : kAll) {
    SCOPED_TRACE(precision_name(p));
    big.optimizer.precision = p;
    EXPECT_EQ(plan_memory(big, 8, 1, 1).bytes_per_parameter(), table.at(p));
    const Config c = small_config("{n_layer: 1, hidden_size: 16, n_head: 2, vocab_size: 50}", p, 1);
    GPT gpt(c.model, *backend, 1, c.data.seq_len);
    Optimizer optimizer(c.optimizer, *backend, {{0, gpt.num_parameters(), true}},
                        gpt.parameter_memory(), gpt.gradient_memory(), gpt.num_parameters());
    EXPECT_EQ(measure_memory(gpt, optimizer).bytes_per_parameter(), table.at(p));
  }
}

// Per-rank parameters of a learned-position, tied GPT split t ways, counted from the
// architecture (docs/PARALLEL.md §3): vocab-parallel embedding, column-parallel qkv/fc1 (with
// their biases), row-parallel proj/fc2 (full biases), replicated layernorms and positions.
int64_t shard_parameters(int64_t L, int64_t C, int64_t V, int64_t T, int64_t t) {
  const int64_t Vp = (V + 128 * t - 1) / (128 * t) * (128 * t);
  const int64_t layer = 2 * C + (3 * C * C + 3 * C) / t + C * C / t + C + 2 * C +
                        (4 * C * C + 4 * C) / t + 4 * C * C / t + C;
  return Vp / t * C + T * C + L * layer + 2 * C;
}

TEST(Plan, ShardsParametersGradientsAndStateOverTensorAndDataParallelRanks) {
  Config big = load_config(std::string(COLLAGE_SOURCE_DIR) + "/configs/gpt/6.7b.yaml");
  big.optimizer.precision = Precision::collage_plus;
  EXPECT_EQ(plan_memory(big, 1, 1, 1).parameters, 6658596864);  // 6658.60 M: GPT-3 6.7B
  for (int t : {1, 2, 8}) {
    const MemoryReport r = plan_memory(big, t, 1, 1);
    EXPECT_EQ(r.parameters, shard_parameters(32, 4096, 50257, 2048, t)) << t;
    EXPECT_EQ(r.parameter_bytes, size_t(r.parameters) * 2);
    EXPECT_EQ(r.gradient_bytes, size_t(r.parameters) * 2);
  }
  // ZeRO-1 over 4 data-parallel ranks: the parameter memory padded to 4 shards of a multiple of
  // 64 elements, each rank holding one shard of every state component.
  const MemoryReport one = plan_memory(big, 8, 1, 1);
  Config zero = big;
  zero.parallel.zero = 1;
  const MemoryReport four = plan_memory(zero, 8, 4, 1);
  const size_t elements = (size_t(one.parameters) + 4 * 64 - 1) / (4 * 64) * (4 * 64);
  EXPECT_TRUE(four.zero);
  EXPECT_EQ(four.parameter_bytes, elements * 2);
  for (size_t i = 0; i < one.state.size(); i++) EXPECT_EQ(four.state[i].bytes, elements / 4 * 2);
  EXPECT_NEAR(four.bytes_per_parameter(), 4 + 8.0 / 4, 1e-6);
  // Without ZeRO every data-parallel rank holds the whole state.
  const MemoryReport replicated = plan_memory(big, 8, 4, 1);
  EXPECT_EQ(replicated.parameter_bytes, one.parameter_bytes);
  for (size_t i = 0; i < one.state.size(); i++)
    EXPECT_EQ(replicated.state[i].bytes, size_t(one.parameters) * 2);
}

TEST(Plan, LargestMicroBatchIsTheLastThatFits) {
  Config big = load_config(std::string(COLLAGE_SOURCE_DIR) + "/configs/gpt/6.7b.yaml");
  big.optimizer.precision = Precision::collage_plus;
  const double budget = 40e9;
  const int best = largest_micro_batch(big, 8, 1, budget);
  ASSERT_GE(best, 1);
  EXPECT_LE(double(plan_memory(big, 8, 1, best).total_bytes()), budget);
  EXPECT_GT(double(plan_memory(big, 8, 1, best + 1).total_bytes()), budget);
  // Too little memory for even one sequence, and an exact budget.
  EXPECT_EQ(largest_micro_batch(big, 8, 1, double(plan_memory(big, 8, 1, 1).total_bytes()) - 1), 0);
  EXPECT_EQ(largest_micro_batch(big, 8, 1, double(plan_memory(big, 8, 1, 3).total_bytes())), 3);
}

TEST(PlanCli, PrintsTheBreakdownAndTheLargestMicroBatch) {
  const CommandResult r = run_collage(
      "plan configs/gpt/6.7b.yaml --tensor-parallel 8 --memory 40GB --set "
      "optimizer.precision=collage-plus");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Config big = load_config(std::string(COLLAGE_SOURCE_DIR) + "/configs/gpt/6.7b.yaml");
  big.optimizer.precision = Precision::collage_plus;
  big.parallel.tensor_parallel = 8;
  const MemoryReport report = plan_memory(big, 8, 1, big.training.micro_batch_size);
  EXPECT_NE(r.output.find(format_memory_report(report)), std::string::npos) << r.output;
  const int best = largest_micro_batch(big, 8, 1, 40e9);
  EXPECT_NE(r.output.find("Fits in 40GB (40.00 GB) up to micro-batch " + std::to_string(best)),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("6658596864 parameters"), std::string::npos) << r.output;
  // The trainer's model FLOP count, and the step time it means at 100% MFU on 8 A100s.
  const ModelFlops flops = model_flops(big);
  EXPECT_NE(r.output.find(fmt::format("{:.4g} per token", flops.per_token())), std::string::npos)
      << r.output;
  const double step_flops = flops.per_sequence() * big.training.global_batch_size;
  EXPECT_NE(r.output.find(fmt::format("on 8 x A100 (312 TFLOP/s bf16 each): at least {:.1f} ms",
                                      1e3 * step_flops / (8 * 312e12))),
            std::string::npos)
      << r.output;
}

// --kernels: the cost model's table for the config's micro-batch × seq_len after --set, with
// the micro-batches per step from the global batch; tensor-parallel > 1 is refused.
TEST(PlanCli, KernelsPrintsTheCostTableOfTheConfigsStep) {
  const CommandResult r = run_collage(
      "plan configs/gpt/125m.yaml --kernels --set training.micro_batch_size=4 --set "
      "data.seq_len=1024 --set optimizer.precision=kahan");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Config c = load_config(std::string(COLLAGE_SOURCE_DIR) + "/configs/gpt/125m.yaml");
  const std::string table =
      format_kernel_costs(kernel_costs(c.model, 4, 1024, Precision::kahan), 4 * 1024,
                          c.training.global_batch_size / 4, reference_gpus());
  EXPECT_NE(r.output.find(table), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("micro-batch 4 x seq_len 1024 (4096 tokens), 256 micro-batches per "
                          "step (global batch 1024), optimizer.precision kahan"),
            std::string::npos)
      << r.output;
  // Without --kernels, no table.
  const CommandResult plain = run_collage("plan configs/gpt/125m.yaml");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(plain.output.find("| kernel |"), std::string::npos) << plain.output;

  const CommandResult tp = run_collage("plan configs/gpt/1.3b.yaml --tensor-parallel 2 --kernels");
  EXPECT_EQ(tp.exit_code, 1);
  EXPECT_NE(tp.output.find("collage: error: configs/gpt/1.3b.yaml with --tensor-parallel 2: "
                           "--kernels models tensor-parallel 1 only"),
            std::string::npos)
      << tp.output;
}

TEST(PlanCli, BadArgumentsAreClearErrors) {
  CommandResult r = run_collage("plan configs/gpt/6.7b.yaml --memory '40 parsecs'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("collage: error: memory size '40 parsecs'"), std::string::npos)
      << r.output;
  r = run_collage("plan configs/gpt/6.7b.yaml --tensor-parallel 3");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("configs/gpt/6.7b.yaml with --tensor-parallel 3: model.n_head: 32 "
                          "heads do not split over parallel.tensor_parallel 3"),
            std::string::npos)
      << r.output;
  r = run_collage("plan --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* option :
       {"--set", "--tensor-parallel", "--data-parallel INT:POSITIVE=1", "--memory", "--kernels"})
    EXPECT_NE(r.output.find(option), std::string::npos) << option << "\n" << r.output;
  EXPECT_NE(r.output.find("Default: none"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Default: the config's parallel.tensor_parallel"), std::string::npos);
}

}  // namespace
}  // namespace collage
