// oneDNN matmuls for the cpu backend (onednn_gemm.h).
#include "backend/cpu/onednn_gemm.h"

#include <omp.h>

#include <cstdlib>
#include <oneapi/dnnl/dnnl.hpp>
#include <type_traits>
#include <unordered_map>

#include "core/error.h"

namespace collage::cpu {
namespace {

using dnnl::memory;

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

template <typename S>
constexpr memory::data_type data_type() {
  return std::is_same_v<std::remove_const_t<S>, float> ? memory::data_type::f32
                                                       : memory::data_type::bf16;
}

// oneDNN runs on OpenMP (Debian builds it so) with omp_get_max_threads() threads: the
// backend's thread count for the duration of a call, then the caller's again.
class ScopedThreads {
 public:
  explicit ScopedThreads(int threads) : saved_(omp_get_max_threads()) {
    omp_set_num_threads(threads);
  }
  ~ScopedThreads() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

}  // namespace

const OnednnSupport& onednn_support() {
  static const OnednnSupport support = [] {
    OnednnSupport s;
    s.isa = isa_name(dnnl::get_effective_cpu_isa());
    try {  // the truth test: can oneDNN build the primitive the backend needs?
      dnnl::engine engine(dnnl::engine::kind::cpu, 0);
      const memory::desc a({64, 64}, memory::data_type::bf16, memory::format_tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, a), engine);
      s.bf16_matmul = true;
    } catch (const dnnl::error&) {
      s.bf16_matmul = false;  // "could not create a primitive descriptor": unimplemented here
    }
    return s;
  }();
  return support;
}

CpuGemmChoice choose_cpu_gemm(const std::string& setting, bool bf16_storage) {
  if (setting == "openblas") return {false, "parallel.cpu_gemm: openblas"};
  const OnednnSupport& s = onednn_support();
  const bool can = !bf16_storage || s.bf16_matmul;
  if (setting == "onednn") {
    COLLAGE_CHECK(
        can,
        "parallel.cpu_gemm: onednn needs a bf16 matmul, which oneDNN does not have on "
        "this CPU (its effective ISA is {}; bf16 needs AVX-512, avx512_core or above): use "
        "auto or openblas",
        s.isa);
    return {true, "parallel.cpu_gemm: onednn, oneDNN ISA " + s.isa};
  }
  COLLAGE_CHECK(setting == "auto", "parallel.cpu_gemm: '{}' is not auto, onednn or openblas",
                setting);
  if (!bf16_storage) return {false, "auto: the fp32 reference backend keeps OpenBLAS"};
  if (s.bf16_matmul) return {true, "auto: oneDNN multiplies bf16 on this CPU (ISA " + s.isa + ")"};
  return {false, "auto: oneDNN's ISA here is " + s.isa +
                     ", without bf16 matmuls (they need AVX-512: avx512_core or above)"};
}

// The cache key: everything a primitive is specialised for.
using PrimitiveKey =
    std::tuple<int, int, int64_t, int64_t, int64_t,  // operand, result type, M, N, K
               int64_t, int64_t, int64_t, int64_t,   // a, b strides
               int64_t, int64_t, bool, bool>;        // c strides, bias, +=

// A cached primitive with the memory objects of its operands, pointed at each call's data.
struct CachedMatmul {
  dnnl::matmul primitive;
  memory a, b, c, bias, scratchpad;
  size_t scratchpad_bytes = 0;
  std::unordered_map<int, memory> args;
};

struct OnednnGemm::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<PrimitiveKey, CachedMatmul> primitives;
  // This OnednnGemm's own scratchpad (scratchpad_mode::user), page-aligned as oneDNN's own.
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> scratchpad;
  size_t scratchpad_bytes = 0;
  void* scratchpad_of(size_t bytes) {
    if (bytes > scratchpad_bytes) {
      const size_t rounded = (bytes + 4095) / 4096 * 4096;
      scratchpad.reset(std::aligned_alloc(4096, rounded));
      if (!scratchpad) fail("oneDNN scratchpad: cannot allocate {} bytes", rounded);
      scratchpad_bytes = rounded;
    }
    return scratchpad.get();
  }
};

OnednnGemm::OnednnGemm(int threads) : impl_(std::make_unique<Impl>()), threads_(threads) {}
OnednnGemm::~OnednnGemm() = default;

