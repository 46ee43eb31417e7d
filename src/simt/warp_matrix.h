#pragma once
// The warp-wide matrix instructions of Ampere and Hopper that collage's tensor-core kernels use
// (through kernels/mma.cuh, which is inline PTX under nvcc and these functions under g++), as
// warp collectives with the fragment layouts the PTX ISA documents ("Matrix Fragments for
// mma.m16n8k16" and "ldmatrix"). Every lane holds exactly the registers the hardware gives it:
// a 32-bit register holds two bf16, the lower-indexed element in the low half.
//
// With g = lane / 4 and t = lane % 4:
//   A (16×16, row-major), 4 registers: a[0] = A[g][2t, 2t+1],   a[1] = A[g+8][2t, 2t+1],
//                                      a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9]
//   B (16×8, k × n),      2 registers: b[0] = B[2t, 2t+1][g],   b[1] = B[2t+8, 2t+9][g]
//   C, D (16×8, fp32),    4 floats:    c[0..1] = C[g][2t, 2t+1], c[2..3] = C[g+8][2t, 2t+1]
// ldmatrix reads `count` (1, 2 or 4) 8×8 matrices of 16-bit elements whose rows are 16
// contiguous, 16-byte aligned bytes: lanes 8m .. 8m+7 give the row addresses of matrix m (the
// other lanes' addresses are ignored for count < 4), and lane l gets r[m] = M_m[g][2t, 2t+1],
// or with `transpose` r[m] = (M_m[2t][g], M_m[2t+1][g]).
//
// Arithmetic: bf16 products are exact; a GPU sums them with c in an order and internal
// precision that NVIDIA does not document. The emulator sums the 16 products and c in double
// and rounds once to fp32 (nearest-even), which is at least as accurate; a GPU may differ in
// the last bits of a sum that is not exact in fp32 (tests/cuda/mma_test.cpp uses sums that
// are, to compare layouts bit for bit).
//
// Both are collectives of the whole warp (simt::detail::warp_exchange): every lane of the warp
// must execute them, as .sync.aligned requires; a misaligned row address is a kernel fault.
#include <cstdint>

namespace simt {

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d = a·b + c (d may be c).
void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]);

// ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16: r[0 .. count) from the warp's rows.
void ldmatrix(uint32_t* r, int count, bool transpose, const void* row_address);

}  // namespace simt
