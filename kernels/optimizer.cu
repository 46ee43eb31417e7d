// One optimizer step over a list of tensors, for every precision strategy
// (backend/optimizer_step.h), in one launch. The per-element math is
// src/numerics/collage_math.h, the same __host__ __device__ functions the cpu loop
// (src/backend/cpu/optimizer.cpp) runs, with the same AdamScalars formed on the host by
// math::make_adam_scalars: θ and every state component are bit-identical to the cpu's (nvcc
// builds with -fmad=false; the header's fp32 ops are the __f*_rn intrinsics).
//
// Work split. Each tensor is cut into chunks of kChunkElements; chunk c of the launch belongs to
// the tensor whose first chunk is the last at or before c (a binary search in the tensor table,
// uploaded per launch). A warp steps a chunk, the warps of the grid stride over the chunks. In
// a chunk, when every pointer of the tensor is 16-byte aligned, a lane steps groups of 8
// consecutive elements with 128-bit loads and stores of θ, g and each state (two per fp32
// state), the tensor's last n % 8 elements (and every element of an unaligned tensor) one per
// lane.
// Why one launch: GPT-2 124M has 148 parameter tensors, most of them small (layernorm and bias
// vectors of 768–3072 elements, weights of 0.6–2.4 M). With a launch per tensor, the collage-plus
// step took 3.46 ms on an H100 where the 1.3B model's per-element rate predicts 1.9 ms: each
// small launch filled a fraction of the GPU for a few µs, each thread stepping one group of 8
// elements in a chain of dependent latencies (docs/ARCHITECTURE.md, "What each change to the
// GPU step bought").
//
// EDQ (when any step asks for it): a warp sums its chunk's terms per lane in a
// math::EdqAccumulator and reduces them with its butterfly into the chunk's partials (counts as
// doubles, exact); then edq_totals_kernel adds each tensor's chunks in chunk order into its
// edq[0..3]. The order depends on the tensor's n and alignment only; it differs from the cpu's
// chunked lanes, so the sums agree with the cpu's to rounding (the counts exactly).
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "backend/cuda/runtime/runtime.h"
#include "kernels/common.cuh"
#include "kernels/kernels.cuh"
#include "numerics/collage_math.h"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN
namespace {

constexpr int kOptimizerThreads = 256;
constexpr int kOptimizerWarps = kOptimizerThreads / kWarpSize;
// Grid-stride beyond this many blocks: 1024 x 256 threads is about what an A100 (108 SMs x
// 2048) or H100 (132 x 2048) keeps resident, enough for a streaming kernel, and the emulator
// starts fewer fibers than with a block per chunk (measured: the emulated optimizer step over
// gpt-tiny's 3.3 M parameters, 829 -> 488 ms at 4096 -> 1024 blocks).
constexpr int64_t kMaxOptimizerBlocks = 1024;
constexpr int kEdqSums = 4;  // Σ Δ·u, Σ u², #updated, #lost

// kGroup consecutive elements of T with 128-bit accesses (one Packed128 of bf16, two of fp32).
constexpr int kGroup = Packed128<bf16_t>::size;
// A warp's unit of work: 8 groups a lane.
constexpr int64_t kChunkElements = int64_t(kWarpSize) * kGroup * 8;

// What every tensor of a launch shares: the step's scalars (lr_wd is each tensor's own),
// the collage-plus quirk and the stochastic-rounding key.
struct SharedStep {
  math::AdamScalars scalars;
  bool reference_quirk;  // collage-plus: the published in-place Mult
  uint64_t rounding_seed;
  int64_t t;
  float grad_scale;  // clipping's factor: g is read as rn(g·grad_scale) unless it is 1
};

// One tensor of a launch (the table is uploaded to the device per launch).
struct TensorStep {
  bf16_t* theta;       // (n) the weights
  const bf16_t* grad;  // (n)
  void* state[4];      // per strategy, backend/optimizer_step.h
  int64_t n;
  int64_t rounding_offset;  // stochastic: element i draws the bits of rounding_offset + i
  int64_t vector_groups;    // groups of kGroup stepped with 128-bit accesses (0: unaligned)
  int64_t first_chunk;      // its first chunk among the launch's
  float lr_wd;              // lr·wd of this tensor (wd is 0 for no-decay tensors)
  double* edq;              // where its EDQ sums are added, or null
};

// The storage of a strategy's state components: fp32 for fp32-master, else bf16.
template <Precision P>
using StateT = std::conditional_t<P == Precision::fp32_master, float, bf16_t>;
template <Precision P>
constexpr int kStates = P == Precision::collage_plus                         ? 4
                        : P == Precision::bf16 || P == Precision::stochastic ? 2
                                                                             : 3;

// Steps one element under strategy P, on its values (element `index` of the rounding stream);
// returns its EDQ term. theta is not read for fp32-master (it becomes rn(master)).
template <Precision P>
__device__ __forceinline__ math::EdqTerm step_values(const SharedStep& shared,
                                                     const math::AdamScalars& s, int64_t index,
                                                     bf16_t& theta, bf16_t g, StateT<P> (&st)[4]) {
  if (shared.grad_scale != 1.0f) g = math::clipped_gradient(g, shared.grad_scale);
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
                                   shared.reference_quirk);
  } else if constexpr (P == Precision::kahan) {
    return math::step_kahan(theta, g, st[0], st[1], st[2], s);  // st[2]: the compensation
  } else {
    static_assert(P == Precision::stochastic);
    return math::step_stochastic(theta, g, st[0], st[1], s, shared.rounding_seed, shared.t, index);
  }
}

