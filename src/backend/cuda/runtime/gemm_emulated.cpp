// gemm.h under the emulator: the cuBLASLt call sites reach the cpu GEMM. The call is queued on
// the emulated stream like a kernel (device memory is only readable while queued work runs);
// it widens op(a), op(b) (and d when accumulating) to fp32, runs OpenBLAS's sgemm, adds the
// bias in fp32 and rounds once on store.
#include <cblas.h>

#include <vector>

#include "backend/cuda/runtime/gemm.h"
#include "backend/cuda/runtime/runtime.h"
#include "core/error.h"
#include "simt/simt.h"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN

struct GemmEngine {
  std::vector<float> a, b, d;  // fp32 working copies, grown to the largest call
};

GemmEngine* create_gemm_engine(CudaContext&) { return new GemmEngine; }
void destroy_gemm_engine(CudaContext&, GemmEngine* engine) { delete engine; }

namespace {

// The (rows, cols) row-major block at `source` (leading dimension ld) as dense fp32.
void widen(const math::bfloat* source, int64_t rows, int64_t cols, int64_t ld,
           std::vector<float>& out) {
  out.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) out[size_t(r * cols + c)] = math::to_f32(source[r * ld + c]);
}

void run(GemmEngine& engine, const GemmCall& g) {
  // Stored shapes: a is (M, K), or (K, M) when transposed; b is (K, N), or (N, K).
  const int64_t a_rows = g.transpose_a ? g.K : g.M, a_cols = g.transpose_a ? g.M : g.K;
  const int64_t b_rows = g.transpose_b ? g.N : g.K, b_cols = g.transpose_b ? g.K : g.N;
  widen(g.a, a_rows, a_cols, g.lda, engine.a);
  widen(g.b, b_rows, b_cols, g.ldb, engine.b);
  if (g.accumulate) {
    widen(g.d, g.M, g.N, g.ldd, engine.d);
  } else {
    engine.d.assign(size_t(g.M * g.N), 0.0f);
  }
  if (g.K > 0) {
    cblas_sgemm(CblasRowMajor, g.transpose_a ? CblasTrans : CblasNoTrans,
                g.transpose_b ? CblasTrans : CblasNoTrans, int(g.M), int(g.N), int(g.K), 1.0f,
                engine.a.data(), int(a_cols), engine.b.data(), int(b_cols),
                g.accumulate ? 1.0f : 0.0f, engine.d.data(), int(g.N));
  }
  for (int64_t r = 0; r < g.M; r++) {
    for (int64_t c = 0; c < g.N; c++) {
      float value = engine.d[size_t(r * g.N + c)];
      if (g.bias) value += math::to_f32(g.bias[c]);
      g.d[r * g.ldd + c] = math::rn(value);
    }
  }
}

}  // namespace

void gemm(CudaContext& cx, const GemmCall& call) {
  COLLAGE_CHECK(call.M >= 0 && call.N >= 0 && call.K >= 0, "gemm: negative shape {}x{}x{}", call.M,
                call.N, call.K);
  if (call.M == 0 || call.N == 0) return;
  cx.launches++;
  if (cx.profile) profile_launch_begin(cx, "gemm");  // `collage bench --profile` only
  GemmEngine* engine = cx.gemm;
  simt::enqueue(cx.stream, [engine, call] { run(*engine, call); });
  if (cx.profile) profile_launch_end(cx);
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
