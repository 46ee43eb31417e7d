// RoBERTa's dynamic masking (src/data/bert/dynamic_masking.h): the file's masks undone, new ones
// drawn at 15% with 80/10/10, never on special or padding tokens, reproducible per (seed,
// epoch, sample) and different across epochs.
#include "data/bert/dynamic_masking.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

namespace collage {
namespace {

constexpr int kSeqLen = 64, kPredictions = 12, kVocab = 1000;
constexpr int32_t kBos = 0, kPad = 1, kEos = 2, kMask = 999;

// A row as a RoBERTa shard holds it: <s> tokens </s> then padding, with the file's own masks
// applied (every 7th token replaced by <mask>, the originals as labels). Returns the originals.
std::vector<int32_t> add_row(BertBatch& batch, int length, std::mt19937& gen) {
  std::vector<int32_t> original(kSeqLen, kPad), mask(kSeqLen, 0);
  original[0] = kBos;
  for (int t = 1; t < length - 1; t++) original[t] = 3 + int32_t(gen() % (kVocab - 4));
  original[length - 1] = kEos;
  for (int t = 0; t < length; t++) mask[t] = 1;
  std::vector<int32_t> ids = original, positions(kPredictions, 0), labels(kPredictions, 0);
  int count = 0;
  for (int t = 7; t < length - 1 && count < kPredictions; t += 7, count++) {
    positions[count] = t, labels[count] = original[t], ids[t] = kMask;
  }
  batch.input_ids.insert(batch.input_ids.end(), ids.begin(), ids.end());
  batch.input_mask.insert(batch.input_mask.end(), mask.begin(), mask.end());
  batch.segment_ids.insert(batch.segment_ids.end(), kSeqLen, 0);
  batch.masked_positions.insert(batch.masked_positions.end(), positions.begin(), positions.end());
  batch.masked_ids.insert(batch.masked_ids.end(), labels.begin(), labels.end());
  batch.masked_counts.push_back(count);
  batch.next_sentence_labels.push_back(0);
  batch.size++;
  return original;
}

DynamicMasking roberta_masking() {
  DynamicMasking m;
  m.mask_token = kMask;
  m.vocab_size = kVocab;
  m.special = {kBos, kPad, kEos};
  m.seed = 42;
  return m;
}

TEST(DynamicMasking, RestoresTheTextAndDrawsNewMasks) {
  std::mt19937 gen(1);
  BertBatch batch;
  batch.reset(kSeqLen, kPredictions);
  std::vector<std::vector<int32_t>> originals;
  const int rows = 4000;
  for (int r = 0; r < rows; r++) originals.push_back(add_row(batch, 20 + int(gen() % 40), gen));
  const DynamicMasking masking = roberta_masking();
  int64_t maskable = 0, chosen = 0, as_mask = 0, as_random = 0, kept = 0;
  for (int r = 0; r < rows; r++) {
    remask_row(batch, r, masking, /*epoch=*/0, /*sample_index=*/r);
    const int32_t* ids = batch.input_ids.data() + r * kSeqLen;
    const int32_t* positions = batch.masked_positions.data() + r * kPredictions;
    const int32_t* labels = batch.masked_ids.data() + r * kPredictions;
    const int count = batch.masked_counts[r];
    ASSERT_LE(count, kPredictions);
    std::set<int32_t> at;
    for (int k = 0; k < count; k++) {
      const int32_t t = positions[k];
      ASSERT_TRUE(k == 0 || positions[k - 1] < t) << "positions sorted and unique";
      ASSERT_GT(t, 0);
      ASSERT_EQ(batch.input_mask[r * kSeqLen + t], 1) << "padding masked";
      const int32_t original = originals[r][t];
      ASSERT_TRUE(original != kBos && original != kEos && original != kPad) << "special masked";
      ASSERT_EQ(labels[k], original) << "the label is the original token";
      as_mask += ids[t] == kMask;
      kept += ids[t] == original;
      as_random += ids[t] != kMask && ids[t] != original;
      at.insert(t);
    }
    for (int k = count; k < kPredictions; k++) ASSERT_EQ(positions[k], 0) << "zero padded";
    for (int t = 0; t < kSeqLen; t++)  // the file's old masks are gone everywhere else
      if (!at.count(t)) ASSERT_EQ(ids[t], originals[r][t]) << "row " << r << " position " << t;
    for (int t = 0; t < kSeqLen; t++)
      maskable += batch.input_mask[r * kSeqLen + t] && originals[r][t] > kEos;
    chosen += count;
  }
  // ⌊0.15 n + u⌋ has mean 0.15 n exactly (no row reaches the cap of 12 at n <= 58): the
  // share is 15% within a few standard errors of the ±0.5 rounding.
  const double share = double(chosen) / double(maskable);
  EXPECT_NEAR(share, 0.15, 3 * 0.29 * std::sqrt(double(rows)) / double(maskable)) << share;
  // 80/10/10 over ~20k chosen tokens: binomial standard error ≤ 0.3%; a random draw can equal
  // the original (1 in 1000), which counts as kept.
  EXPECT_NEAR(double(as_mask) / chosen, 0.8, 0.015);
  EXPECT_NEAR(double(as_random) / chosen, 0.1, 0.01);
  EXPECT_NEAR(double(kept) / chosen, 0.1, 0.01);
}

TEST(DynamicMasking, SameKeySameMasksAndEpochsDiffer) {
  std::mt19937 gen(2);
  BertBatch a, b, c;
  for (BertBatch* batch : {&a, &b, &c}) batch->reset(kSeqLen, kPredictions);
  std::mt19937 ga(3), gb(3), gc(3);
  add_row(a, 50, ga), add_row(b, 50, gb), add_row(c, 50, gc);
  const DynamicMasking masking = roberta_masking();
  remask_row(a, 0, masking, 1, 77);
  remask_row(b, 0, masking, 1, 77);
  remask_row(c, 0, masking, 2, 77);  // the next epoch
  EXPECT_EQ(a.input_ids, b.input_ids);
  EXPECT_EQ(a.masked_positions, b.masked_positions);
  EXPECT_NE(a.masked_positions, c.masked_positions);
  // Re-masking an already re-masked row starts from the same text again.
  remask_row(b, 0, masking, 1, 77);
  EXPECT_EQ(a.input_ids, b.input_ids);
  EXPECT_EQ(a.masked_ids, b.masked_ids);
}

}  // namespace
}  // namespace collage