// Steps element i of the tensor under strategy P; returns its EDQ term.
template <Precision P>
__device__ __forceinline__ math::EdqTerm step_element(const SharedStep& shared,
                                                      const math::AdamScalars& s,
                                                      const TensorStep& tensor, int64_t i) {
  StateT<P> st[4];
  for (int c = 0; c < kStates<P>; c++) st[c] = static_cast<StateT<P>*>(tensor.state[c])[i];
  bf16_t theta = P == Precision::fp32_master ? bf16_t{} : tensor.theta[i];
  const math::EdqTerm term =
      step_values<P>(shared, s, tensor.rounding_offset + i, theta, tensor.grad[i], st);
  for (int c = 0; c < kStates<P>; c++) static_cast<StateT<P>*>(tensor.state[c])[i] = st[c];
  tensor.theta[i] = theta;
  return term;
}

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

// Steps elements [i, i + kGroup) of the tensor under strategy P (every pointer 16-byte
// aligned, i a multiple of kGroup) with 128-bit accesses, in element order; adds their EDQ
// terms to edq.
template <Precision P>
__device__ __forceinline__ void step_group(const SharedStep& shared, const math::AdamScalars& s,
                                           const TensorStep& tensor, int64_t i,
                                           math::EdqAccumulator& edq) {
  bf16_t theta[kGroup], g[kGroup];
  StateT<P> st[4][kGroup];
  if constexpr (P != Precision::fp32_master) load_group(theta, tensor.theta + i);
  load_group(g, tensor.grad + i);
  for (int c = 0; c < kStates<P>; c++)
    load_group(st[c], static_cast<StateT<P>*>(tensor.state[c]) + i);
  // Unrolled, so that theta, g and st stay in registers: a loop over k would index them at run
  // time, which puts them in local memory (nvcc did that to collage-plus once math::rn became
  // the paired conversion: 96 bytes of stack a thread).
  COLLAGE_UNROLL
  for (int k = 0; k < kGroup; k++) {
    StateT<P> element[4];
    for (int c = 0; c < kStates<P>; c++) element[c] = st[c][k];
    edq.add(step_values<P>(shared, s, tensor.rounding_offset + i + k, theta[k], g[k], element));
    for (int c = 0; c < kStates<P>; c++) st[c][k] = element[c];
  }
  store_group(tensor.theta + i, theta);
  for (int c = 0; c < kStates<P>; c++)
    store_group(static_cast<StateT<P>*>(tensor.state[c]) + i, st[c]);
}

// The tensor of `chunk`: the last of the table whose first chunk is at or before it.
__device__ __forceinline__ int tensor_of(const TensorStep* tensors, int count, int64_t chunk) {
  int low = 0, high = count - 1;
  while (low < high) {
    const int middle = (low + high + 1) / 2;
    if (tensors[middle].first_chunk <= chunk)
      low = middle;
    else
      high = middle - 1;
  }
  return low;
}

