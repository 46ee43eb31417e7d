// One optimizer step over one tensor, for every precision strategy (backend/optimizer_step.h).
// The per-element math is src/numerics/collage_math.h, the same __host__ __device__ functions the
// cpu loop (src/backend/cpu/optimizer.cpp) runs, with the same AdamScalars formed once per call
// on the host by math::make_adam_scalars: θ and every state component are bit-identical to
// the cpu's (nvcc builds with -fmad=false; the header's fp32 ops are the __f*_rn intrinsics).
//
// One kernel per call, a kernel instantiation per strategy, grid-stride, the grid derived from
// n. When every pointer is 16-byte aligned a thread steps a group of 8 consecutive elements
// with 128-bit loads and stores of θ, g and each state (two per fp32 state), the rest (and
// unaligned tensors) one element per thread. Why: GPT-2 124M's collage-plus step moves
// 2.76 GB (22 bytes per parameter) but took 3.5 ms on an H100 (~0.8 TB/s); with one 2-byte
// load per tensor and element a thread had ~12 bytes in flight (inferred from the bytes, not
// profiled), 8 elements per access put ~8x that. Predicted, not measured: ~1–1.5 ms.
//
// EDQ (when the caller passes `edq`): each thread sums its elements' terms in a
// math::EdqAccumulator, each block reduces its threads' sums in a fixed tree (counts as
// doubles, exact) into cx.scratch.optimizer_partials, and the last block to finish (a counter in
// the same scratch, reset by that block) adds the blocks' sums in a fixed order into
// edq[0..3]: one launch per tensor instead of two (148 fewer tiny launches per GPT-2 step).
// The order of the EDQ additions depends on n and the alignment only; it differs from the
// cpu's chunked lanes, so the sums agree with the cpu's to rounding (the counts exactly).
#include <algorithm>
#include <type_traits>

