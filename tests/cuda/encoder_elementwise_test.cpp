// The encoder's exact GELU and tanh (kernels/elementwise.cu) under the host emulator against the
// cpu backend: bit for bit. Both evaluate the shared backend/elementwise_math.h functions, and
// under emulation erff/tanhf are glibc's on both sides. (On a GPU, CUDA's erff and tanhf may
// differ from glibc's by an ulp, so there the results may differ by a bf16 ulp where the fp32
// values straddle a rounding boundary; no GPU runs these tests.)
#include <vector>

#include "cuda_test_util.h"

namespace collage::test {
namespace {

constexpr int64_t kSizes[] = {1, 7, 8, 33, 1000, 1024, 4099};
constexpr int kOffsets[] = {0, 1};  // elements from the aligned start: 128-bit path, scalar path
constexpr int kGuard = 9;

std::string label(const char* op, int64_t n, int offset) {
  return std::string(op) + " n=" + std::to_string(n) + " offset=" + std::to_string(offset);
}

std::vector<bf16> padded(Rng& rng, int64_t n, int offset, double scale = 1.0) {
  return random_values<bf16>(rng, size_t(n + offset + kGuard), scale);
}

// N(0, 9) with tails, ±0, subnormals and saturating values.
std::vector<bf16> inputs(Rng& rng, int64_t n, int offset) {
  std::vector<bf16> v = padded(rng, n, offset, 3.0);
  const float specials[] = {0.0f, -0.0f, 1e-39f, -1e-39f, 12.0f, -12.0f, 60.0f, -60.0f};
  for (size_t k = 0; k < std::size(specials) && k < size_t(n); k++)
    v[offset + k * 3 % n] = float_to_bf16(specials[k]);
  return v;
}

enum class Op { gelu_erf, tanh };

void check_forward_and_backward(Op op, uint64_t seed) {
  BackendPair pair;
  Rng rng(seed);
  const char* name = op == Op::gelu_erf ? "gelu_erf" : "tanh";
  for (int64_t n : kSizes) {
    for (int offset : kOffsets) {
      const Mirrored<bf16> inp(pair, inputs(rng, n, offset));
      const Mirrored<bf16> out(pair, padded(rng, n, offset));
      const Mirrored<bf16> dout(pair, padded(rng, n, offset));
      const Mirrored<bf16> dinp(pair, padded(rng, n, offset));
      for (Backend* backend : {pair.cpu.get(), pair.emulated.get()}) {
        const bool cpu = backend == pair.cpu.get();
        bf16* x = (cpu ? inp.cpu() : inp.emulated()) + offset;
        bf16* y = (cpu ? out.cpu() : out.emulated()) + offset;
        bf16* dy = (cpu ? dout.cpu() : dout.emulated()) + offset;
        bf16* dx = (cpu ? dinp.cpu() : dinp.emulated()) + offset;
        if (op == Op::gelu_erf) {
          backend->gelu_erf_forward(y, x, n);
          backend->gelu_erf_backward(dx, x, dy, n);
        } else {
          backend->tanh_forward(y, x, n);
          backend->tanh_backward(dx, y, dy, n);  // from the saved output
        }
      }
      expect_same_bits(out.from_emulated(), out.from_cpu(), label(name, n, offset));
      expect_same_bits(dinp.from_emulated(), dinp.from_cpu(), label(name, n, offset) + " backward");
    }
  }
}

TEST(CudaEncoderElementwise, GeluErfMatchesCpuBits) { check_forward_and_backward(Op::gelu_erf, 1); }
TEST(CudaEncoderElementwise, TanhMatchesCpuBits) { check_forward_and_backward(Op::tanh, 2); }

}  // namespace
}  // namespace collage::test
