// The probe behind tests/cuda/mma_test.cpp: one warp loads a 16×16 A and a 16×8 B through
// kernels/mma.cuh's ldmatrix (plain and .trans) and multiplies them with its mma, writing every
// lane's registers. Built twice, like the kernels: as C++ against the emulator (into test_cuda)
// and, with nvcc, for the GPU (tests/CMakeLists.txt), so the test can compare the two.
#include "backend/cuda/runtime/runtime.h"
#include "kernels/mma.cuh"
#include "tests/cuda/mma_probe.h"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN
namespace {

// a (16, 16) row-major, at (16, 16) = aᵀ, bn (8, 16) = bᵀ (row n), bk (16, 8) = b (row k),
// c (16, 8) fp32; out (32 lanes, kMmaProbeWords).
__global__ void mma_probe_kernel(uint32_t* out, const bf16_t* a, const bf16_t* at, const bf16_t* bn,
                                 const bf16_t* bk, const float* c) {
  __shared__ __align__(16) uint16_t tile_bits[4][16 * 16];  // a, at, bn, bk
  bf16_t(*tiles)[16 * 16] = reinterpret_cast<bf16_t(*)[16 * 16]>(tile_bits);
  const int lane = threadIdx.x;
  for (int e = lane; e < 256; e += 32) {
    tiles[0][e] = a[e];
    tiles[1][e] = at[e];
    if (e < 128) tiles[2][e] = bn[e], tiles[3][e] = bk[e];
  }
  __syncwarp();
  FragmentA a_plain, a_trans;
  FragmentB b_plain, b_trans;
  // x4: lanes 0-7 rows 0-7 | 8-15 rows 8-15 (columns 0-7), then the same rows at column 8.
  ldmatrix<4, false>(a_plain.r, &tiles[0][(lane % 16) * 16 + (lane / 16) * 8]);
  // aᵀ's 8×8 blocks transposed: matrix m of A is aᵀ rows 8·(m / 2).., columns 8·(m % 2)..
  const int m = lane / 8, r = lane % 8;
  ldmatrix<4, true>(a_trans.r, &tiles[1][((m / 2) * 8 + r) * 16 + (m % 2) * 8]);
  // x2: lanes 0-7 rows n = 0-7 at k = 0, lanes 8-15 the same rows at k = 8.
  ldmatrix<2, false>(b_plain.r, &tiles[2][(lane % 8) * 16 + ((lane / 8) % 2) * 8]);
  // x2.trans: lanes 0-15 rows k = 0-15 of b.
  ldmatrix<2, true>(b_trans.r, &tiles[3][(lane % 16) * 8]);
  FragmentC d_plain, d_trans;
  const int g = lane / 4, t = lane % 4;
  const float c_lane[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t],
                           c[(g + 8) * 8 + 2 * t + 1]};
  for (int i = 0; i < 4; i++) d_plain.v[i] = d_trans.v[i] = c_lane[i];
  mma(d_plain, a_plain, b_plain);
  mma(d_trans, a_trans, b_trans);
  uint32_t* o = out + lane * kMmaProbeWords;
  for (int i = 0; i < 4; i++) o[i] = a_plain.r[i], o[4 + i] = a_trans.r[i];
  for (int i = 0; i < 2; i++) o[8 + i] = b_plain.r[i], o[10 + i] = b_trans.r[i];
  for (int i = 0; i < 4; i++) {
    memcpy(&o[12 + i], &d_plain.v[i], 4);
    memcpy(&o[16 + i], &d_trans.v[i], 4);
  }
}

}  // namespace

std::vector<uint32_t> run_mma_probe(const MmaProbeInput& in) {
  CudaContext cx;
  open_context(cx, 0);
  auto put = [&](const void* host, size_t bytes) {
    void* p = device_allocate(cx, bytes);
    upload(cx, p, host, bytes);
    return p;
  };
  auto* a = static_cast<bf16_t*>(put(in.a.data(), 256 * 2));
  auto* at = static_cast<bf16_t*>(put(in.at.data(), 256 * 2));
  auto* bn = static_cast<bf16_t*>(put(in.bn.data(), 128 * 2));
  auto* bk = static_cast<bf16_t*>(put(in.bk.data(), 128 * 2));
  auto* c = static_cast<float*>(put(in.c.data(), 128 * 4));
  auto* out = static_cast<uint32_t*>(device_allocate(cx, 32 * kMmaProbeWords * 4));
  launch(cx, "mma_probe", mma_probe_kernel, dim3(1), dim3(32))(out, a, at, bn, bk, c);
  std::vector<uint32_t> result(32 * kMmaProbeWords);
  download(cx, result.data(), out, result.size() * 4);
  for (void* p : {static_cast<void*>(a), static_cast<void*>(at), static_cast<void*>(bn),
                  static_cast<void*>(bk), static_cast<void*>(c), static_cast<void*>(out)})
    device_release(cx, p);
  close_context(cx);
  return result;
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
