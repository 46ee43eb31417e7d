// One optimizer step over one tensor, for every precision strategy (backend/optimizer_step.h).
// The per-element math is src/optim/collage_math.h, the same __host__ __device__ functions the
// cpu loop (src/backend/cpu/optimizer.cpp) runs, with the same AdamScalars formed once per call
// on the host by math::make_adam_scalars: θ and every state component are bit-identical to
// the cpu's (nvcc builds with -fmad=false; the header's fp32 ops are the __f*_rn intrinsics).
//
// One kernel per call, one element per thread (grid-stride, the grid derived from n), a kernel
// instantiation per strategy. EDQ (when the caller passes `edq`): each thread sums its
// elements' terms in a math::EdqAccumulator, each block reduces its threads' sums in a fixed
// tree (counts as doubles, exact) into cx.scratch.block_partials, and a second one-block
// kernel adds the blocks' sums in a fixed order into edq[0..3]. The order of the EDQ additions
// depends on n only; it differs from the cpu's chunked lanes, so the sums agree with the cpu's
// to rounding (the counts exactly).
#include <algorithm>

#include "backend/cuda/runtime.h"
#include "kernels/common.cuh"
#include "kernels/kernels.cuh"
#include "optim/collage_math.h"

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

// Steps element i under strategy P; returns its EDQ term.
template <Precision P>
__device__ __forceinline__ math::EdqTerm step_element(const StepArguments& a, int64_t i) {
  const math::AdamScalars& s = a.scalars;
  if constexpr (P == Precision::fp32_master) {
    float* master = static_cast<float*>(a.state[0]);
    float* m = static_cast<float*>(a.state[1]);
    float* v = static_cast<float*>(a.state[2]);
    float w = master[i], mi = m[i], vi = v[i];
    const math::EdqTerm term = math::step_fp32_master(w, to_float(a.grad[i]), mi, vi, s);
    master[i] = w, m[i] = mi, v[i] = vi;
    a.theta[i] = to_bf16(w);  // the weights the model reads: rn(master)
    return term;
  } else {
    bf16_t* m = static_cast<bf16_t*>(a.state[0]);
    bf16_t* v = static_cast<bf16_t*>(a.state[1]);
    bf16_t* extra = static_cast<bf16_t*>(a.state[2]);  // δθ or the Kahan compensation
    bf16_t* dv = static_cast<bf16_t*>(a.state[3]);     // collage-plus: δv
    bf16_t theta = a.theta[i], mi = m[i], vi = v[i];
    const bf16_t g = a.grad[i];
    math::EdqTerm term;
    if constexpr (P == Precision::bf16) {
      term = math::step_bf16(theta, g, mi, vi, s);
    } else if constexpr (P == Precision::collage_light) {
      bf16_t dtheta = extra[i];
      term = math::step_collage_light(theta, g, mi, vi, dtheta, s);
      extra[i] = dtheta;
    } else if constexpr (P == Precision::collage_plus) {
      bf16_t dtheta = extra[i], dvi = dv[i];
      term = math::step_collage_plus(theta, g, mi, vi, dtheta, dvi, s, a.reference_quirk);
      extra[i] = dtheta, dv[i] = dvi;
    } else if constexpr (P == Precision::kahan) {
      bf16_t compensation = extra[i];
      term = math::step_kahan(theta, g, mi, vi, compensation, s);
      extra[i] = compensation;
    } else {
      static_assert(P == Precision::stochastic);
      term =
          math::step_stochastic(theta, g, mi, vi, s, a.rounding_seed, a.t, a.rounding_offset + i);
    }
    a.theta[i] = theta, m[i] = mi, v[i] = vi;
    return term;
  }
}

// The step over elements [0, n), one per thread and grid-stride. If partials is not null,
// partials[4·block + k] = this block's EDQ sum k (Σ Δ·u, Σ u², #updated, #lost), each summed
// over the block's threads in a fixed tree.
template <Precision P>
__global__ void optimizer_kernel(StepArguments a, double* partials) {
  math::EdqAccumulator edq;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += stride)
    edq.add(step_element<P>(a, i));
  if (!partials) return;  // the same for the whole block

  __shared__ double warp_sums[kEdqSums][kOptimizerWarps];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  double sums[kEdqSums] = {edq.dot, edq.u_squared, double(edq.updated), double(edq.lost)};
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
}

// edq[k] += Σ_block partials[4·block + k], one warp: lane l adds the blocks l, l + 32, ... in
// order, then the warp's butterfly.
__global__ void edq_total_kernel(double* edq, const double* partials, int blocks) {
  const int lane = threadIdx.x;
  for (int k = 0; k < kEdqSums; k++) {
    double total = 0.0;
    for (int block = lane; block < blocks; block += kWarpSize)
      total += partials[kEdqSums * block + k];
    total = warp_sum(total);
    if (lane == 0) edq[k] += total;
  }
}

template <Precision P>
void launch_step(CudaContext& cx, const StepArguments& a, int blocks, double* partials) {
  launch(cx, "optimizer_step", optimizer_kernel<P>, dim3(unsigned(blocks)),
         dim3(kOptimizerThreads))(a, partials);
}

}  // namespace

void optimizer_step(CudaContext& cx, const OptimizerStep& step, double* edq) {
  const char* name = precision_name(step.precision);
  COLLAGE_KERNEL_CHECK(step.n >= 0, "optimizer_step (%s): n = %lld is negative", name,
                       static_cast<long long>(step.n));
  COLLAGE_KERNEL_CHECK(step.param && step.grad, "optimizer_step (%s): param and grad must be set",
                       name);
  const int states = state_count(step.precision);
  for (int c = 0; c < states; c++) {
    COLLAGE_KERNEL_CHECK(step.state[c], "optimizer_step (%s): state[%d] is not set (%d states)",
                         name, c, states);
  }
  COLLAGE_KERNEL_CHECK(step.t >= 1, "optimizer_step (%s): step counter t = %lld must start at 1",
                       name, static_cast<long long>(step.t));
  COLLAGE_KERNEL_CHECK(step.beta1 >= 0 && step.beta1 < 1 && step.beta2 >= 0 && step.beta2 < 1,
                       "optimizer_step (%s): beta1 = %g and beta2 = %g must be in [0, 1)", name,
                       step.beta1, step.beta2);
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

  const int blocks = int(std::min(ceil_div(step.n, kOptimizerThreads), kMaxOptimizerBlocks));
  double* partials =
      edq ? scratch<double>(cx, cx.scratch.block_partials, size_t(kEdqSums) * blocks) : nullptr;
  switch (step.precision) {
    case Precision::fp32_master:
      launch_step<Precision::fp32_master>(cx, a, blocks, partials);
      break;
    case Precision::bf16:
      launch_step<Precision::bf16>(cx, a, blocks, partials);
      break;
    case Precision::collage_light:
      launch_step<Precision::collage_light>(cx, a, blocks, partials);
      break;
    case Precision::collage_plus:
      launch_step<Precision::collage_plus>(cx, a, blocks, partials);
      break;
    case Precision::kahan:
      launch_step<Precision::kahan>(cx, a, blocks, partials);
      break;
    case Precision::stochastic:
      launch_step<Precision::stochastic>(cx, a, blocks, partials);
      break;
  }
  if (edq) {
    launch(cx, "optimizer_step (EDQ sums)", edq_total_kernel, dim3(1), dim3(kWarpSize))(
        edq, partials, blocks);
  }
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
