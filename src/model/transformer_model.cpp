// The memory, layout and plumbing every model class shares (transformer_model.h).
#include "model/transformer_model.h"

#include "core/error.h"
#include "model/host_values.h"
#include "model/language_model.h"
#include "model/parameter_table.h"

namespace collage {

template <typename Storage, typename Interface>
TransformerModelT<Storage, Interface>::TransformerModelT(
    const ModelConfig& config, BackendT<Storage>& backend, int micro_batch, int seq_len,
    ParallelLayout layout, Comm* tensor_parallel, int64_t memory_multiple,
    std::vector<ParameterInfo> table, const char* model)
    : config_(config),
      backend_(backend),
      micro_batch_(micro_batch),
      seq_len_(seq_len),
      layout_(layout),
      tp_comm_(tensor_parallel),
      C_(config.hidden_size),
      NH_(config.n_head),
      HS_(config.head_size()),
      F_(config.ffn()),
      V_(config.vocab_size),
      Vp_(config.padded_vocab(layout.tp)),
      table_(std::move(table)) {
  check_tensor_parallel_group(model, layout, tensor_parallel);
  COLLAGE_CHECK(micro_batch >= 1, "training.micro_batch_size: {} must be >= 1", micro_batch);
  local_heads_ = NH_ / layout.tp;
  local_ffn_ = F_ / layout.tp;
  vocab_begin_ = int64_t{layout.tp_rank} * (Vp_ / layout.tp);
  vocab_end_ = vocab_begin_ + Vp_ / layout.tp;
  const ParameterMemorySize memory =
      parameter_memory_size(table_, layout.tp, memory_multiple, model);
  num_parameters_ = memory.num_parameters;
  memory_elements_ = memory.memory_elements;
  replicated_ = memory.replicated;
  const size_t bytes = size_t(memory_elements_) * sizeof(Storage);
  param_arena_ = std::make_unique<Arena>(backend, bytes, "parameters");
  params_ = param_arena_->take<Storage>(memory_elements_);
  grad_arena_ = std::make_unique<Arena>(backend, bytes, "gradients");
  grads_ = grad_arena_->take<Storage>(memory_elements_);
}

template <typename Storage, typename Interface>
void TransformerModelT<Storage, Interface>::allocate_activations(size_t bytes) {
  act_arena_ = std::make_unique<Arena>(backend_, bytes, "activations");
}

template <typename Storage, typename Interface>
void TransformerModelT<Storage, Interface>::load_parameters(const float* host_values) {
  upload_values(backend_, params_, host_values, num_parameters_);
}

template <typename Storage, typename Interface>
void TransformerModelT<Storage, Interface>::save_parameters(float* host_values) const {
  download_values(backend_, host_values, params_, num_parameters_);
}

template <typename Storage, typename Interface>
void TransformerModelT<Storage, Interface>::zero_gradients() {
  backend_.zero(grads_, size_t(memory_elements_) * sizeof(Storage));
}

template <typename Storage, typename Interface>
void TransformerModelT<Storage, Interface>::all_reduce_replicated_gradients() {
  if (layout_.tp == 1 || replicated_.size() == 0) return;
  Storage* replicated = grads_ + replicated_.begin;
  tp_comm_->all_reduce_sum(replicated, replicated_.size());
  backend_.scale(replicated, 1.0f / float(layout_.tp), replicated_.size());
}

template <typename Storage, typename Interface>
void TransformerModelT<Storage, Interface>::all_reduce_tp(Storage* data, int64_t n) {
  if (layout_.tp > 1) tp_comm_->all_reduce_sum(data, n);
}

template class TransformerModelT<bf16, CausalLanguageModelT<bf16>>;
template class TransformerModelT<float, CausalLanguageModelT<float>>;
template class TransformerModelT<bf16, MaskedLanguageModelT<bf16>>;
template class TransformerModelT<float, MaskedLanguageModelT<float>>;

}  // namespace collage
