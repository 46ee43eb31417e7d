#pragma once
// The best rate of the cpu backend's GEMM engine on this machine: what MFU is measured against
// on the cpu and cuda-emulated backends (docs/ARCHITECTURE.md, "Model FLOPs and MFU").
//
// Each engine is measured the way the backend runs it, so that the step's GEMMs can at best
// reach it and MFU stays below 100% while the machine's speed holds: OpenBLAS as one
// single-threaded sgemm per OpenMP thread on that thread's own operands (matmul.cpp tiles the
// backend's products so), oneDNN as one matmul primitive over all the backend's OpenMP threads
// (OnednnGemm), in the storage type: bf16 operands, fp32 accumulation and bf16 output for the bf16
// backend.
//
// Size: both do 1024³ multiply-adds per thread, oneDNN as one (1024·threads × 1024) ·
// (1024 × 1024) product. A 1024³ product does 2·1024³ FLOPs on 3·1024² operands, ~340 FLOPs a
// byte in bf16 (~170 in fp32): compute bound on any CPU, and large enough that the blocking of
// either library runs at its best; with the work fixed per thread a repetition takes as long on
// 2 threads as on 64. Repetitions: the best of 3 to 10 after a warm-up (gemm_peak.cpp), a few
// tenths of a second in all.
#include <string>

#include "backend/cpu/onednn_gemm.h"

namespace collage::cpu {

// What multiplies a cpu backend's matrices.
enum class GemmEngine {
  openblas_sgemm,  // bf16 tiles widened to fp32, OpenBLAS sgemm
  onednn_bf16,     // oneDNN bf16 matmul, fp32 accumulation
  onednn_f32,      // oneDNN f32 matmul (the fp32 reference backend with parallel.cpu_gemm: onednn)
};

// The engine of a cpu backend with this parallel.cpu_gemm choice and storage type.
GemmEngine gemm_engine(const CpuGemmChoice& choice, bool bf16_storage);
// "OpenBLAS fp32 sgemm", "oneDNN bf16 matmul", "oneDNN f32 matmul".
const char* gemm_engine_name(GemmEngine engine);

struct GemmPeak {
  GemmEngine engine = GemmEngine::openblas_sgemm;
  double flops = 0;         // FLOP/s: the best repetition
  std::string measurement;  // how it was measured: "1024^3 per thread, 2 threads", for the log
};

// `engine`'s best rate on `threads` OpenMP threads (0: all). oneDNN engines need
// onednn_support() to have them (an Error otherwise, as OnednnGemm's).
GemmPeak measure_gemm_peak(GemmEngine engine, int threads);

}  // namespace collage::cpu
