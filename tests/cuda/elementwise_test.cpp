// kernels/elementwise.cu under the host emulator against the cpu backend
// (src/backend/cpu/elementwise.cpp): GELU forward and backward, add, accumulate and scale must
// agree bit for bit (the same fp32 operations in the same order, one rounding), and the casts
// must equal numerics/bf16.h's conversions, which the cpu backend's loads and stores use.
//
// Every op runs at sizes that are and are not multiples of 8 (a Packed128 of bf16), 32 and 128,
// and at two offsets from the 256-byte aligned allocation: 0 elements (the 128-bit path with a
// scalar tail) and 1 element (2 bytes: the scalar fallback). The buffers carry guard elements
// before and after the n elements, which must come back unchanged (compared with the cpu's).
#include <cstring>
#include <vector>

#include "../../kernels/kernels.cuh"
#include "backend/cuda/runtime/runtime.h"
#include "cuda_test_util.h"
#include "elementwise_inputs.h"

namespace collage::test {
namespace {

constexpr int64_t kSizes[] = {1, 7, 8, 33, 1000, 1024, 4099, 4096};

TEST(CudaElementwise, GeluForwardMatchesCpuBits) {
  BackendPair pair;
  Rng rng(11);
  for (int64_t n : kSizes) {
    for (int offset : kOffsets) {
      const Mirrored<bf16> inp(pair, activation_inputs(rng, n, offset));
      const Mirrored<bf16> out(pair, padded_values(rng, n, offset));
      pair.cpu->gelu_forward(out.cpu() + offset, inp.cpu() + offset, n);
      pair.emulated->gelu_forward(out.emulated() + offset, inp.emulated() + offset, n);
      expect_same_bits(out.from_emulated(), out.from_cpu(), label("gelu_forward", n, offset));
    }
  }
}

TEST(CudaElementwise, GeluBackwardWritesTheCpuBits) {
  BackendPair pair;
  Rng rng(12);
  for (int64_t n : kSizes) {
    for (int offset : kOffsets) {
      const Mirrored<bf16> inp(pair, activation_inputs(rng, n, offset));
      const Mirrored<bf16> dout(pair, padded_values(rng, n, offset));
      const Mirrored<bf16> dinp(pair, padded_values(rng, n, offset));  // written over
      pair.cpu->gelu_backward(dinp.cpu() + offset, inp.cpu() + offset, dout.cpu() + offset, n);
      pair.emulated->gelu_backward(dinp.emulated() + offset, inp.emulated() + offset,
                                   dout.emulated() + offset, n);
      expect_same_bits(dinp.from_emulated(), dinp.from_cpu(), label("gelu_backward", n, offset));
    }
  }
}

// gelu_backward_bias: dinp and the bias gradient in one pass over the rows (one launch for
// both plus the column totals) must give exactly what gelu_backward (or gelu_erf_backward) and
// then matmul_backward's dbias give on the same backend, and dinp the cpu's bits. Shapes: row
// counts around the 32-row chunks of the column sums, column counts on both sides of a
// 1024-column block, one not a multiple of 8 (the unfused path), and offset 1 (unaligned: the
// unfused path too); dbias starts nonzero (it accumulates). On a GPU the exact GELU's dinp is
// within gelu_erf_backward_bound of the cpu's (erff), not bit for bit.
TEST(CudaElementwise, GeluBackwardBiasIsTheGeluThenTheBiasGradient) {
  BackendPair pair;
  Rng rng(16);
  const std::pair<int64_t, int> shapes[] = {{1, 8},     {31, 16},   {33, 24},
                                            {70, 1032}, {64, 3072}, {45, 20}};
  for (const bool exact : {false, true}) {
    for (const auto& [N, C] : shapes) {
      for (int offset : kOffsets) {
        const std::string what =
            label(exact ? "gelu_erf_backward_bias" : "gelu_backward_bias", N * C, offset) +
            " C=" + std::to_string(C);
        const Mirrored<bf16> inp(pair, activation_inputs(rng, N * C, offset));
        const Mirrored<bf16> dout(pair, padded_values(rng, N * C, offset));
        const std::vector<bf16> dinp_start = padded_values(rng, N * C, offset);  // written over
        const std::vector<bf16> dbias_start = padded_values(rng, C, 0, 4.0);
        const Mirrored<bf16> fused_dinp(pair, dinp_start), fused_dbias(pair, dbias_start);
        const Mirrored<bf16> two_dinp(pair, dinp_start), two_dbias(pair, dbias_start);
        Backend& gpu = *pair.emulated;
        gpu.gelu_backward_bias(fused_dinp.emulated() + offset, fused_dbias.emulated(),
                               inp.emulated() + offset, dout.emulated() + offset, N, C, exact);
        if (exact) {
          gpu.gelu_erf_backward(two_dinp.emulated() + offset, inp.emulated() + offset,
                                dout.emulated() + offset, N * C);
        } else {
          gpu.gelu_backward(two_dinp.emulated() + offset, inp.emulated() + offset,
                            dout.emulated() + offset, N * C);
        }
        gpu.matmul_backward(nullptr, nullptr, two_dbias.emulated(), two_dinp.emulated() + offset,
                            nullptr, nullptr, N, 0, C);
        expect_same_bits(fused_dinp.from_emulated(), two_dinp.from_emulated(), what + " dinp");
        expect_same_bits(fused_dbias.from_emulated(), two_dbias.from_emulated(), what + " dbias");
        // and dinp as the cpu writes it
        pair.cpu->gelu_backward_bias(fused_dinp.cpu() + offset, fused_dbias.cpu(),
                                     inp.cpu() + offset, dout.cpu() + offset, N, C, exact);
        // bit for bit, but for erff: CUDA's on a GPU, glibc's on the cpu
        const std::vector<bf16> dinp_cpu = fused_dinp.from_cpu();
        if (exact) {
          const std::vector<bf16> dy = dout.from_cpu();
          expect_close_on_device(
              fused_dinp.from_emulated(), dinp_cpu,
              [&](size_t k) { return gelu_erf_backward_bound(dy[k], dinp_cpu[k]); },
              what + " vs cpu");
        } else {
          expect_same_bits(fused_dinp.from_emulated(), dinp_cpu, what + " vs cpu");
        }
      }
    }
  }
}

TEST(CudaElementwise, AddAndAccumulateMatchCpuBits) {
  BackendPair pair;
  Rng rng(13);
  for (int64_t n : kSizes) {
    for (int offset : kOffsets) {
      const Mirrored<bf16> a(pair, padded_values(rng, n, offset));
      const Mirrored<bf16> b(pair, padded_values(rng, n, offset, 0.01));  // rounding matters
      const Mirrored<bf16> out(pair, padded_values(rng, n, offset));
      pair.cpu->add(out.cpu() + offset, a.cpu() + offset, b.cpu() + offset, n);
      pair.emulated->add(out.emulated() + offset, a.emulated() + offset, b.emulated() + offset, n);
      expect_same_bits(out.from_emulated(), out.from_cpu(), label("add", n, offset));

      pair.cpu->accumulate(a.cpu() + offset, b.cpu() + offset, n);
      pair.emulated->accumulate(a.emulated() + offset, b.emulated() + offset, n);
      expect_same_bits(a.from_emulated(), a.from_cpu(), label("accumulate", n, offset));
    }
  }
}

TEST(CudaElementwise, ScaleMatchesCpuBits) {
  BackendPair pair;
  Rng rng(14);
  // 1e-38 takes products into bf16's subnormals.
  for (float factor : {0.37f, -3.0f, 1e-38f}) {
    for (int64_t n : kSizes) {
      for (int offset : kOffsets) {
        const Mirrored<bf16> x(pair, padded_values(rng, n, offset));
        pair.cpu->scale(x.cpu() + offset, factor, n);
        pair.emulated->scale(x.emulated() + offset, factor, n);
        expect_same_bits(x.from_emulated(), x.from_cpu(),
                         label("scale", n, offset) + " factor=" + std::to_string(factor));
      }
    }
  }
}

// The casts have no Backend method (the cuda backend uses them internally), so this calls the
// kernels directly on an emulated CudaContext and compares with numerics/bf16.h.
class EmulatedContext {
 public:
  EmulatedContext() { cuda::open_context(cx, 0); }
  ~EmulatedContext() {
    release();
    cuda::close_context(cx);
  }
  template <typename T>
  T* device(const std::vector<T>& host) {
    void* p = cuda::device_allocate(cx, host.size() * sizeof(T));
    allocations_.push_back(p);
    cuda::upload(cx, p, host.data(), host.size() * sizeof(T));
    return static_cast<T*>(p);
  }
  template <typename T>
  std::vector<T> host(const T* p, size_t count) {
    std::vector<T> v(count);
    cuda::download(cx, v.data(), p, count * sizeof(T));
    return v;
  }
  void release() {
    for (void* p : allocations_) cuda::device_release(cx, p);
    allocations_.clear();
  }
  cuda::CudaContext cx;

