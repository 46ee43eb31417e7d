// GPTDataset and split parsing against the numpy reference
// (scripts/reference/gpt_dataset_reference.py): the three index arrays, epoch counts and the
// tokens of samples, which the reference slices from the concatenated shuffled documents.
#include "data/megatron/gpt_dataset.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "reference_fixture.h"

namespace collage {
namespace {

using testing::fixture_prefix;
using testing::reference;

TEST(GPTDataset, MatchesNumpyReference) {
  for (const auto& c : reference()["gpt_cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    auto indexed =
        std::make_shared<const IndexedDataset>(fixture_prefix(c["prefix"].get<std::string>()));
    const auto bounds = split_bounds(c["split"], indexed->num_sequences());
    EXPECT_EQ(std::vector<int64_t>(bounds.begin(), bounds.end()),
              c["bounds"].get<std::vector<int64_t>>());
    const int k = split_index(c["split_name"]);
    const int64_t seq_len = c["seq_len"];
    GPTDataset ds(indexed, bounds[k], bounds[k + 1], c["num_samples"], seq_len, c["seed"]);
    EXPECT_EQ(ds.tokens_per_epoch(), c["tokens_per_epoch"].get<int64_t>());
    EXPECT_EQ(ds.num_epochs(), c["num_epochs"].get<int64_t>());
    EXPECT_EQ(ds.separate_last_epoch(), c["separate_last_epoch"].get<bool>());
    EXPECT_EQ(ds.doc_idx(), c["doc_idx"].get<std::vector<int32_t>>());
    EXPECT_EQ(ds.sample_idx(), c["sample_idx"].get<std::vector<int64_t>>());
    EXPECT_EQ(ds.shuffle_idx(), c["shuffle_idx"].get<std::vector<int64_t>>());
    EXPECT_EQ(ds.size(), static_cast<int64_t>(c["shuffle_idx"].size()));
    EXPECT_GE(ds.size(), c["num_samples"].get<int64_t>());

    const auto indices = c["sample_indices"].get<std::vector<int64_t>>();
    const auto samples = c["samples"].get<std::vector<std::vector<int32_t>>>();
    std::vector<int32_t> got(seq_len + 1);
    for (size_t s = 0; s < indices.size(); ++s) {
      ds.get(indices[s], got.data());
      EXPECT_EQ(got, samples[s]) << "sample " << indices[s];
    }
    EXPECT_THROW(ds.get(ds.size(), got.data()), Error);
    EXPECT_THROW(ds.get(-1, got.data()), Error);
  }
}

TEST(GPTDataset, RejectsBadArguments) {
  auto indexed = std::make_shared<const IndexedDataset>(fixture_prefix("gpt_dataset_u16"));
  EXPECT_THROW(GPTDataset(indexed, 5, 5, 10, 16, 1), Error);    // empty range
  EXPECT_THROW(GPTDataset(indexed, 0, 41, 10, 16, 1), Error);   // past the end
  EXPECT_THROW(GPTDataset(indexed, 0, 40, 10, 0, 1), Error);    // seq_len 0
  EXPECT_THROW(GPTDataset(indexed, 0, 40, 10, 16, -1), Error);  // numpy seed range
  EXPECT_THROW(GPTDataset(indexed, 0, 40, 10, 16, 1LL << 32), Error);
  EXPECT_THROW(GPTDataset(indexed, 3, 4, 10, 16, 1), Error);  // sequence 3 is empty
}

// A run that would read its split more than 100000 times is refused before any index is built
// (a fuzzed .idx of near-empty sequences took seconds and gigabytes: tests/fuzz/regressions).
TEST(GPTDataset, RefusesAbsurdlyManyPassesOverASplit) {
  auto indexed = std::make_shared<const IndexedDataset>(fixture_prefix("gpt_dataset_u16"));
  const int64_t tokens = GPTDataset(indexed, 0, 1, 1, 1, 1).tokens_per_epoch();
  // Exactly 100000 passes are allowed, one sample more needs another.
  const int64_t samples = (100000 * tokens - 1) / 4;
  EXPECT_EQ(GPTDataset(indexed, 0, 1, samples, 4, 1).num_epochs(), 100000);
  try {
    GPTDataset(indexed, 0, 1, samples + tokens, 4, 1);
    FAIL() << "expected the split to be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("passes over the"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("data.split"), std::string::npos) << e.what();
  }
}

TEST(SplitBounds, MatchMegatron) {
  for (const auto& c : reference()["split_cases"]) {
    const std::string split = c["split"];
    const int64_t n = c["n"];
    if (c["bounds"].is_null()) {
      // Megatron would produce decreasing (negative) bounds here; collage refuses.
      EXPECT_THROW(split_bounds(split, n), Error) << split << " over " << n;
      continue;
    }
    const auto bounds = split_bounds(split, n);
    EXPECT_EQ(std::vector<int64_t>(bounds.begin(), bounds.end()),
              c["bounds"].get<std::vector<int64_t>>())
        << split << " over " << n;
  }
}

TEST(SplitBounds, BadStringsNameTheString) {
  for (const char* bad :
       {"", "abc", "1,,2", "1,2,3,4", "-1,2,3", "0,0,0", "1;2;3", "nan,1,1", "1,2,x"}) {
    try {
      split_bounds(bad, 100);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(SplitIndex, Names) {
  EXPECT_EQ(split_index("train"), 0);
  EXPECT_EQ(split_index("valid"), 1);
  EXPECT_EQ(split_index("validation"), 1);
  EXPECT_EQ(split_index("test"), 2);
  EXPECT_THROW(split_index("dev"), Error);
}

}  // namespace
}  // namespace collage
