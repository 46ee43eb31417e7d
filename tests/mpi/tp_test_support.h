#pragma once
// What a tensor-parallel test with real ranks (tests/mpi/gpt_tp_test.cpp, bert_tp_test.cpp) does
// the same way for every model: it cuts each rank's shard out of the tp = 1 model's whole
// tensors, runs one step at tp = 1 and at tp = 2 (a TpRun each, read back from the model), and
// compares them: the memory layout of the tp = 2 model, every gradient against the same shard
// of tp = 1's, and the replicated gradients across the TP ranks. What a model runs, and which
// limits hold, stays with its test.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "../model/fixture_reader.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "dist/mpi_comm.h"
#include "model/host_values.h"
#include "model/tensor_shards.h"
#include "model/trainable_model.h"

namespace collage::tp_test {

inline int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

template <typename S>
std::unique_ptr<BackendT<S>> cpu_backend() {
  if constexpr (std::is_same_v<S, bf16>)
    return make_cpu_backend(1);
  else
    return make_cpu_backend_fp32(1);
}

// The limits of a tp = 2 run against tp = 1: the loss relative to its value, and each gradient
// tensor (and the logits, where a test compares them) relative to its norm.
struct Limits {
  double loss, grad;
};

// What one forward + backward leaves in a model, read back to the host; each test adds its
// model's losses and counts.
struct TpRun {
  std::vector<float> params, grads;  // memory_elements() each, memory order
  std::vector<float> logits;         // this rank's columns
  std::vector<ParameterInfo> table;
  ParameterRegion replicated;
  int64_t memory_elements = 0;
  size_t activation_bytes = 0;
};

// Fills `r` from `model` (on `backend`), the logits (`logit_elements` of them) included.
template <typename S>
void read_back(TrainableModelT<S>& model, BackendT<S>& backend, const S* logits,
               int64_t logit_elements, TpRun& r) {
  r.memory_elements = model.memory_elements();
  r.params = download_values(backend, model.parameter_memory(), r.memory_elements);
  r.grads = download_values(backend, model.gradient_memory(), r.memory_elements);
  r.logits = download_values(backend, logits, logit_elements);
  r.table = model.parameters();
  r.replicated = model.replicated_region();
  r.activation_bytes = model.activation_bytes();
}

inline const ParameterInfo& find(const std::vector<ParameterInfo>& table, const std::string& name) {
  for (const ParameterInfo& info : table)
    if (info.name == name) return info;
  throw Error("no parameter " + name);
}

// This rank's shard (of `sharded`, a tp-way table entry) cut from tp = 1's whole tensor. The
// padded vocabulary may be longer at tp: its extra rows are zero.
inline std::vector<float> shard_of_whole(const std::vector<float>& whole_memory,
                                         const ParameterInfo& whole, const ParameterInfo& sharded,
                                         const ParallelLayout& layout) {
  int64_t full_numel = 1;
  for (int64_t d : sharded.full_shape) full_numel *= d;
  std::vector<float> full(size_t(full_numel), 0.0f);
  std::copy(whole_memory.begin() + whole.offset, whole_memory.begin() + whole.offset + whole.numel,
            full.begin());
  std::vector<float> shard(size_t(sharded.numel));
  copy_shard_out_of(full.data(), shard.data(), sharded, layout, sizeof(float));
  return shard;
}

// This rank's parameter memory (for `sharded_table`) cut from tp = 1's whole tensors.
inline std::vector<float> shards_of_whole_memory(const std::vector<float>& whole_memory,
                                                 const std::vector<ParameterInfo>& whole_table,
                                                 const std::vector<ParameterInfo>& sharded_table,
                                                 const ParallelLayout& layout) {
  int64_t elements = 0;
  for (const ParameterInfo& info : sharded_table) elements += info.numel;
  std::vector<float> memory(static_cast<size_t>(elements));
  for (const ParameterInfo& sharded : sharded_table) {
    const std::vector<float> shard =
        shard_of_whole(whole_memory, find(whole_table, sharded.name), sharded, layout);
    std::copy(shard.begin(), shard.end(), memory.begin() + sharded.offset);
  }
  return memory;
}

// Init leaves every bias at 0 and every layernorm weight at 1, under which a bias added on every
// TP rank, or a replicated gradient that is summed instead of averaged, would go unseen: move
// each vector parameter by U(−0.1, 0.1), rounded to bf16 so that both storages load the same
// values. `vocab_bias` (if named) is moved only in its first `vocab_size` elements, the real
// vocabulary's.
inline std::vector<float> perturbed(std::vector<float> memory,
                                    const std::vector<ParameterInfo>& table,
                                    const std::string& vocab_bias = "", int64_t vocab_size = 0) {
  std::mt19937 rng{99};
  for (const ParameterInfo& info : table) {
    if (info.shape.size() != 1) continue;
    const int64_t n = info.name == vocab_bias ? vocab_size : info.numel;
    for (int64_t i = 0; i < n; i++) {
      const float u = float(rng() % 2001) / 10000.0f - 0.1f;
      memory[info.offset + i] = round_to_bf16(memory[info.offset + i] + u);
    }
  }
  return memory;
}

// ‖got − want‖ / ‖want‖, as the reference tests measure errors.
using test::relative_error;

// The tp = 2 model's memory: padded to the multiple of 64 it was built with, the replicated
// tensors behind the sharded ones, and zeros behind the parameters (call under
// ASSERT_NO_FATAL_FAILURE).
inline void check_memory_layout(const TpRun& two) {
  EXPECT_EQ(two.memory_elements % 64, 0);
  int64_t sharded_end = 0, replicated_elements = 0;
  for (const ParameterInfo& info : two.table) {
    if (info.split == TensorSplit::replicated) {
      EXPECT_GE(info.offset, two.replicated.begin) << info.name;
      EXPECT_LE(info.offset + info.numel, two.replicated.end) << info.name;
      replicated_elements += info.numel;
    } else {
      sharded_end = std::max(sharded_end, info.offset + info.numel);
    }
  }
  EXPECT_EQ(two.replicated.begin, sharded_end);
  EXPECT_EQ(two.replicated.size(), replicated_elements);
  for (int64_t i = two.replicated.end; i < two.memory_elements; i++) {
    ASSERT_EQ(two.params[i], 0.0f) << "memory behind the parameters at " << i;
    ASSERT_EQ(two.grads[i], 0.0f) << "gradient memory behind the parameters at " << i;
  }
}

// The TP ranks all hold the same `mine`, bit for bit.
template <size_t N>
bool same_on_every_tp_rank(Comm& tp_comm, const double (&mine)[N]) {
  double all[2][N];
  tp_comm.all_gather(mine, all, sizeof mine);
  return std::memcmp(all[0], all[1], sizeof mine) == 0;
}

struct WorstGradient {
  double error = 0;
  std::string name;
};

// Every gradient of `two` (this rank's shards) within `limit` of the same shard of `one`'s, and
// zero in the vocabulary's padding rows of `vocab_tensors` (call under ASSERT_NO_FATAL_FAILURE).
inline void check_gradients(const TpRun& one, const TpRun& two, const ParallelLayout& layout,
                            int64_t vocab_size, const std::vector<std::string>& vocab_tensors,
                            double limit, WorstGradient* worst) {
  for (const ParameterInfo& sharded : two.table) {
    const ParameterInfo& whole = find(one.table, sharded.name);
    const std::vector<float> want_grads = shard_of_whole(one.grads, whole, sharded, layout);
    const float* grads = two.grads.data() + sharded.offset;
    const double error = relative_error(grads, want_grads.data(), sharded.numel);
    EXPECT_LT(error, limit) << sharded.name << " (rank " << layout.tp_rank << ")";
    // Vocab padding rows never get a gradient.
    if (std::find(vocab_tensors.begin(), vocab_tensors.end(), sharded.name) !=
        vocab_tensors.end()) {
      const int64_t columns = sharded.shape.size() > 1 ? sharded.shape[1] : 1;
      const int64_t real_rows =
          std::clamp<int64_t>(vocab_size - layout.tp_rank * sharded.shape[0], 0, sharded.shape[0]);
      for (int64_t i = real_rows * columns; i < sharded.numel; i++)
        ASSERT_EQ(grads[i], 0.0f) << sharded.name << " padding element " << i;
    }
    if (error > worst->error) worst->error = error, worst->name = sharded.name;
  }
}

// The replicated tensors' gradients are identical on every TP rank after the average.
inline void check_replicated_gradients_agree(const TpRun& two, Comm& tp_comm) {
  std::vector<float> replicated(two.grads.begin() + two.replicated.begin,
                                two.grads.begin() + two.replicated.end);
  std::vector<float> both(2 * replicated.size());
  tp_comm.all_gather(replicated.data(), both.data(), int64_t(replicated.size() * sizeof(float)));
  EXPECT_TRUE(
      std::equal(both.begin(), both.begin() + replicated.size(), both.begin() + replicated.size()))
      << "replicated gradients differ across the TP ranks";
}

}  // namespace collage::tp_test
