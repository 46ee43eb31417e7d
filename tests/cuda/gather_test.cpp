// gather_rows and scatter_add_rows (kernels/gather.cu) under the host emulator against the cpu
// backend, bit for bit: gather is a copy, and scatter_add_rows sums each destination row's dout
// rows in fp32 in ascending k on both (the kernel finds them by scanning rows in chunks of a
// block, the cpu by a stable sort), then rounds once. Repeated rows, more rows than one chunk
// (256) and wider than one column block (C > 256), C a multiple of 8 (128-bit gather) and not.
#include <vector>

#include "cuda_test_util.h"

namespace collage::test {
namespace {

struct Case {
  int count, R, C;
};
const Case kCases[] = {{1, 1, 1}, {5, 3, 13}, {37, 20, 64}, {600, 40, 24}, {300, 7, 300}};

std::vector<int32_t> random_rows(Rng& rng, const Case& c) {
  std::vector<int32_t> rows(size_t(c.count));
  for (auto& r : rows) r = rng.integer(0, c.R - 1);
  return rows;
}

TEST(CudaGather, GatherAndScatterAddMatchCpuBits) {
  BackendPair pair;
  Rng rng(1);
  for (const Case& c : kCases) {
    const std::string what = "count=" + std::to_string(c.count) + " R=" + std::to_string(c.R) +
                             " C=" + std::to_string(c.C);
    const Mirrored<bf16> inp(pair, random_values<bf16>(rng, size_t(c.R) * c.C));
    const Mirrored<bf16> out(pair, size_t(c.count) * c.C);
    const Mirrored<bf16> dout(pair, random_values<bf16>(rng, size_t(c.count) * c.C));
    const Mirrored<bf16> dinp(pair, random_values<bf16>(rng, size_t(c.R) * c.C));
    const Mirrored<int32_t> rows(pair, random_rows(rng, c));
    pair.cpu->gather_rows(out.cpu(), inp.cpu(), rows.cpu(), c.count, c.C);
    pair.emulated->gather_rows(out.emulated(), inp.emulated(), rows.emulated(), c.count, c.C);
    pair.cpu->scatter_add_rows(dinp.cpu(), dout.cpu(), rows.cpu(), c.count, c.C);
    pair.emulated->scatter_add_rows(dinp.emulated(), dout.emulated(), rows.emulated(), c.count,
                                    c.C);
    expect_same_bits(out.from_emulated(), out.from_cpu(), "gather " + what);
    expect_same_bits(dinp.from_emulated(), dinp.from_cpu(), "scatter_add " + what);
  }
}

// Misaligned pointers (one element in) take the scalar gather path.
TEST(CudaGather, UnalignedGatherMatchesCpuBits) {
  BackendPair pair;
  Rng rng(2);
  const int count = 9, R = 5, C = 16;
  const Mirrored<bf16> inp(pair, random_values<bf16>(rng, size_t(R) * C + 1));
  const Mirrored<bf16> out(pair, size_t(count) * C + 1);
  const Mirrored<int32_t> rows(pair, random_rows(rng, Case{count, R, C}));
  pair.cpu->gather_rows(out.cpu() + 1, inp.cpu() + 1, rows.cpu(), count, C);
  pair.emulated->gather_rows(out.emulated() + 1, inp.emulated() + 1, rows.emulated(), count, C);
  expect_same_bits(out.from_emulated(), out.from_cpu(), "gather, unaligned");
}

}  // namespace
}  // namespace collage::test
