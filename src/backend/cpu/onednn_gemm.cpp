// oneDNN matmuls for the cpu backend (onednn_gemm.h).
#include "backend/cpu/onednn_gemm.h"

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <type_traits>

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
    COLLAGE_CHECK(can,
                  "parallel.cpu_gemm: onednn needs a bf16 matmul, which oneDNN does not have on "
                  "this CPU (its effective ISA is {}; bf16 needs AVX512-BF16 or AMX-BF16): use "
                  "auto or openblas",
                  s.isa);
    return {true, "parallel.cpu_gemm: onednn, oneDNN ISA " + s.isa};
  }
  COLLAGE_CHECK(setting == "auto", "parallel.cpu_gemm: '{}' is not auto, onednn or openblas",
                setting);
  if (!bf16_storage) return {false, "auto: the fp32 reference backend keeps OpenBLAS"};
  if (s.bf16_matmul) return {true, "auto: oneDNN multiplies bf16 on this CPU (ISA " + s.isa + ")"};
  return {false, "auto: oneDNN's ISA here is " + s.isa +
                     ", without bf16 matmuls (they need AVX512-BF16 or AMX-BF16)"};
}

// The cache key: everything a primitive is specialised for.
using PrimitiveKey = std::tuple<int, int64_t, int64_t, int64_t,      // data type, M, N, K
                                int64_t, int64_t, int64_t, int64_t,  // a, b strides
                                int64_t, int64_t, bool, bool>;       // c strides, bias, +=

struct OnednnGemm::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<PrimitiveKey, dnnl::matmul> primitives;
};

OnednnGemm::OnednnGemm(int threads) : impl_(std::make_unique<Impl>()), threads_(threads) {}
OnednnGemm::~OnednnGemm() = default;

template <typename S>
void OnednnGemm::matmul(int64_t M, int64_t N, int64_t K, Operand<const S> a, Operand<const S> b,
                        const S* bias, Operand<S> c, bool accumulate) {
  if (M == 0 || N == 0) return;
  constexpr memory::data_type dt = data_type<S>();
  const memory::desc a_md({M, K}, dt, {a.row_stride, a.col_stride});
  const memory::desc b_md({K, N}, dt, {b.row_stride, b.col_stride});
  const memory::desc c_md({M, N}, dt, {c.row_stride, c.col_stride});
  const memory::desc bias_md({1, N}, dt, {N, 1});

  const PrimitiveKey key{int(dt),
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
    dnnl::primitive_attr attr;
    if (accumulate) {  // c = a·b + c, in fp32, one rounding
      dnnl::post_ops sum;
      sum.append_sum(1.0f);
      attr.set_post_ops(sum);
    }
    const dnnl::matmul::desc desc =
        bias ? dnnl::matmul::desc(a_md, b_md, bias_md, c_md) : dnnl::matmul::desc(a_md, b_md, c_md);
    try {
      found =
          impl_->primitives
              .emplace(key, dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, impl_->engine)))
              .first;
    } catch (const dnnl::error& e) {
      fail("oneDNN cannot multiply ({} x {}) by ({} x {}) in {}: {}", M, K, K, N,
           dt == memory::data_type::f32 ? "f32" : "bf16", e.what());
    }
    created_++;
  }
  // oneDNN takes non-const handles; it does not write the source operands.
  memory a_mem(a_md, impl_->engine, const_cast<S*>(a.data));
  memory b_mem(b_md, impl_->engine, const_cast<S*>(b.data));
  memory c_mem(c_md, impl_->engine, c.data);
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(bias_md, impl_->engine, const_cast<S*>(bias)));
  ScopedThreads threads(threads_);
  found->second.execute(impl_->stream, args);
  impl_->stream.wait();
}

template void OnednnGemm::matmul(int64_t, int64_t, int64_t, Operand<const bf16>,
                                 Operand<const bf16>, const bf16*, Operand<bf16>, bool);
template void OnednnGemm::matmul(int64_t, int64_t, int64_t, Operand<const float>,
                                 Operand<const float>, const float*, Operand<float>, bool);

}  // namespace collage::cpu