// The step over every chunk of the launch, a warp per chunk, grid-stride. If partials is not
// null, partials[4·chunk + k] = the chunk's EDQ sum k (Σ Δ·u, Σ u², #updated, #lost).
template <Precision P>
__global__ void __launch_bounds__(kOptimizerThreads)
    optimizer_kernel(SharedStep shared, const TensorStep* tensors, int count, int64_t chunks,
                     double* partials) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = int64_t(gridDim.x) * kOptimizerWarps;
  for (int64_t chunk = int64_t(blockIdx.x) * kOptimizerWarps + threadIdx.x / kWarpSize;
       chunk < chunks; chunk += warps) {
    const TensorStep tensor = tensors[tensor_of(tensors, count, chunk)];
    math::AdamScalars s = shared.scalars;
    s.lr_wd = tensor.lr_wd;
    // This chunk's elements [begin, end); those below vector_end go by groups.
    const int64_t begin = (chunk - tensor.first_chunk) * kChunkElements;
    const int64_t end = min(begin + kChunkElements, tensor.n);
    const int64_t vector_end = min(end, tensor.vector_groups * kGroup);
    math::EdqAccumulator edq;
    for (int64_t i = begin + lane * kGroup; i < vector_end; i += kWarpSize * kGroup)
      step_group<P>(shared, s, tensor, i, edq);
    for (int64_t i = max(begin, vector_end) + lane; i < end; i += kWarpSize)
      edq.add(step_element<P>(shared, s, tensor, i));
    if (!partials) continue;  // the same for the whole launch
    const double sums[kEdqSums] = {edq.dot, edq.u_squared, double(edq.updated), double(edq.lost)};
    for (int k = 0; k < kEdqSums; k++) {
      const double total = warp_sum(sums[k]);
      if (lane == 0) partials[kEdqSums * chunk + k] = total;
    }
  }
}

// edq[k] += the sums of the tensor's chunks, added in chunk order, for every tensor with an edq
// slot: a warp per tensor, lane l adding the chunks l, l + 32, ... before the warp's butterfly.
__global__ void __launch_bounds__(kOptimizerThreads)
    edq_totals_kernel(const TensorStep* tensors, int count, int64_t chunks,
                      const double* partials) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t index = int64_t(blockIdx.x) * kOptimizerWarps + threadIdx.x / kWarpSize;
  if (index >= count) return;  // the whole warp
  const TensorStep& tensor = tensors[index];
  if (!tensor.edq) return;
  const int64_t end = index + 1 < count ? tensors[index + 1].first_chunk : chunks;
  for (int k = 0; k < kEdqSums; k++) {
    double total = 0.0;
    for (int64_t chunk = tensor.first_chunk + lane; chunk < end; chunk += kWarpSize)
      total += partials[kEdqSums * chunk + k];
    total = warp_sum(total);
    if (lane == 0) tensor.edq[k] += total;
  }
}

// Whether every tensor of the step is 16-byte aligned (the 128-bit group path).
bool step_aligned(const OptimizerStep& step) {
  bool aligned = aligned16(step.param, step.grad);
  for (int c = 0; c < state_count(step.precision); c++)
    aligned = aligned && aligned16(step.state[c]);
  return aligned;
}

// Whether two steps can share a launch: everything but the tensors and the weight decay alike.
bool same_launch(const OptimizerStep& a, const OptimizerStep& b) {
  return a.precision == b.precision && a.adam_order == b.adam_order &&
         a.collage_plus_reference_quirk == b.collage_plus_reference_quirk && a.lr == b.lr &&
         a.beta1 == b.beta1 && a.beta2 == b.beta2 && a.eps == b.eps && a.t == b.t &&
         a.rounding_seed == b.rounding_seed && a.grad_scale == b.grad_scale;
}

math::AdamScalars scalars_of(const OptimizerStep& step) {
  return math::make_adam_scalars(step.lr, step.beta1, step.beta2, step.eps, step.weight_decay,
                                 step.t, step.adam_order == AdamOrder::hf);
}

