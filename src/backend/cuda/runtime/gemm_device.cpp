// gemm.h on a GPU with cuBLASLt: bf16 A, B, C, D; fp32 compute and scale (tensor cores, fp32
// accumulation); the bias as an epilogue; beta = 1 to accumulate into D with one rounding.
//
// cuBLASLt is column-major and collage row-major: gemm_layout.h maps one to the other (our b is
// cuBLASLt's first operand, our a its second). The bias, a vector over cuBLASLt's m rows, is
// then per column of our D, as it should be.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "backend/cuda/runtime/gemm.h"
#include "backend/cuda/runtime/gemm_layout.h"
#include "backend/cuda/runtime/runtime.h"
#include "core/error.h"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN
namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // cuBLASLt's recommendation for Hopper

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail("cuBLASLt: {} failed: {} ({})", what, cublasLtGetStatusString(status), int(status));
}

// Everything that selects descriptors and an algorithm. Pointer alignment is part of it: the
// heuristic may pick vectorised kernels only for 16-byte aligned operands.
using ShapeKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, bool,
                            bool, int, int, int, int>;

int alignment(const void* pointer) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
  for (int bytes : {256, 128, 64, 32, 16, 8, 4}) {
    if (address % bytes == 0) return bytes;
  }
  return 2;
}

struct Plan {
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, output = nullptr;
  cublasLtMatmulAlgo_t algorithm{};
};

}  // namespace

struct GemmEngine {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<ShapeKey, Plan> plans;
};

GemmEngine* create_gemm_engine(CudaContext&) {
  auto* engine = new GemmEngine;
  check(cublasLtCreate(&engine->handle), "cublasLtCreate");
  if (cudaMalloc(&engine->workspace, kWorkspaceBytes) != cudaSuccess) {
    cublasLtDestroy(engine->handle);
    delete engine;
    fail("cuBLASLt: cannot allocate its {} MiB workspace", kWorkspaceBytes >> 20);
  }
  return engine;
}

void destroy_gemm_engine(CudaContext&, GemmEngine* engine) {
  if (!engine) return;
  for (auto& [key, plan] : engine->plans) {
    cublasLtMatrixLayoutDestroy(plan.first);
    cublasLtMatrixLayoutDestroy(plan.second);
    cublasLtMatrixLayoutDestroy(plan.output);
    cublasLtMatmulDescDestroy(plan.operation);
  }
  cudaFree(engine->workspace);
  cublasLtDestroy(engine->handle);
  delete engine;
}

namespace {

// A column-major bf16 layout of cuBLASLt.
cublasLtMatrixLayout_t layout(const ColumnMajorOperand& operand) {
  cublasLtMatrixLayout_t out = nullptr;
  check(cublasLtMatrixLayoutCreate(&out, CUDA_R_16BF, uint64_t(operand.rows),
                                   uint64_t(operand.cols), operand.ld),
        "cublasLtMatrixLayoutCreate");
  return out;
}

cublasOperation_t operation(const ColumnMajorOperand& operand) {
  return operand.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
}

Plan make_plan(GemmEngine& engine, const GemmCall& g) {
  const ColumnMajorGemm problem = column_major(g);
  Plan plan;
  check(cublasLtMatmulDescCreate(&plan.operation, CUBLAS_COMPUTE_32F, CUDA_R_32F),
        "cublasLtMatmulDescCreate");
  const cublasOperation_t first_op = operation(problem.first);
  const cublasOperation_t second_op = operation(problem.second);
  check(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSA, &first_op,
                                       sizeof first_op),
        "set TRANSA");
  check(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSB, &second_op,
                                       sizeof second_op),
        "set TRANSB");
  if (g.bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bias_type = CUDA_R_16BF;
    check(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                         sizeof epilogue),
          "set EPILOGUE");
    check(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                         &bias_type, sizeof bias_type),
          "set BIAS_DATA_TYPE");
  }
  plan.first = layout(problem.first);
  plan.second = layout(problem.second);
  plan.output = layout(problem.output);

  cublasLtMatmulPreference_t preference = nullptr;
  check(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
  const uint64_t workspace = kWorkspaceBytes;
  check(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &workspace, sizeof workspace),
        "set MAX_WORKSPACE_BYTES");
  // The heuristic may pick vectorised kernels only for operands aligned this well.
  auto min_alignment = [&](cublasLtMatmulPreferenceAttributes_t attribute, const void* pointer,
                           const char* what) {
    const uint32_t bytes = uint32_t(alignment(pointer));
    check(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &bytes, sizeof bytes), what);
  };
  min_alignment(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, g.b, "set MIN_ALIGNMENT_A_BYTES");
  min_alignment(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, g.a, "set MIN_ALIGNMENT_B_BYTES");
  min_alignment(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, g.d, "set MIN_ALIGNMENT_C_BYTES");
  min_alignment(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, g.d, "set MIN_ALIGNMENT_D_BYTES");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(engine.handle, plan.operation, plan.first, plan.second,
                                       plan.output, plan.output, preference, 1, &result, &found),
        "cublasLtMatmulAlgoGetHeuristic");
  cublasLtMatmulPreferenceDestroy(preference);
  COLLAGE_CHECK(found > 0,
                "cuBLASLt has no algorithm for the bf16 GEMM ({}x{}) · ({}x{}){}{}: M={} N={} K={}",
                g.M, g.K, g.K, g.N, g.bias ? " + bias" : "", g.accumulate ? ", accumulating" : "",
                g.M, g.N, g.K);
  plan.algorithm = result.algo;
  return plan;
}

}  // namespace

void gemm(CudaContext& cx, const GemmCall& g) {
  COLLAGE_CHECK(g.M >= 0 && g.N >= 0 && g.K >= 0, "gemm: negative shape {}x{}x{}", g.M, g.N, g.K);
  if (g.M == 0 || g.N == 0) return;
  GemmEngine& engine = *cx.gemm;
  const ShapeKey key{g.M,
                     g.N,
                     g.K,
                     g.lda,
                     g.ldb,
                     g.ldd,
                     g.transpose_a,
                     g.transpose_b,
                     g.bias != nullptr,
                     g.accumulate,
                     alignment(g.a),
                     alignment(g.b),
                     alignment(g.d),
                     alignment(g.bias)};
  auto found = engine.plans.find(key);
  if (found == engine.plans.end()) found = engine.plans.emplace(key, make_plan(engine, g)).first;
  Plan& plan = found->second;
  if (g.bias) {
    check(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias,
                                         sizeof g.bias),
          "set BIAS_POINTER");
  }
  const float alpha = 1.0f, beta = g.accumulate ? 1.0f : 0.0f;
  cx.launches++;
  if (cx.profile) profile_launch_begin(cx, "gemm");  // `collage bench --profile` only
  check(cublasLtMatmul(engine.handle, plan.operation, &alpha, g.b, plan.first, g.a, plan.second,
                       &beta, g.d, plan.output, g.d, plan.output, &plan.algorithm, engine.workspace,
                       kWorkspaceBytes, cx.stream),
        "cublasLtMatmul");
  if (cx.profile) profile_launch_end(cx);
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
