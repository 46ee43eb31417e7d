// The warp matrix instructions on the host (warp_matrix.h): each lane deposits pointers to its
// registers, and the last lane to arrive assembles the warp's matrices from the fragments,
// computes, and writes every lane's result registers before any lane goes on.
#include "simt/warp_matrix.h"

#include <cstring>

#include "simt/collectives.h"

namespace simt {
namespace {

float bf16_bits_to_float(uint16_t bits) {
  const uint32_t widened = uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &widened, sizeof value);
  return value;
}
uint16_t low_half(uint32_t r) { return uint16_t(r & 0xffffu); }
uint16_t high_half(uint32_t r) { return uint16_t(r >> 16); }

struct MmaLane {
  float* d;
  const uint32_t* a;
  const uint32_t* b;
  const float* c;
};

void complete_mma(void* const lanes[32]) {
  float A[16][16], B[16][8], C[16][8];
  for (int lane = 0; lane < 32; lane++) {
    const MmaLane& in = *static_cast<const MmaLane*>(lanes[lane]);
    const int g = lane / 4, t = lane % 4;
    for (int half = 0; half < 2; half++) {  // rows g and g + 8
      const int row = g + 8 * half;
      A[row][2 * t] = bf16_bits_to_float(low_half(in.a[half]));
      A[row][2 * t + 1] = bf16_bits_to_float(high_half(in.a[half]));
      A[row][2 * t + 8] = bf16_bits_to_float(low_half(in.a[2 + half]));
      A[row][2 * t + 9] = bf16_bits_to_float(high_half(in.a[2 + half]));
      C[row][2 * t] = in.c[2 * half];
      C[row][2 * t + 1] = in.c[2 * half + 1];
    }
    B[2 * t][g] = bf16_bits_to_float(low_half(in.b[0]));
    B[2 * t + 1][g] = bf16_bits_to_float(high_half(in.b[0]));
    B[2 * t + 8][g] = bf16_bits_to_float(low_half(in.b[1]));
    B[2 * t + 9][g] = bf16_bits_to_float(high_half(in.b[1]));
  }
  float D[16][8];
  for (int i = 0; i < 16; i++) {
    for (int j = 0; j < 8; j++) {
      double sum = C[i][j];
      for (int k = 0; k < 16; k++) sum += double(A[i][k]) * double(B[k][j]);
      D[i][j] = float(sum);
    }
  }
  for (int lane = 0; lane < 32; lane++) {  // after every lane's c is read: d may alias c
    const MmaLane& out = *static_cast<const MmaLane*>(lanes[lane]);
    const int g = lane / 4, t = lane % 4;
    out.d[0] = D[g][2 * t];
    out.d[1] = D[g][2 * t + 1];
    out.d[2] = D[g + 8][2 * t];
    out.d[3] = D[g + 8][2 * t + 1];
  }
}

struct LdmatrixLane {
  uint32_t* r;
  int count;
  bool transpose;
  const void* row;
};

void complete_ldmatrix(void* const lanes[32]) {
  const LdmatrixLane& first = *static_cast<const LdmatrixLane*>(lanes[0]);
  const int count = first.count;
  uint16_t M[4][8][8];  // the matrices as the address lanes name them
  for (int lane = 0; lane < 32; lane++) {
    const LdmatrixLane& in = *static_cast<const LdmatrixLane*>(lanes[lane]);
    if (in.count != count || in.transpose != first.transpose)
      detail::kernel_fault("ldmatrix: lane %d asks for .x%d%s, lane 0 for .x%d%s", lane, in.count,
                           in.transpose ? ".trans" : "", count, first.transpose ? ".trans" : "");
    if (lane >= 8 * count) continue;
    if (reinterpret_cast<uintptr_t>(in.row) % 16 != 0)
      detail::kernel_fault("ldmatrix: lane %d's row address %p is not 16-byte aligned", lane,
                           in.row);
    std::memcpy(M[lane / 8][lane % 8], in.row, 16);
  }
  for (int lane = 0; lane < 32; lane++) {
    const LdmatrixLane& out = *static_cast<const LdmatrixLane*>(lanes[lane]);
    const int g = lane / 4, t = lane % 4;
    for (int m = 0; m < count; m++) {
      const uint16_t lo = first.transpose ? M[m][2 * t][g] : M[m][g][2 * t];
      const uint16_t hi = first.transpose ? M[m][2 * t + 1][g] : M[m][g][2 * t + 1];
      out.r[m] = uint32_t(lo) | (uint32_t(hi) << 16);
    }
  }
}

}  // namespace

void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
  MmaLane lane{d, a, b, c};
  detail::warp_exchange(&lane, complete_mma);
}

void ldmatrix(uint32_t* r, int count, bool transpose, const void* row_address) {
  if (count != 1 && count != 2 && count != 4)
    detail::kernel_fault("ldmatrix: .x%d (must be .x1, .x2 or .x4)", count);
  LdmatrixLane lane{r, count, transpose, row_address};
  detail::warp_exchange(&lane, complete_ldmatrix);
}

}  // namespace simt
