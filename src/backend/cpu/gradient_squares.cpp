// Σ g² of a bf16 gradient chunk by chunk, in the lane order gradient_squares.h states: one
// source, compiled for AVX2 and for AVX-512 (optimizer.cpp picks one). As in
// optimizer_chunks.cpp, the file uses nothing but the numerics headers, which sit in this
// compilation's namespace, so no inline function compiled for AVX-512 can stand in for a baseline
// one (docs/ARCHITECTURE.md, "The cpu optimizer").
//
// The 16 lanes are two AVX-512 double registers or four AVX2 ones. Each group of 16 bf16 is
// widened to fp32 and then to double (both exact), squared and added (a multiply, then an add:
// no fma), the same operations per lane as the scalar path. On the Zen 4 VM the conversions bound
// the loop: the AVX-512 compilation took 8.2 ms for GPT-2 124M's gradients on 2 threads, the
// AVX2 one 9.1, the `omp simd` loop it replaced 9.5 (docs/ARCHITECTURE.md, "The cpu optimizer").
// On the Intel AMX VM, waiting on DRAM bound it (20 ms, 34 with AVX2) until it read 4 KB ahead
// (reg::prefetch_ahead): 12-13 ms with either compilation.
#include "backend/cpu/gradient_squares.h"

#include <algorithm>

#include "numerics/bf16_math.h"
#include "numerics/isa_namespace.h"

#if defined(__AVX2__) && defined(__FMA__)
#include "numerics/lane_registers.h"
#define COLLAGE_GRADIENT_SQUARES_LANES 1
#endif

namespace collage::cpu {
inline namespace COLLAGE_ISA_NAMESPACE {
namespace {

// The square of one bf16 (its bits are the high half of the same fp32), in double: exact.
double square(uint16_t bits) {
  const double g = math::bits_float(uint32_t(bits) << 16);
  return g * g;
}

// One chunk of n elements, in gradient_squares.h's order.
double chunk_sum(const uint16_t* x, int64_t n) {
  double lanes[kSquaresLanes] = {};
  int64_t i = 0;
#ifdef COLLAGE_GRADIENT_SQUARES_LANES
  namespace reg = math::reg;
  constexpr int kRegisters = kSquaresLanes / reg::kWidth;  // fp32 registers a group: 1 or 2
  constexpr int kHalf = reg::kWidth / 2;                   // doubles a double register
  reg::F64 sums[2 * kRegisters];                           // sums[q]: lanes kHalf·q, ...
  for (reg::F64& s : sums) s = reg::zero_f64();
  for (; i + kSquaresLanes <= n; i += kSquaresLanes) {
    if (i % 32 == 0) reg::prefetch_ahead(x + i);  // a 64-byte line: 32 bf16
#pragma GCC unroll 2
    for (int r = 0; r < kRegisters; r++) {
      const reg::F32 g = reg::load_bf16(x + i + reg::kWidth * r);
#pragma GCC unroll 2
      for (int half = 0; half < 2; half++) {
        const reg::F64 d = reg::widen_half(g, half);
        sums[2 * r + half] = reg::add(sums[2 * r + half], reg::mul(d, d));
      }
    }
  }
  for (int q = 0; q < 2 * kRegisters; q++) reg::store_f64(lanes + kHalf * q, sums[q]);
#else
  for (; i + kSquaresLanes <= n; i += kSquaresLanes) {
    for (int k = 0; k < kSquaresLanes; k++) lanes[k] += square(x[i + k]);
  }
#endif
  for (; i < n; i++) lanes[0] += square(x[i]);
  double total = 0;
  for (double lane : lanes) total += lane;
  return total;
}

}  // namespace

void sum_squares_chunks(const uint16_t* x, int64_t n, int threads, double* partial) {
  const int64_t chunks = (n + kSquaresChunk - 1) / kSquaresChunk;
#pragma omp parallel for schedule(static) num_threads(threads) if (chunks > 1)
  for (int64_t c = 0; c < chunks; c++) {
    const int64_t begin = c * kSquaresChunk;
    partial[c] = chunk_sum(x + begin, std::min(kSquaresChunk, n - begin));
  }
}

}  // namespace COLLAGE_ISA_NAMESPACE
}  // namespace collage::cpu
