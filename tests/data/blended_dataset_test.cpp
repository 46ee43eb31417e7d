// BlendedDataset, NeMo's per-split dataset construction and the pretraining sampler against
// python twins of Megatron's build_blending_indices / MegatronPretrainingSampler
// (scripts/reference/gpt_dataset_reference.py).
#include "data/megatron/blended_dataset.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "data/megatron/pretraining_sampler.h"
#include "reference_fixture.h"

namespace collage {
namespace {

using testing::fixture_prefix;
using testing::reference;

// A stand-in source with `n` samples; the blend only asks for its size.
class CountingSamples : public GptSamples {
 public:
  explicit CountingSamples(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  int64_t seq_len() const override { return 1; }
  void get(int64_t i, int32_t* out) const override { out[0] = out[1] = static_cast<int32_t>(i); }

 private:
  int64_t n_;
};

TEST(BlendedDataset, IndicesMatchMegatron) {
  for (const auto& c : reference()["blend_index_cases"]) {
    const auto weights = c["weights"].get<std::vector<double>>();
    const int64_t size = c["size"];
    std::vector<std::shared_ptr<const GptSamples>> parts;
    for (size_t d = 0; d < weights.size(); ++d)
      parts.push_back(std::make_shared<CountingSamples>(size));
    BlendedDataset blend(parts, weights, size);
    EXPECT_EQ(blend.dataset_index(), c["dataset_index"].get<std::vector<uint8_t>>());
    EXPECT_EQ(blend.dataset_sample_index(), c["dataset_sample_index"].get<std::vector<int64_t>>());
    EXPECT_EQ(blend_num_samples(weights, 1000), c["counts"].get<std::vector<int64_t>>());
  }
}

TEST(BlendedDataset, BuiltFromPrefixesMatchesNemo) {
  const auto& c = reference()["blend"];
  std::vector<WeightedPrefix> prefixes;
  const auto weights = c["weights"].get<std::vector<double>>();
  for (size_t d = 0; d < weights.size(); ++d)
    prefixes.push_back({weights[d], fixture_prefix(c["prefixes"][d].get<std::string>())});
  auto samples =
      build_gpt_samples(prefixes, c["split"], "train", c["num_samples"], c["seq_len"], c["seed"]);
  const auto* blend = dynamic_cast<const BlendedDataset*>(samples.get());
  ASSERT_NE(blend, nullptr);
  EXPECT_EQ(blend_num_samples(weights, c["num_samples"]), c["counts"].get<std::vector<int64_t>>());
  EXPECT_EQ(blend->dataset_index(), c["dataset_index"].get<std::vector<uint8_t>>());
  EXPECT_EQ(blend->dataset_sample_index(), c["dataset_sample_index"].get<std::vector<int64_t>>());
  const auto want = c["samples"].get<std::vector<std::vector<int32_t>>>();
  ASSERT_EQ(samples->size(), static_cast<int64_t>(want.size()));
  std::vector<int32_t> got(samples->seq_len() + 1);
  for (size_t i = 0; i < want.size(); ++i) {
    samples->get(static_cast<int64_t>(i), got.data());
    EXPECT_EQ(got, want[i]) << "blended sample " << i;
  }
}

TEST(BlendedDataset, NumpySumMatchesNumpy) {
  // Values of mixed magnitude, so a different summation order changes the last bits.
  for (const auto& c : reference()["numpy_sum_cases"]) {
    const auto values = c["values"].get<std::vector<double>>();
    EXPECT_EQ(numpy_sum(values), c["sum"].get<double>()) << values.size() << " values";
  }
}

TEST(BlendedDataset, RejectsInconsistentInputs) {
  std::vector<std::shared_ptr<const GptSamples>> parts = {std::make_shared<CountingSamples>(5),
                                                          std::make_shared<CountingSamples>(5)};
  EXPECT_THROW(BlendedDataset(parts, {1.0}, 4), Error);
  EXPECT_THROW(BlendedDataset(parts, {0.0, 0.0}, 4), Error);
  EXPECT_THROW(BlendedDataset(parts, {1.0, 1.0}, 40), Error);  // needs 20 from a source of 5
}

TEST(BuildGptSamples, SinglePrefixIsAPlainGptDataset) {
  const auto& c = reference()["gpt_cases"][3];  // valid_split
  auto samples = build_gpt_samples({{1.0, fixture_prefix(c["prefix"])}}, c["split"],
                                   c["split_name"], c["num_samples"], c["seq_len"], c["seed"]);
  const auto* ds = dynamic_cast<const GPTDataset*>(samples.get());
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(ds->shuffle_idx(), c["shuffle_idx"].get<std::vector<int64_t>>());
  EXPECT_THROW(
      build_gpt_samples({{1.0, fixture_prefix("gpt_dataset_u16")}}, "980,10,10", "valid", 10, 8, 1),
      Error);  // 980,10,10 of 40 sequences leaves valid empty
}

TEST(PretrainingSampler, MatchesMegatronSampler) {
  for (const auto& c : reference()["sampler_cases"]) {
    const int64_t total = c["total"], mbs = c["micro_batch_size"], dp = c["dp"];
    for (int64_t r = 0; r < dp; ++r) {
      const auto want = c["batches"][r].get<std::vector<std::vector<int64_t>>>();
      int64_t consumed = c["consumed"];
      for (const auto& batch : want) {
        EXPECT_EQ(micro_batch_sample_indices(consumed, mbs, dp, r, total), batch);
        consumed += mbs * dp;
      }
      // The reference stops when a whole global micro-batch no longer fits.
      EXPECT_THROW(micro_batch_sample_indices(consumed, mbs, dp, r, total), Error);
    }
  }
}

// What the trainer does with it (src/train/trainer.cpp): per optimizer step, each of dp ranks
// reads global_batch / (micro_batch · dp) micro-batches. Over the ranks, a step's samples are
// exactly the single process's step: every sample once, none skipped, in any layout.
TEST(PretrainingSampler, DataParallelRanksSplitEachGlobalBatch) {
  const int64_t global_batch = 24, total = 1000;
  for (int64_t micro_batch : {1, 2, 3}) {
    for (int64_t dp : {1, 2, 4}) {
      if (global_batch % (micro_batch * dp) != 0) continue;
      SCOPED_TRACE(::testing::Message() << "micro_batch " << micro_batch << " dp " << dp);
      const int64_t micro_steps = global_batch / (micro_batch * dp);
      int64_t consumed = 0;
      for (int step = 0; step < 5; step++) {
        std::vector<int64_t> seen;
        for (int64_t m = 0; m < micro_steps; m++) {
          for (int64_t r = 0; r < dp; r++) {
            for (int64_t i : micro_batch_sample_indices(consumed, micro_batch, dp, r, total))
              seen.push_back(i);
          }
          consumed += micro_batch * dp;
        }
        std::sort(seen.begin(), seen.end());
        std::vector<int64_t> single(global_batch);  // one process: the next global_batch samples
        for (int64_t i = 0; i < global_batch; i++) single[i] = step * global_batch + i;
        EXPECT_EQ(seen, single) << "step " << step;
      }
    }
  }
}

TEST(PretrainingSampler, ReadSamplesFillsRows) {
  CountingSamples src(10);
  std::vector<int32_t> out(3 * 2);
  read_samples(src, {4, 5, 9}, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{4, 4, 5, 5, 9, 9}));
}

}  // namespace
}  // namespace collage