 private:
  std::vector<void*> allocations_;
};

float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

TEST(CudaElementwise, CastsMatchCoreConversions) {
  EmulatedContext e;
  // bf16 -> fp32: every bf16 bit pattern, NaNs included (widening only moves bits).
  std::vector<bf16> all(1 << 16);
  for (uint32_t u = 0; u < all.size(); u++) all[u].bits = uint16_t(u);
  for (int offset : kOffsets) {
    const int64_t n = int64_t(all.size()) - offset - 3;  // odd size, both offsets
    const bf16* in = e.device(all);
    float* out = e.device(std::vector<float>(all.size(), -1.0f));
    cuda::bf16_to_float(e.cx, out + offset, reinterpret_cast<const cuda::bf16_t*>(in) + offset, n);
    const std::vector<float> got = e.host(out, all.size());
    std::vector<float> want(all.size(), -1.0f);
    for (int64_t i = offset; i < offset + n; i++) want[i] = bf16_to_float(all[i]);
    expect_same_bits(got, want, label("bf16_to_float", n, offset));
    e.release();
  }
  // fp32 -> bf16: random bit patterns (every exponent, subnormals, infinities), exact ties
  // (low half 0x8000, even and odd kept parts) and the largest finite floats, which round to
  // infinity. NaNs are left out: numerics/bf16.h keeps a NaN's sign and payload while the kernels'
  // math::rn (numerics/bf16_math.h, the device's cvt.rn.bf16.f32) gives the canonical 0x7fff.
  Rng rng(15);
  std::vector<float> values;
  for (int k = 0; k < 4099; k++) {
    const uint32_t u = uint32_t(rng.integer(0, 0x7fffffff)) | (rng.integer(0, 1) ? 0x80000000u : 0);
    const float f = bits_to_float(u);
    values.push_back(std::isnan(f) ? 0.0f : f);
  }
  for (uint32_t high : {0x3f80u, 0x3f81u, 0x0000u, 0x0001u, 0xc2c9u})
    values.push_back(bits_to_float(high << 16 | 0x8000u));
  for (uint32_t u : {0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u, 0x007fffffu})
    values.push_back(bits_to_float(u));
  for (int offset : kOffsets) {
    const int64_t n = int64_t(values.size()) - offset;
    const float* in = e.device(values);
    bf16* out = e.device(std::vector<bf16>(values.size(), float_to_bf16(-1.0f)));
    cuda::float_to_bf16(e.cx, reinterpret_cast<cuda::bf16_t*>(out) + offset, in + offset, n);
    const std::vector<bf16> got = e.host(out, values.size());
    std::vector<bf16> want(values.size(), float_to_bf16(-1.0f));
    for (int64_t i = offset; i < offset + n; i++) want[i] = float_to_bf16(values[i]);
    expect_same_bits(got, want, label("float_to_bf16", n, offset));
    e.release();
  }
}

}  // namespace
}  // namespace collage::test
