// Communication per training step from the shapes (comm_plan.h): the collectives of
// src/model/gpt.cpp (tensor parallel) and src/train/trainer.cpp (data parallel), counted the
// way dist/counting_comm.cpp counts them.
#include "plan/comm_plan.h"

#include "model/model_family.h"
#include "model/parameter_table.h"
#include "model/trainable_model.h"
#include "plan/memory_plan.h"

namespace collage {

CommPlan plan_communication(const Config& config, int tp, int dp) {
  const ModelConfig& m = config.model;
  const std::vector<ParameterInfo> table = model_parameter_table(m, tp);
  int64_t parameters = 0;
  for (const ParameterInfo& info : table) parameters += info.numel;
  const ParameterRegion replicated = replicated_region(table, tp);
  const bool zero = config.parallel.zero == 1;
  const int64_t bf16_bytes = 2, f32_bytes = 4;
  const int64_t micro_batches =
      config.training.global_batch_size / (int64_t{config.training.micro_batch_size} * dp);
  const int64_t N = int64_t{config.training.micro_batch_size} * config.data.seq_len;
  const int64_t C = m.hidden_size;

  CommPlan plan;
  if (tp > 1) {
    // Forward: the word embedding and each layer's attention proj and fc2 outputs (N, C).
    // Backward: the input gradients of each layer's column-parallel fc1 and QKV (N, C).
    // The vocab-parallel head, on R rows: the gradient of its input (R, C), and the loss's row
    // max (R) and Σ exp | target logit (2R) in fp32: R is the model family's head_rows. The
    // GPT's head sees every token (R = N); an encoder's only the labelled ones, at most
    // micro_batch × max_predictions (the plan counts that bound; a real step has ~15% of them).
    const int64_t R = model_family(m).head_rows(model_shape(config));
    const int64_t block_reductions = 4 * int64_t{m.n_layer} + 1;
    plan.tp_calls = micro_batches * (block_reductions + 1 + 2);
    plan.tp_bytes =
        micro_batches * ((block_reductions * N + R) * C * bf16_bytes + 3 * R * f32_bytes);
    // Once per step: the replicated tensors' gradients.
    if (replicated.size() > 0) {
      plan.tp_calls += 1;
      plan.tp_bytes += replicated.size() * bf16_bytes;
    }
  }
  if (dp > 1) {
    if (zero) {  // reduce-scatter of the gradients, all-gather of the updated weights
      const int64_t elements =
          padded_parameter_elements(parameters, zero_memory_multiple(dp, /*zero=*/true));
      plan.dp_calls = 2;
      plan.dp_bytes = 2 * elements * bf16_bytes;
    } else {  // all-reduce of the gradients
      plan.dp_calls = 1;
      plan.dp_bytes = parameters * bf16_bytes;
    }
  }
  return plan;
}

}  // namespace collage
