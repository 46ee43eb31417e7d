// Elementwise ops (src/backend/backend.h): GELU (tanh approximation, and the encoder's exact
// erf form) forward and backward, tanh forward and backward, add, accumulate, scale, and the
// fp32 <-> bf16 casts. The cpu version is src/backend/cpu/elementwise.cpp.
//
// Bit-identical to the cpu backend: every output is the cpu's fp32 expression, evaluated in
// the same order (GELU through numerics/elementwise_math.h, which both share), rounded once
// (nvcc builds with -fmad=false and g++ with -ffp-contract=off, so no product is contracted
// into an fma). docs/ARCHITECTURE.md, "Bit-identical elementwise ops".
//
// Every op is out[i] = f(in_1[i], ..., in_k[i]) for one functor f below; in-place ops pass
// their output again as an input (each thread reads its elements before it writes them).
#include <algorithm>
#include <utility>

#include "kernels/common.cuh"
#include "kernels/kernels.cuh"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN
namespace {

constexpr int kElementwiseThreads = 256;
// Grid-stride loops beyond this many blocks: enough to fill any GPU, and derived from n only.
constexpr int64_t kMaxElementwiseBlocks = 4096;
// Elements of one 128-bit group: 8 bf16 (one Packed128), or 8 floats (two).
constexpr int kGroup = 8;

// ---- the ops, on fp32 values ----
struct Gelu {
  __device__ float operator()(float x) const { return math::gelu(x); }
};
struct GeluBackward {  // dinp = gelu'(x)·dout
  __device__ float operator()(float x, float dout) const { return math::gelu_derivative(x) * dout; }
};
struct GeluErf {  // the encoder's exact GELU
  __device__ float operator()(float x) const { return math::gelu_erf(x); }
};
struct GeluErfBackward {  // dinp = gelu_erf'(x)·dout
  __device__ float operator()(float x, float dout) const {
    return math::gelu_erf_derivative(x) * dout;
  }
};
struct Tanh {
  __device__ float operator()(float x) const { return math::tanh_value(x); }
};
struct TanhBackward {  // dinp = (1 - y²)·dout, from the saved output y
  __device__ float operator()(float y, float dout) const {
    return math::tanh_derivative_from_output(y) * dout;
  }
};
struct Sum {  // add: a + b; accumulate: dst + src
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Scale {
  float factor;
  __device__ float operator()(float x) const { return x * factor; }
};
struct Identity {  // the casts: widening is exact, narrowing is the store's rounding
  __device__ float operator()(float x) const { return x; }
};

// ---- one element or one group of kGroup elements, of bf16 or fp32, as fp32 ----
__device__ __forceinline__ float widen(bf16_t x) { return to_float(x); }
__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ void narrow(bf16_t& out, float x) { out = to_bf16(x); }
__device__ __forceinline__ void narrow(float& out, float x) { out = x; }

struct Group {
  float values[kGroup];
};
__device__ __forceinline__ Group load_group(const bf16_t* p) {
  const Packed128<bf16_t> packed = load128(p);
  Group g;
  for (int k = 0; k < kGroup; k++) g.values[k] = to_float(packed.values[k]);
  return g;
}
__device__ __forceinline__ Group load_group(const float* p) {
  Group g;
  for (int half = 0; half < 2; half++) {
    const Packed128<float> packed = load128(p + 4 * half);
    for (int k = 0; k < 4; k++) g.values[4 * half + k] = packed.values[k];
  }
  return g;
}
__device__ __forceinline__ void store_group(bf16_t* p, const Group& g) {
  Packed128<bf16_t> packed;
  for (int k = 0; k < kGroup; k += 2)
    to_bf16_pair(packed.values[k], packed.values[k + 1], g.values[k], g.values[k + 1]);
  store128(p, packed);
}
__device__ __forceinline__ void store_group(float* p, const Group& g) {
  for (int half = 0; half < 2; half++) {
    Packed128<float> packed;
    for (int k = 0; k < 4; k++) packed.values[k] = g.values[4 * half + k];
    store128(p + 4 * half, packed);
  }
}
// f applied to element k of every input group.
template <typename F, size_t... I>
__device__ __forceinline__ float apply_at(const F& f, const Group* inputs, int k,
                                          std::index_sequence<I...>) {
  return f(inputs[I].values[k]...);
}

// out[i] = f(in[i]...) for i < n. Groups [0, vector_groups) of kGroup elements go through
// 128-bit loads and stores (the launcher passes 0 unless every pointer is 16-byte aligned);
// the elements from vector_groups·kGroup on, one at a time. Grid-stride in both parts.
template <typename Out, typename F, typename... In>
__global__ void map_kernel(Out* out, F f, int64_t n, int64_t vector_groups, const In*... in) {
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t group = first; group < vector_groups; group += stride) {
    const int64_t i = group * kGroup;
    const Group inputs[] = {load_group(in + i)...};
    Group result;
    for (int k = 0; k < kGroup; k++)
      result.values[k] = apply_at(f, inputs, k, std::index_sequence_for<In...>{});
    store_group(out + i, result);
  }
  for (int64_t i = vector_groups * kGroup + first; i < n; i += stride)
    narrow(out[i], f(widen(in[i])...));
}

// Launches map_kernel over n elements: the 128-bit path for the whole groups when every
// pointer is 16-byte aligned, and a grid sized for the work items (groups, or elements).
template <typename Out, typename F, typename... In>
// n and the tensors: checked by the Backend contract (backend_contract.h) for the Backend's ops,
// by check_conversion for the conversions below.
void map(CudaContext& cx, const char* op, Out* out, F f, int64_t n, const In*... in) {
  if (n == 0) return;
  const int64_t vector_groups = aligned16(out, in...) ? n / kGroup : 0;
  // The most items one thread handles at a time: a group, or the scalar elements.
  const int64_t items = vector_groups > 0 ? vector_groups : n;
  const int64_t blocks = std::min(ceil_div(items, kElementwiseThreads), kMaxElementwiseBlocks);
  launch(cx, op, map_kernel<Out, F, In...>, dim3(unsigned(blocks)), dim3(kElementwiseThreads))(
      out, f, n, vector_groups, in...);
}

}  // namespace

