#pragma once
// The arguments of one optimizer step over one parameter tensor. The strategy (src/optim/)
// decides which state components exist; the backend runs the per-element math, which lives
// in ONE header of __host__ __device__ functions (src/numerics/collage_math.h) shared by the
// cpu loop and the CUDA kernel, so both compute the same bits (docs/PRECISION.md §1).
#include <cstdint>

#include "numerics/bf16.h"
#include "numerics/precision.h"

namespace collage {

struct OptimizerStep {
  Precision precision = Precision::fp32_master;
  AdamOrder adam_order = AdamOrder::torch;
  bool collage_plus_reference_quirk = false;  // docs/PRECISION.md §8
  void* param = nullptr;       // (n) the weights the model reads, in the backend's storage type
  const void* grad = nullptr;  // (n) clipped, averaged gradient, same type
  int64_t n = 0;
  void* state[4] = {nullptr, nullptr, nullptr, nullptr};  // see Precision
  // AdamW hyperparameters of this step (weight_decay already 0 for no-decay tensors), in
  // double; the backend forms the fp32 scalars of docs/PRECISION.md §2 from them once per call.
  double lr = 0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0;
  int64_t t = 1;  // step counter, starts at 1
  // Global-norm clipping's factor, fused into the step: the step reads each gradient element
  // as rn(g·grad_scale), the bits Backend::scale would have stored, without a pass of its own
  // over the gradients (src/train/trainer.cpp). 1: the gradient as stored.
  float grad_scale = 1.0f;
  // stochastic rounding: element i of this tensor draws from a counter-based RNG keyed by
  // (rounding_seed, t, rounding_offset + i), so runs and resumes are reproducible.
  uint64_t rounding_seed = 0;
  int64_t rounding_offset = 0;
  // If set, this tensor's EDQ sums are ADDED to *edq, at the latest when the backend's
  // synchronize() returns (a backend that queues work fills it then): keep *edq alive and
  // unread until then.
  EdqSums* edq = nullptr;
};

}  // namespace collage
