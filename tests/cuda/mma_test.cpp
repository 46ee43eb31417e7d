// kernels/mma.cuh: ldmatrix and mma.m16n8k16 (bf16 → fp32) through the wrapper the attention
// kernels use. Under the emulator every lane's registers are checked against the fragment
// layouts written out from the PTX ISA (independently of src/simt/warp_matrix.cpp's code), and
// the product against a double-precision one. On a real GPU (when one is usable) the same probe
// runs on the device and must give the emulator's bits in every register of every lane: the
// emulated layout is then the hardware's. The inputs are small integers (and halves), so every
// product and sum is exact in fp32 and the comparison can be bit for bit whatever order the
// tensor cores add in.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/backend.h"
#include "dist/backend_choice.h"
#include "mma_probe.h"
#include "numerics/bf16.h"

namespace collage::test {
namespace {

using cuda::kMmaProbeWords;
using cuda::MmaProbeInput;

uint16_t bits_of(float x) { return float_to_bf16(x).bits; }  // exact for these small values

// A[i][k] and B[k][n], distinct small values so a misplaced element shows.
float a_value(int i, int k) { return float((i * 16 + k) % 13 - 6); }
float b_value(int k, int n) { return float((k * 8 + n) % 11 - 5) * 0.5f; }
float c_value(int i, int n) { return float(i - n) * 0.25f; }

MmaProbeInput make_input() {
  MmaProbeInput in;
  in.a.resize(256), in.at.resize(256), in.bn.resize(128), in.bk.resize(128), in.c.resize(128);
  for (int i = 0; i < 16; i++) {
    for (int k = 0; k < 16; k++) {
      in.a[i * 16 + k] = bits_of(a_value(i, k));
      in.at[k * 16 + i] = bits_of(a_value(i, k));
    }
  }
  for (int k = 0; k < 16; k++) {
    for (int n = 0; n < 8; n++) {
      in.bk[k * 8 + n] = bits_of(b_value(k, n));
      in.bn[n * 16 + k] = bits_of(b_value(k, n));
    }
  }
  for (int i = 0; i < 16; i++)
    for (int n = 0; n < 8; n++) in.c[i * 8 + n] = c_value(i, n);
  return in;
}

uint32_t pair(float low, float high) {
  return uint32_t(bits_of(low)) | uint32_t(bits_of(high)) << 16;
}

TEST(CudaMma, EmulatedFragmentsFollowThePtxLayout) {
  const std::vector<uint32_t> out = cuda::emulated::run_mma_probe(make_input());
  for (int lane = 0; lane < 32; lane++) {
    const uint32_t* o = &out[lane * kMmaProbeWords];
    const int g = lane / 4, t = lane % 4;
    // PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type".
    const uint32_t a[4] = {pair(a_value(g, 2 * t), a_value(g, 2 * t + 1)),
                           pair(a_value(g + 8, 2 * t), a_value(g + 8, 2 * t + 1)),
                           pair(a_value(g, 2 * t + 8), a_value(g, 2 * t + 9)),
                           pair(a_value(g + 8, 2 * t + 8), a_value(g + 8, 2 * t + 9))};
    const uint32_t b[2] = {pair(b_value(2 * t, g), b_value(2 * t + 1, g)),
                           pair(b_value(2 * t + 8, g), b_value(2 * t + 9, g))};
    for (int r = 0; r < 4; r++) {
      EXPECT_EQ(o[r], a[r]) << "lane " << lane << " a[" << r << "] (ldmatrix.x4)";
      EXPECT_EQ(o[4 + r], a[r]) << "lane " << lane << " a[" << r << "] (ldmatrix.x4.trans)";
    }
    for (int r = 0; r < 2; r++) {
      EXPECT_EQ(o[8 + r], b[r]) << "lane " << lane << " b[" << r << "] (ldmatrix.x2)";
      EXPECT_EQ(o[10 + r], b[r]) << "lane " << lane << " b[" << r << "] (ldmatrix.x2.trans)";
    }
    const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int r = 0; r < 4; r++) {
      double want = c_value(rows[r], cols[r]);
      for (int k = 0; k < 16; k++) want += double(a_value(rows[r], k)) * b_value(k, cols[r]);
      float plain, trans;
      std::memcpy(&plain, &o[12 + r], 4);
      std::memcpy(&trans, &o[16 + r], 4);
      EXPECT_EQ(plain, float(want)) << "lane " << lane << " d[" << r << "]";
      EXPECT_EQ(trans, float(want)) << "lane " << lane << " d[" << r << "] (from .trans loads)";
    }
  }
}

TEST(CudaMma, DeviceRegistersEqualTheEmulators) {
#if defined(COLLAGE_HAVE_CUDA)
  if (choose_backend("auto").name != "cuda") GTEST_SKIP() << "no usable GPU";
  const MmaProbeInput in = make_input();
  const std::vector<uint32_t> emulated = cuda::emulated::run_mma_probe(in);
  const std::vector<uint32_t> device = cuda::device::run_mma_probe(in);
  ASSERT_EQ(device.size(), emulated.size());
  int misses = 0;
  for (size_t w = 0; w < device.size(); w++) {
    if (device[w] != emulated[w] && ++misses <= 8)
      ADD_FAILURE() << "lane " << w / kMmaProbeWords << " word " << w % kMmaProbeWords
                    << ": device 0x" << std::hex << device[w] << ", emulator 0x" << emulated[w];
  }
  EXPECT_EQ(misses, 0);
#else
  GTEST_SKIP() << "this build has no CUDA (nvcc was not found)";
#endif
}

}  // namespace
}  // namespace collage::test
