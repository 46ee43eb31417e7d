// The encoder's exact GELU and tanh (kernels/elementwise.cu) against the cpu backend. Both
// evaluate the shared numerics/elementwise_math.h functions; under the host emulator erff and
// tanhf are glibc's on both sides, so the results agree bit for bit.
//
// On a GPU (cuda_on_device()) erff and tanhf are CUDA's: at most 2 ulp from the exact value
// (CUDA C++ Programming Guide, "Mathematical Functions", single precision), where glibc's are
// within 1 ulp (erff) and 2 ulp (tanhf) on x86-64 (the GNU C Library manual, "Known Maximum
// Errors in Math Functions"). Propagated through each formula (no fma: -fmad=false), the fp32
// values before the one bf16 rounding then differ by at most δ below, and two fp32 values δ
// apart round to bf16 values at most δ + one bf16 spacing apart:
//  - gelu_erf(x) = fl(0.5x · fl(1 + E)), E = erff(x/√2): |ΔE| ≤ 3 ulp(E) ≤ 3·2^-24 (|E| ≤ 1);
//    the sum rounds to a spacing of ≤ 2^-23 (it is ≤ 2), so |Δ(1 + E)| ≤ 5·2^-24, and the
//    product adds one fp32 rounding: δ = 2.5·2^-24·|x| + ulp32(y). The bound is absolute: for
//    x ≲ −4, 1 + E cancels to a few ulp of E and y ≈ −1e-6 may differ by many bf16 ulps (an
//    H100 gave 0xb613 where the cpu gives 0xb61d), while where y is not tiny it is one bf16 ulp.
//  - its backward fl(D·dy), D = fl(0.5·(1 + E) + x·φ(x)) (φ from exp_approx, the same bits):
//    |ΔD| ≤ 2.5·2^-24 + ulp32(D) ≤ 4.5·2^-24 (D < 1.13 < 2), and the product adds a rounding:
//    δ = 4.5·2^-24·|dy| + ulp32(result) (gelu_erf_backward_bound in cuda_test_util.h). The
//    bound is absolute too: where D is tiny (x ≲ −4) dx may be several bf16 ulps from the cpu's
//    (an H200 gave 0x3414 where the cpu gives 0x3411).
//  - tanh: |Δ tanhf| ≤ 4 ulp32(y), δ = 4 ulp32(y) (below a bf16 spacing: at most one bf16 ulp).
//    Its backward (1 − y²)·dy reads the saved output, which both backends are given from the
//    cpu's forward: it calls no libm function and must agree bit for bit everywhere.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda_test_util.h"
#include "elementwise_inputs.h"

namespace collage::test {
namespace {

constexpr int64_t kSizes[] = {1, 7, 8, 33, 1000, 1024, 4099};

enum class Op { gelu_erf, tanh };

void check_forward_and_backward(Op op, uint64_t seed) {
  BackendPair pair;
  Rng rng(seed);
  const char* name = op == Op::gelu_erf ? "gelu_erf" : "tanh";
  for (int64_t n : kSizes) {
    for (int offset : kOffsets) {
      const std::vector<bf16> x0 = activation_inputs(rng, n, offset),
                              dx0 = padded_values(rng, n, offset);
      const std::vector<bf16> dy0 = padded_values(rng, n, offset);
      const Mirrored<bf16> inp(pair, x0);
      const Mirrored<bf16> out(pair, padded_values(rng, n, offset));
      const Mirrored<bf16> dout(pair, dy0);
      const Mirrored<bf16> dinp(pair, dx0);
      for (Backend* backend : {pair.cpu.get(), pair.emulated.get()}) {
        const bool cpu = backend == pair.cpu.get();
        bf16* x = (cpu ? inp.cpu() : inp.emulated()) + offset;
        bf16* y = (cpu ? out.cpu() : out.emulated()) + offset;
        if (op == Op::gelu_erf) backend->gelu_erf_forward(y, x, n);
        if (op == Op::tanh) backend->tanh_forward(y, x, n);
      }
      // tanh's backward reads the saved output: the cpu's forward, given to both.
      const Mirrored<bf16> saved(pair, out.from_cpu());
      for (Backend* backend : {pair.cpu.get(), pair.emulated.get()}) {
        const bool cpu = backend == pair.cpu.get();
        bf16* x = (cpu ? inp.cpu() : inp.emulated()) + offset;
        bf16* y = (cpu ? saved.cpu() : saved.emulated()) + offset;
        bf16* dy = (cpu ? dout.cpu() : dout.emulated()) + offset;
        bf16* dx = (cpu ? dinp.cpu() : dinp.emulated()) + offset;
        if (op == Op::gelu_erf) backend->gelu_erf_backward(dx, x, dy, n);
        if (op == Op::tanh) backend->tanh_backward(dx, y, dy, n);
      }
      const auto y = out.from_cpu(), dx = dinp.from_cpu();
      const auto value = [](const std::vector<bf16>& v, size_t k) {
        return std::fabs(double(bf16_to_float(v[k])));
      };
      if (op == Op::gelu_erf) {
        expect_close_on_device(
            out.from_emulated(), y,
            [&](size_t k) { return 2.5 * 0x1p-24 * value(x0, k) + fp32_ulp(value(y, k)); },
            label(name, n, offset));
        expect_close_on_device(
            dinp.from_emulated(), dx,
            [&](size_t k) { return gelu_erf_backward_bound(dy0[k], dx[k]); },
            label(name, n, offset) + " backward");
      } else {
        expect_close_on_device(
            out.from_emulated(), y, [&](size_t k) { return 4 * fp32_ulp(value(y, k)); },
            label(name, n, offset));
        expect_same_bits(dinp.from_emulated(), dx, label(name, n, offset) + " backward");
      }
    }
  }
}

TEST(CudaEncoderElementwise, GeluErfMatchesCpuBits) { check_forward_and_backward(Op::gelu_erf, 1); }
TEST(CudaEncoderElementwise, TanhMatchesCpuBits) { check_forward_and_backward(Op::tanh, 2); }

}  // namespace
}  // namespace collage::test
