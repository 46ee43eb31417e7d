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

#include "kernels/column_sums.cuh"
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

// The backward of a GELU whose input is a matmul's output with a bias, over (N, C): dinp =
// f(inp, dout) as map_kernel writes it, and stage 1 of that bias's gradient Σ_rows dinp
// (kernels/column_sums.cuh) from the dinp values just rounded, so that matmul_backward need not
// read dinp again. Block (row chunk of kColumnChunkRows, tile of kGroup·blockDim columns); a
// thread takes kGroup adjacent columns, walks the chunk's rows in order and sums each column
// in fp32 from 0, the terms and order of column_partials_kernel: the same partials, so the
// same bias gradient bits. Needs C % kGroup == 0 and 16-byte aligned rows.
template <typename F>
__global__ void map_rows_with_column_sums_kernel(bf16_t* dinp, float* partials, F f, int64_t N,
                                                 int C, const bf16_t* inp, const bf16_t* dout) {
  const int c0 = (int(blockIdx.y) * blockDim.x + threadIdx.x) * kGroup;
  if (c0 >= C) return;
  const int64_t chunk = blockIdx.x;
  const int64_t row_begin = chunk * kColumnChunkRows;
  const int64_t row_end = row_begin + kColumnChunkRows < N ? row_begin + kColumnChunkRows : N;
  float sums[kGroup] = {};
  for (int64_t row = row_begin; row < row_end; row++) {
    const int64_t i = row * C + c0;
    const Group x = load_group(inp + i), dy = load_group(dout + i);
    Packed128<bf16_t> out;
    for (int k = 0; k < kGroup; k += 2)
      to_bf16_pair(out.values[k], out.values[k + 1], f(x.values[k], dy.values[k]),
                   f(x.values[k + 1], dy.values[k + 1]));
    store128(dinp + i, out);
    for (int k = 0; k < kGroup; k++) sums[k] += to_float(out.values[k]);
  }
  for (int k = 0; k < kGroup; k++) partials[chunk * C + c0 + k] = sums[k];
}

constexpr int kColumnGroupThreads = 128;  // 1024 columns a block: 3 tiles at C = 3072

// dinp (N, C) = f(inp, dout); dbias (C) += Σ_rows dinp. One pass over the rows where the shape
// allows, else the elementwise map and the column sums (the same bits either way).
template <typename F>
void map_with_bias_grad(CudaContext& cx, const char* op, bf16_t* dinp, bf16_t* dbias, F f,
                        int64_t N, int C, const bf16_t* inp, const bf16_t* dout) {
  if (N == 0 || C == 0) return;
  if (C % kGroup != 0 || !aligned16(dinp, inp, dout)) {
    map(cx, op, dinp, f, N * C, inp, dout);
    bias_backward(cx, dbias, dinp, N, C);
    return;
  }
  const int tiles = int(ceil_div(C, kGroup * kColumnGroupThreads));
  float* partials = column_partials(cx, 1, N, C);
  launch(cx, op, map_rows_with_column_sums_kernel<F>,
         dim3(unsigned(column_chunks(N)), unsigned(tiles)),
         dim3(kColumnGroupThreads))(dinp, partials, f, N, C, inp, dout);
  column_totals(cx, op, partials, N, C, dbias);
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

void gelu_backward_bias(CudaContext& cx, bf16_t* dinp, bf16_t* dbias, const bf16_t* inp,
                        const bf16_t* dout, int64_t N, int C, bool exact) {
  // Called by the backend with dinp and dbias non-null (Backend::gelu_backward_bias).
  if (exact)
    return map_with_bias_grad(cx, "gelu_erf_backward", dinp, dbias, GeluErfBackward{}, N, C, inp,
                              dout);
  map_with_bias_grad(cx, "gelu_backward", dinp, dbias, GeluBackward{}, N, C, inp, dout);
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