template <typename S, typename D>
void OnednnGemm::matmul(int64_t M, int64_t N, int64_t K, Operand<const S> a, Operand<const S> b,
                        const S* bias, Operand<D> c, bool accumulate) {
  static_assert(std::is_same_v<S, D> || std::is_same_v<D, float>, "results are S or fp32");
  if (M == 0 || N == 0) return;
  constexpr memory::data_type dt = data_type<S>(), result_dt = data_type<D>();
  // oneDNN runs on this thread's OpenMP setting: the threads of this OnednnGemm, both when it
  // builds a primitive (which plans its work split for them) and when it runs one.
  ScopedThreads threads(threads_);
  const PrimitiveKey key{int(dt),
                         int(result_dt),
                         M,
                         N,
                         K,
                         a.row_stride,
                         a.col_stride,
                         b.row_stride,
                         b.col_stride,
                         c.row_stride,
                         c.col_stride,
                         bias != nullptr,
                         accumulate};
  auto found = impl_->primitives.find(key);
  if (found == impl_->primitives.end()) {
    const memory::desc a_md({M, K}, dt, {a.row_stride, a.col_stride});
    const memory::desc b_md({K, N}, dt, {b.row_stride, b.col_stride});
    const memory::desc c_md({M, N}, result_dt, {c.row_stride, c.col_stride});
    const memory::desc bias_md({1, N}, dt, {N, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (accumulate) {  // c = a·b + c, in fp32, one rounding
      dnnl::post_ops sum;
      sum.append_sum(1.0f);
      attr.set_post_ops(sum);
    }
    const dnnl::matmul::desc desc =
        bias ? dnnl::matmul::desc(a_md, b_md, bias_md, c_md) : dnnl::matmul::desc(a_md, b_md, c_md);
    CachedMatmul entry;
    try {
      const dnnl::matmul::primitive_desc pd(desc, attr, impl_->engine);
      entry.primitive = dnnl::matmul(pd);
      entry.scratchpad = memory(pd.scratchpad_desc(), impl_->engine, nullptr);
      entry.scratchpad_bytes = pd.scratchpad_desc().get_size();
    } catch (const dnnl::error& e) {
      fail("oneDNN cannot multiply ({} x {}) by ({} x {}) in {} to {}: {}", M, K, K, N,
           dt == memory::data_type::f32 ? "f32" : "bf16",
           result_dt == memory::data_type::f32 ? "f32" : "bf16", e.what());
    }
    entry.a = memory(a_md, impl_->engine, nullptr);
    entry.b = memory(b_md, impl_->engine, nullptr);
    entry.c = memory(c_md, impl_->engine, nullptr);
    entry.args = {{DNNL_ARG_SRC, entry.a}, {DNNL_ARG_WEIGHTS, entry.b}, {DNNL_ARG_DST, entry.c}};
    if (bias) {
      entry.bias = memory(bias_md, impl_->engine, nullptr);
      entry.args.emplace(DNNL_ARG_BIAS, entry.bias);
    }
    if (entry.scratchpad_bytes > 0) entry.args.emplace(DNNL_ARG_SCRATCHPAD, entry.scratchpad);
    found = impl_->primitives.emplace(key, std::move(entry)).first;
    created_++;
  }
  CachedMatmul& m = found->second;
  // oneDNN takes non-const handles; it does not write the source operands.
  m.a.set_data_handle(const_cast<S*>(a.data));
  m.b.set_data_handle(const_cast<S*>(b.data));
  m.c.set_data_handle(c.data);
  if (bias) m.bias.set_data_handle(const_cast<S*>(bias));
  if (m.scratchpad_bytes > 0)
    m.scratchpad.set_data_handle(impl_->scratchpad_of(m.scratchpad_bytes));
  m.primitive.execute(impl_->stream, m.args);
  impl_->stream.wait();
}

template void OnednnGemm::matmul(int64_t, int64_t, int64_t, Operand<const bf16>,
                                 Operand<const bf16>, const bf16*, Operand<bf16>, bool);
template void OnednnGemm::matmul(int64_t, int64_t, int64_t, Operand<const float>,
                                 Operand<const float>, const float*, Operand<float>, bool);
template void OnednnGemm::matmul(int64_t, int64_t, int64_t, Operand<const bf16>,
                                 Operand<const bf16>, const bf16*, Operand<float>, bool);

}  // namespace collage::cpu