#include "backend/cuda/runtime/runtime.h"
#include "kernels/common.cuh"
#include "kernels/kernels.cuh"
#include "numerics/collage_math.h"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN
namespace {

constexpr int kOptimizerThreads = 256;
constexpr int kOptimizerWarps = kOptimizerThreads / kWarpSize;
// Grid-stride beyond this many blocks (derived from n only): 1024 x 256 threads is about what
// an A100 (108 SMs x 2048) or H100 (132 x 2048) keeps resident, enough for a streaming kernel,
// and the emulator starts 4x fewer fibers than with 4096 blocks on large tensors (measured:
// the emulated optimizer step over gpt-tiny's 3.3 M parameters, 829 -> 488 ms).
constexpr int64_t kMaxOptimizerBlocks = 1024;
constexpr int kEdqSums = 4;  // Σ Δ·u, Σ u², #updated, #lost

// What the kernel needs of the step (device pointers and the step's scalars).
struct StepArguments {
  bf16_t* theta;       // (n) the weights
  const bf16_t* grad;  // (n)
  void* state[4];      // per strategy, backend/optimizer_step.h
  int64_t n;
  math::AdamScalars scalars;
  bool reference_quirk;  // collage-plus: the published in-place Mult
  uint64_t rounding_seed;
  int64_t t;
  int64_t rounding_offset;
};

// The storage of a strategy's state components: fp32 for fp32-master, else bf16.
template <Precision P>
using StateT = std::conditional_t<P == Precision::fp32_master, float, bf16_t>;
template <Precision P>
constexpr int kStates = P == Precision::collage_plus                         ? 4
                        : P == Precision::bf16 || P == Precision::stochastic ? 2
                                                                             : 3;

// Steps one element under strategy P, on its values (element i of the tensor); returns its
// EDQ term. theta is not read for fp32-master (it becomes rn(master)).
template <Precision P>
__device__ __forceinline__ math::EdqTerm step_values(const StepArguments& a, int64_t i,
                                                     bf16_t& theta, bf16_t g, StateT<P> (&st)[4]) {
  const math::AdamScalars& s = a.scalars;
  if constexpr (P == Precision::fp32_master) {
    const math::EdqTerm term = math::step_fp32_master(st[0], to_float(g), st[1], st[2], s);
    theta = to_bf16(st[0]);  // the weights the model reads: rn(master)
    return term;
  } else if constexpr (P == Precision::bf16) {
    return math::step_bf16(theta, g, st[0], st[1], s);
  } else if constexpr (P == Precision::collage_light) {
    return math::step_collage_light(theta, g, st[0], st[1], st[2], s);  // st[2]: δθ
  } else if constexpr (P == Precision::collage_plus) {
    return math::step_collage_plus(theta, g, st[0], st[1], st[2], st[3], s,  // δθ, δv
                                   a.reference_quirk);
  } else if constexpr (P == Precision::kahan) {
    return math::step_kahan(theta, g, st[0], st[1], st[2], s);  // st[2]: the compensation
  } else {
    static_assert(P == Precision::stochastic);
    return math::step_stochastic(theta, g, st[0], st[1], s, a.rounding_seed, a.t,
                                 a.rounding_offset + i);
  }
}

// Steps element i under strategy P; returns its EDQ term.
template <Precision P>
__device__ __forceinline__ math::EdqTerm step_element(const StepArguments& a, int64_t i) {
  StateT<P> st[4];
  for (int c = 0; c < kStates<P>; c++) st[c] = static_cast<StateT<P>*>(a.state[c])[i];
  bf16_t theta = P == Precision::fp32_master ? bf16_t{} : a.theta[i];
  const math::EdqTerm term = step_values<P>(a, i, theta, a.grad[i], st);
  for (int c = 0; c < kStates<P>; c++) static_cast<StateT<P>*>(a.state[c])[i] = st[c];
  a.theta[i] = theta;
  return term;
}

// kGroup consecutive elements of T with 128-bit accesses (one Packed128 of bf16, two of fp32).
constexpr int kGroup = Packed128<bf16_t>::size;
template <typename T>
__device__ __forceinline__ void load_group(T (&out)[kGroup], const T* p) {
  constexpr int per = Packed128<T>::size;
  for (int h = 0; h < kGroup / per; h++) {
    const Packed128<T> packed = load128(p + h * per);
    for (int k = 0; k < per; k++) out[h * per + k] = packed.values[k];
  }
}
template <typename T>
__device__ __forceinline__ void store_group(T* p, const T (&in)[kGroup]) {
  constexpr int per = Packed128<T>::size;
  for (int h = 0; h < kGroup / per; h++) {
    Packed128<T> packed;
    for (int k = 0; k < per; k++) packed.values[k] = in[h * per + k];
    store128(p + h * per, packed);
  }
}

// Steps elements [i, i + kGroup) under strategy P (every pointer 16-byte aligned, i a
// multiple of kGroup) with 128-bit accesses, in element order; adds their EDQ terms to edq.
template <Precision P>
__device__ __forceinline__ void step_group(const StepArguments& a, int64_t i,
                                           math::EdqAccumulator& edq) {
  bf16_t theta[kGroup], g[kGroup];
  StateT<P> st[4][kGroup];
  if constexpr (P != Precision::fp32_master) load_group(theta, a.theta + i);
  load_group(g, a.grad + i);
  for (int c = 0; c < kStates<P>; c++) load_group(st[c], static_cast<StateT<P>*>(a.state[c]) + i);
  // Unrolled, so that theta, g and st stay in registers: a loop over k would index them at run
  // time, which puts them in local memory (nvcc did that to collage-plus once math::rn became
  // the paired conversion: 96 bytes of stack a thread).
  COLLAGE_UNROLL
  for (int k = 0; k < kGroup; k++) {
    StateT<P> element[4];
    for (int c = 0; c < kStates<P>; c++) element[c] = st[c][k];
    edq.add(step_values<P>(a, i + k, theta[k], g[k], element));
    for (int c = 0; c < kStates<P>; c++) st[c][k] = element[c];
  }
  store_group(a.theta + i, theta);
  for (int c = 0; c < kStates<P>; c++) store_group(static_cast<StateT<P>*>(a.state[c]) + i, st[c]);
}

// edq[k] += Σ_block partials[4·block + k], by warp 0 of the calling block: lane l adds the
// blocks l, l + 32, ... in order, then the warp's butterfly.
__device__ void add_edq_totals(double* edq, const double* partials, int blocks) {
  const int lane = threadIdx.x;
  for (int k = 0; k < kEdqSums; k++) {
    double total = 0.0;
    for (int block = lane; block < blocks; block += kWarpSize)
      total += partials[kEdqSums * block + k];
    total = warp_sum(total);
    if (lane == 0) edq[k] += total;
  }
}

// The step over elements [0, n): groups [0, vector_groups) of kGroup elements one per thread,
// then the remaining elements one per thread, grid-stride in both. If edq is not null,
// partials[4·block + k] = this block's EDQ sum k (Σ Δ·u, Σ u², #updated, #lost), each summed
// over the block's threads in a fixed tree, and the last block to finish adds them into edq
// (done: a counter, 0 between launches).
template <Precision P>
__global__ void optimizer_kernel(StepArguments a, int64_t vector_groups, double* edq,
                                 double* partials, unsigned* done) {
  math::EdqAccumulator edq_sums;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t group = first; group < vector_groups; group += stride)
    step_group<P>(a, group * kGroup, edq_sums);
  for (int64_t i = vector_groups * kGroup + first; i < a.n; i += stride)
    edq_sums.add(step_element<P>(a, i));
  if (!edq) return;  // the same for the whole block