template <Precision P>
void launch_kernels(CudaContext& cx, const SharedStep& shared, const TensorStep* table, int count,
                    int64_t chunks, double* partials) {
  const int blocks = int(std::min(ceil_div(chunks, kOptimizerWarps), kMaxOptimizerBlocks));
  launch(cx, "optimizer_step", optimizer_kernel<P>, dim3(unsigned(blocks)),
         dim3(kOptimizerThreads))(shared, table, count, chunks, partials);
  if (partials)
    launch(cx, "optimizer_step (EDQ sums)", edq_totals_kernel,
           dim3(unsigned(ceil_div(count, kOptimizerWarps))),
           dim3(kOptimizerThreads))(table, count, chunks, static_cast<const double*>(partials));
}

// One launch (two with EDQ) for steps[0, count), which share everything but the tensors and
// the weight decay (same_launch).
void launch_steps(CudaContext& cx, const OptimizerStep* steps, double* const* edq, size_t count) {
  // The table: the non-empty tensors, each with its chunks numbered after the previous ones'.
  std::vector<TensorStep> tensors;
  int64_t chunks = 0;
  bool any_edq = false;
  for (size_t k = 0; k < count; k++) {
    const OptimizerStep& step = steps[k];
    if (step.n == 0) continue;  // nothing to step, nothing to add to its EDQ sums
    TensorStep tensor;
    tensor.theta = static_cast<bf16_t*>(step.param);
    tensor.grad = static_cast<const bf16_t*>(step.grad);
    for (int c = 0; c < 4; c++) tensor.state[c] = step.state[c];
    tensor.n = step.n;
    tensor.rounding_offset = step.rounding_offset;
    tensor.vector_groups = step_aligned(step) ? step.n / kGroup : 0;
    tensor.first_chunk = chunks;
    tensor.lr_wd = scalars_of(step).lr_wd;
    tensor.edq = edq[k];
    any_edq = any_edq || edq[k];
    chunks += ceil_div(step.n, kChunkElements);
    tensors.push_back(tensor);
  }
  if (tensors.empty()) return;
  COLLAGE_KERNEL_CHECK(tensors.size() <= size_t(INT32_MAX), "optimizer_steps: %zu tensors",
                       tensors.size());
  const int table_count = int(tensors.size());

  // The scalars exactly as the cpu forms them (src/backend/cpu/optimizer.cpp).
  SharedStep shared;
  shared.scalars = scalars_of(steps[0]);
  shared.reference_quirk = steps[0].collage_plus_reference_quirk;
  shared.rounding_seed = steps[0].rounding_seed;
  shared.t = steps[0].t;
  shared.grad_scale = steps[0].grad_scale;

  TensorStep* table = scratch<TensorStep>(cx, cx.scratch.optimizer_tensors, tensors.size());
  upload(cx, table, tensors.data(), tensors.size() * sizeof(TensorStep));
  double* partials =
      any_edq ? scratch<double>(cx, cx.scratch.optimizer_partials, size_t(kEdqSums) * chunks)
              : nullptr;
  switch (steps[0].precision) {
    case Precision::fp32_master:
      launch_kernels<Precision::fp32_master>(cx, shared, table, table_count, chunks, partials);
      break;
    case Precision::bf16:
      launch_kernels<Precision::bf16>(cx, shared, table, table_count, chunks, partials);
      break;
    case Precision::collage_light:
      launch_kernels<Precision::collage_light>(cx, shared, table, table_count, chunks, partials);
      break;
    case Precision::collage_plus:
      launch_kernels<Precision::collage_plus>(cx, shared, table, table_count, chunks, partials);
      break;
    case Precision::kahan:
      launch_kernels<Precision::kahan>(cx, shared, table, table_count, chunks, partials);
      break;
    case Precision::stochastic:
      launch_kernels<Precision::stochastic>(cx, shared, table, table_count, chunks, partials);
      break;
  }
}

}  // namespace

void optimizer_steps(CudaContext& cx, const OptimizerStep* steps, double* const* edq,
                     size_t count) {
  // The steps' arguments: checked by the contract (backend_contract.h). Each run of steps that
  // share their hyperparameters (all of a training step's) is one launch.
  size_t first = 0;
  while (first < count) {
    size_t end = first + 1;
    while (end < count && same_launch(steps[first], steps[end])) end++;
    launch_steps(cx, steps + first, edq + first, end - first);
    first = end;
  }
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