void gelu_forward(CudaContext& cx, bf16_t* out, const bf16_t* inp, int64_t n) {
  map(cx, "gelu_forward", out, Gelu{}, n, inp);
}

void gelu_backward(CudaContext& cx, bf16_t* dinp, const bf16_t* inp, const bf16_t* dout,
                   int64_t n) {
  if (!dinp) return;  // null gradient: not computed
  map(cx, "gelu_backward", dinp, GeluBackward{}, n, inp, dout);
}

// erff and tanhf: glibc's under the emulator (the cpu's bits), CUDA's on a GPU, which may
// differ from glibc's by an ulp (src/numerics/elementwise_math.h).
void gelu_erf_forward(CudaContext& cx, bf16_t* out, const bf16_t* inp, int64_t n) {
  map(cx, "gelu_erf_forward", out, GeluErf{}, n, inp);
}

void gelu_erf_backward(CudaContext& cx, bf16_t* dinp, const bf16_t* inp, const bf16_t* dout,
                       int64_t n) {
  if (!dinp) return;
  map(cx, "gelu_erf_backward", dinp, GeluErfBackward{}, n, inp, dout);
}

void tanh_forward(CudaContext& cx, bf16_t* out, const bf16_t* inp, int64_t n) {
  map(cx, "tanh_forward", out, Tanh{}, n, inp);
}

void tanh_backward(CudaContext& cx, bf16_t* dinp, const bf16_t* out, const bf16_t* dout,
                   int64_t n) {
  if (!dinp) return;
  map(cx, "tanh_backward", dinp, TanhBackward{}, n, out, dout);
}

void add(CudaContext& cx, bf16_t* out, const bf16_t* a, const bf16_t* b, int64_t n) {
  map(cx, "add", out, Sum{}, n, a, b);
}

void accumulate(CudaContext& cx, bf16_t* dst, const bf16_t* src, int64_t n) {
  map(cx, "accumulate", dst, Sum{}, n, static_cast<const bf16_t*>(dst), src);
}

void scale(CudaContext& cx, bf16_t* x, float factor, int64_t n) {
  map(cx, "scale", x, Scale{factor}, n, static_cast<const bf16_t*>(x));
}

// The conversions are no Backend ops: they check their own arguments.
void check_conversion(const char* op, const void* out, const void* in, int64_t n) {
  COLLAGE_KERNEL_CHECK(n >= 0, "%s: n = %lld must be >= 0", op, static_cast<long long>(n));
  COLLAGE_KERNEL_CHECK(n == 0 || (out && in), "%s: null tensor (n = %lld)", op,
                       static_cast<long long>(n));
}

void bf16_to_float(CudaContext& cx, float* out, const bf16_t* in, int64_t n) {
  check_conversion("bf16_to_float", out, in, n);
  map(cx, "bf16_to_float", out, Identity{}, n, in);
}

void float_to_bf16(CudaContext& cx, bf16_t* out, const float* in, int64_t n) {
  check_conversion("float_to_bf16", out, in, n);
  map(cx, "float_to_bf16", out, Identity{}, n, in);
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
