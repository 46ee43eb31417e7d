// Dropout (kernels/dropout.cu) under the host emulator against the cpu backend: the same masks
// and the same bits (both draw Philox-4x32-10 from numerics/elementwise_math.h and compute one
// fp32 product, or product plus sum, rounded once), at offsets that do and do not start a
// Philox counter value, past the low 32 bits of the counter and with a seed using its high
// half; and the backward recomputes the forward's mask.
#include <vector>

#include "cuda_test_util.h"

namespace collage::test {
namespace {

constexpr int64_t kSizes[] = {1, 3, 8, 33, 1000, 4099, 70001};
constexpr uint64_t kOffsets[] = {0, 1, 2, 3, 4, 4097, (uint64_t(1) << 34) - 2};
constexpr float kProbabilities[] = {0.0f, 0.1f, 0.5f};

TEST(CudaDropout, ForwardAndBackwardMatchCpuBits) {
  BackendPair pair;
  Rng rng(1);
  const uint64_t seed = 0x1234567800000042ull;
  for (int64_t n : kSizes) {
    for (uint64_t offset : kOffsets) {
      for (float p : kProbabilities) {
        const std::string what = "n=" + std::to_string(n) + " offset=" + std::to_string(offset) +
                                 " p=" + std::to_string(p);
        const Mirrored<bf16> inp(pair, random_values<bf16>(rng, size_t(n)));
        const Mirrored<bf16> out(pair, random_values<bf16>(rng, size_t(n)));
        const Mirrored<bf16> dinp(pair, random_values<bf16>(rng, size_t(n)));
        pair.cpu->dropout_forward(out.cpu(), inp.cpu(), n, p, seed, offset);
        pair.emulated->dropout_forward(out.emulated(), inp.emulated(), n, p, seed, offset);
        pair.cpu->dropout_backward(dinp.cpu(), inp.cpu(), n, p, seed, offset);
        pair.emulated->dropout_backward(dinp.emulated(), inp.emulated(), n, p, seed, offset);
        expect_same_bits(out.from_emulated(), out.from_cpu(), "forward " + what);
        expect_same_bits(dinp.from_emulated(), dinp.from_cpu(), "backward " + what);
      }
    }
  }
}

// The emulated backward from zero gradients is nonzero exactly where the emulated forward kept.
TEST(CudaDropout, BackwardRecomputesTheForwardMask) {
  BackendPair pair;
  const int64_t n = 5003;
  const float p = 0.4f;
  const std::vector<bf16> ones(size_t(n), float_to_bf16(1.0f));
  const Mirrored<bf16> x(pair, ones), out(pair, size_t(n)), dinp(pair, size_t(n));
  pair.emulated->dropout_forward(out.emulated(), x.emulated(), n, p, 99, 12345);
  pair.emulated->dropout_backward(dinp.emulated(), x.emulated(), n, p, 99, 12345);
  const auto forward = out.from_emulated(), backward = dinp.from_emulated();
  int64_t kept = 0;
  for (int64_t i = 0; i < n; i++) {
    ASSERT_EQ(forward[i].bits != 0, backward[i].bits != 0) << "element " << i;
    kept += forward[i].bits != 0;
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, n);
}

}  // namespace
}  // namespace collage::test