  __shared__ double warp_sums[kEdqSums][kOptimizerWarps];
  __shared__ bool last;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  double sums[kEdqSums] = {edq_sums.dot, edq_sums.u_squared, double(edq_sums.updated),
                           double(edq_sums.lost)};
  for (int k = 0; k < kEdqSums; k++) {
    sums[k] = warp_sum(sums[k]);
    if (lane == 0) warp_sums[k][warp] = sums[k];
  }
  __syncthreads();
  if (threadIdx.x < kEdqSums) {
    double total = 0.0;
    for (int w = 0; w < int(blockDim.x / kWarpSize); w++) total += warp_sums[threadIdx.x][w];
    partials[kEdqSums * blockIdx.x + threadIdx.x] = total;
  }
  // The classic threadFenceReduction hand-off: each block publishes its partials, then counts
  // itself done; the block that counts last sees every partial.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (warp == 0) add_edq_totals(edq, partials, int(gridDim.x));
  if (threadIdx.x == 0) *done = 0;  // ready for the next launch
}

template <Precision P>
void launch_step(CudaContext& cx, const StepArguments& a, int64_t vector_groups, int blocks,
                 double* edq, double* partials, unsigned* done) {
  launch(cx, "optimizer_step", optimizer_kernel<P>, dim3(unsigned(blocks)),
         dim3(kOptimizerThreads))(a, vector_groups, edq, partials, done);
}

// Whether every tensor of the step is 16-byte aligned (the 128-bit group path).
bool step_aligned(const StepArguments& a, int states) {
  bool aligned = aligned16(a.theta, a.grad);
  for (int c = 0; c < states; c++) aligned = aligned && aligned16(a.state[c]);
  return aligned;
}

}  // namespace

void optimizer_step(CudaContext& cx, const OptimizerStep& step, double* edq) {
  // The step's arguments: checked by the contract (backend_contract.h).
  if (step.n == 0) return;  // nothing to step, nothing to add to edq

  // The scalars exactly as the cpu forms them (src/backend/cpu/optimizer.cpp).
  StepArguments a;
  a.theta = static_cast<bf16_t*>(step.param);
  a.grad = static_cast<const bf16_t*>(step.grad);
  for (int c = 0; c < 4; c++) a.state[c] = step.state[c];
  a.n = step.n;
  a.scalars = math::make_adam_scalars(step.lr, step.beta1, step.beta2, step.eps, step.weight_decay,
                                      step.t, step.adam_order == AdamOrder::hf);
  a.reference_quirk = step.collage_plus_reference_quirk;
  a.rounding_seed = step.rounding_seed;
  a.t = step.t;
  a.rounding_offset = step.rounding_offset;

  const int64_t vector_groups = step_aligned(a, state_count(step.precision)) ? step.n / kGroup : 0;
  // One thread per group, or per element when there are none.
  const int64_t items = vector_groups > 0 ? vector_groups : step.n;
  const int blocks = int(std::min(ceil_div(items, kOptimizerThreads), kMaxOptimizerBlocks));
  double* partials = nullptr;
  unsigned* done = nullptr;
  if (edq) {
    // kMaxOptimizerBlocks partials, then the done counter, zeroed once when the scratch is
    // (re)allocated; the last block of every launch sets it back to 0.
    constexpr size_t kDoneOffset = size_t(kEdqSums) * kMaxOptimizerBlocks * sizeof(double);
    DeviceBuffer& buffer = cx.scratch.optimizer_partials;
    const void* before = buffer.data;
    char* base = scratch<char>(cx, buffer, kDoneOffset + sizeof(unsigned));
    if (base != before) fill_bytes(cx, base + kDoneOffset, 0, sizeof(unsigned));
    partials = reinterpret_cast<double*>(base);
    done = reinterpret_cast<unsigned*>(base + kDoneOffset);
  }
  switch (step.precision) {
    case Precision::fp32_master:
      launch_step<Precision::fp32_master>(cx, a, vector_groups, blocks, edq, partials, done);
      break;
    case Precision::bf16:
      launch_step<Precision::bf16>(cx, a, vector_groups, blocks, edq, partials, done);
      break;
    case Precision::collage_light:
      launch_step<Precision::collage_light>(cx, a, vector_groups, blocks, edq, partials, done);
      break;
    case Precision::collage_plus:
      launch_step<Precision::collage_plus>(cx, a, vector_groups, blocks, edq, partials, done);
      break;
    case Precision::kahan:
      launch_step<Precision::kahan>(cx, a, vector_groups, blocks, edq, partials, done);
      break;
    case Precision::stochastic:
      launch_step<Precision::stochastic>(cx, a, vector_groups, blocks, edq, partials, done);
      break;
  }
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
