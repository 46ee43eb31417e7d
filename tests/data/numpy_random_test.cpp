// NumpyRandomState against numpy 1.24's legacy RandomState (values recorded by
// scripts/reference/gpt_dataset_reference.py): raw 32-bit draws, bounded draws through both
// the 32- and 64-bit paths, and permutations of several sizes, including > 2^16.
#include "data/megatron/numpy_random.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "reference_fixture.h"

namespace collage {
namespace {

using testing::reference;

TEST(NumpyRandomState, RawDrawsMatchNumpy) {
  for (const auto& c : reference()["numpy_random"]) {
    NumpyRandomState rng(c["seed"].get<uint32_t>());
    for (const auto& want : c["draws32"])
      EXPECT_EQ(rng.next_uint32(), want.get<uint32_t>()) << "seed " << c["seed"];
  }
}

// numpy's legacy randint(0, max+1) uses the same masked rejection as shuffle's
// random_interval(max), including (hi << 32 | lo) words once max needs more than 32 bits.
TEST(NumpyRandomState, BoundedDrawsMatchNumpy) {
  int checked_64bit = 0;
  for (const auto& c : reference()["numpy_random"]) {
    for (const auto& [max_text, values] : c["bounded"].items()) {
      const uint64_t max = std::stoull(max_text);
      NumpyRandomState rng(c["seed"].get<uint32_t>());
      for (const auto& want : values)
        EXPECT_EQ(rng.random_interval(max), want.get<uint64_t>())
            << "seed " << c["seed"] << " max " << max;
      checked_64bit += max > 0xffffffffULL;
    }
  }
  EXPECT_GE(checked_64bit, 3);
}

TEST(NumpyRandomState, PermutationsMatchNumpy) {
  for (const auto& c : reference()["numpy_random"]) {
    for (const auto& s : c["shuffles"]) {
      const int64_t n = s["n"].get<int64_t>();
      std::vector<int64_t> perm(n);
      std::iota(perm.begin(), perm.end(), 0);
      NumpyRandomState rng(c["seed"].get<uint32_t>());
      rng.shuffle(std::span<int64_t>(perm));
      const auto head = s["head"].get<std::vector<int64_t>>();
      const auto tail = s["tail"].get<std::vector<int64_t>>();
      EXPECT_EQ(std::vector<int64_t>(perm.begin(), perm.begin() + head.size()), head)
          << "seed " << c["seed"] << " n " << n;
      EXPECT_EQ(std::vector<int64_t>(perm.end() - tail.size(), perm.end()), tail)
          << "seed " << c["seed"] << " n " << n;
      uint64_t checksum = 0;  // sum (i+1) * perm[i] mod 2^64, as the python script computes
      for (int64_t i = 0; i < n; ++i) checksum += static_cast<uint64_t>(i + 1) * perm[i];
      EXPECT_EQ(std::to_string(checksum), s["checksum"].get<std::string>())
          << "seed " << c["seed"] << " n " << n;
    }
  }
}

}  // namespace
}  // namespace collage
