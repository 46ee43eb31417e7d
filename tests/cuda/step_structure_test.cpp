// A training step on the cuda backend is structured as on a GPU: a fixed number of kernel
// launches per layer (so launches grow with the layer count only, not with the batch or
// sequence size), and the host waits for the device only where the loss and the gradient norm
// are read and where the step's EDQ comes back. Counted under emulation, which runs the same
// host code as the GPU build. Also: deferred emulation (queued work runs only when the host
// waits) gives the same bits as immediate emulation, so no host read is missing a wait.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"
#include "dist/backend_choice.h"
#include "model/gpt.h"
#include "optim/optimizer.h"
#include "simt/simt.h"

namespace collage {
namespace {

struct StepCount {
  int64_t launches = 0, synchronizations = 0;
  std::vector<float> parameters;  // after the step
  double loss = 0, grad_norm = 0;
};

ModelConfig tiny_model(int layers) {
  ModelConfig m;
  m.n_layer = layers;
  m.hidden_size = 32;
  m.n_head = 2;
  m.vocab_size = 100;
  m.max_position_embeddings = 32;
  return m;
}

// Two optimizer steps of `micro_batches` micro-batches of (B, T) each, as the trainer runs
// them; the counts are the second step's.
StepCount one_step(int layers, int B, int T, int micro_batches) {
  auto backend = make_cuda_emulated_backend();
  GPT model(tiny_model(layers), *backend, B, T);
  model.init_weights(7);
  OptimizerConfig oc;
  oc.precision = Precision::collage_plus;
  std::vector<ParamSpan> spans;
  for (const ParameterInfo& p : model.parameters())
    spans.push_back({p.offset, p.numel, p.weight_decay});
  Optimizer optimizer(oc, *backend, spans, model.parameter_memory(), model.gradient_memory(),
                      model.num_parameters(), {1, {}});
  auto comm = make_single_comm();
  std::vector<int32_t> tokens(size_t(B) * T), targets(size_t(B) * T);
  for (size_t i = 0; i < tokens.size(); i++) tokens[i] = int32_t(i * 7 % 100);
  for (size_t i = 0; i < targets.size(); i++) targets[i] = int32_t(i * 11 % 100);
  backend->synchronize();

  // Two steps; the second is counted: the first also sizes the backend's scratch buffers,
  // and growing one waits for the device (the old buffer may still be in use).
  StepCount count;
  Backend::Counters before;
  for (int64_t t = 1; t <= 2; t++) {
    before = backend->counters();
    count = StepCount{};
    model.zero_gradients();
    for (int micro = 0; micro < micro_batches; micro++) {
      count.loss += model.forward(tokens.data(), targets.data(), B).sum;
      model.backward(1.0f / float(B * T * micro_batches));
    }
    count.grad_norm =
        std::sqrt(backend->sum_squares(model.gradient_memory(), model.num_parameters()));
    backend->scale(model.gradient_memory(), 0.5f, model.num_parameters());
    optimizer.step(t, 1e-3, *comm);
  }
  const Backend::Counters after = backend->counters();
  count.launches = after.launches - before.launches;
  count.synchronizations = after.synchronizations - before.synchronizations;
  count.parameters.resize(size_t(model.num_parameters()));
  model.save_parameters(count.parameters.data());
  return count;
}

TEST(CudaStepStructure, LaunchesGrowWithTheLayerCountOnly) {
  const StepCount two = one_step(2, 2, 16, 2), three = one_step(3, 2, 16, 2),
                  four = one_step(4, 2, 16, 2);
  const int64_t per_layer = three.launches - two.launches;
  EXPECT_GT(per_layer, 0);
  EXPECT_EQ(four.launches - three.launches, per_layer) << "launches must be a + b·layers";
  // Neither the batch nor the sequence length changes how many kernels run.
  EXPECT_EQ(one_step(2, 1, 16, 2).launches, two.launches);
  EXPECT_EQ(one_step(2, 2, 9, 2).launches, two.launches);
  std::printf("launches per step: %lld at 2 layers, %lld at 4 layers (%lld per layer)\n",
              (long long)two.launches, (long long)four.launches, (long long)per_layer);
}

TEST(CudaStepStructure, HostWaitsOnlyForLossNormAndEdq) {
  for (int micro_batches : {1, 3}) {
    const StepCount step = one_step(2, 2, 16, micro_batches);
    // One wait per micro-batch (its loss), one for the gradient norm, one for the EDQ sums.
    EXPECT_EQ(step.synchronizations, micro_batches + 2) << micro_batches << " micro-batches";
  }
}

TEST(CudaStepStructure, DeferredExecutionGivesTheSameBits) {
  const StepCount immediate = one_step(2, 2, 16, 2);
  simt::set_deferred(true);
  const StepCount deferred = one_step(2, 2, 16, 2);
  simt::set_deferred(false);
  EXPECT_EQ(deferred.loss, immediate.loss);
  EXPECT_EQ(deferred.grad_norm, immediate.grad_norm);
  EXPECT_EQ(deferred.parameters, immediate.parameters);
}

}  // namespace
}  // namespace collage
