#pragma once
// Memory of one rank's training state: parameters, gradients, optimizer state by component
// and activations. The trainer fills it from its real allocations and `collage plan` from
// the same plans without allocating; both print it with format_memory_report().
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace collage {

struct MemoryReport {
  Precision precision = Precision::fp32_master;
  int tensor_parallel = 1;
  int data_parallel = 1;
  bool zero = false;    // ZeRO-1: the optimizer state is this rank's shard
  int micro_batch = 0;  // activations are for micro_batch × seq_len tokens
  int seq_len = 0;

  int64_t parameters = 0;      // this rank's parameters (its tensor-parallel shard)
  size_t parameter_bytes = 0;  // the parameter arena
  size_t gradient_bytes = 0;   // the gradient arena
  // Optimizer state: each component's bytes, and the arena holding them (alignment gaps
  // included). With data_parallel > 1 these are the ZeRO-1 shard of the rank.
  std::vector<StateComponent> state;
  size_t state_bytes = 0;
  size_t activation_bytes = 0;

  size_t total_bytes() const {
    return parameter_bytes + gradient_bytes + state_bytes + activation_bytes;
  }
  // (θ + g + state components) / parameters: the bytes/parameter of docs/PRECISION.md §6
  // (8, 10, 12, 10, 8, 16) without ZeRO (less with a ZeRO-1 shard); arena alignment
  // gaps are not counted.
  double bytes_per_parameter() const;
};

// A multi-line table, one row per item with bytes and bytes/parameter, e.g.
//   parameters (bf16)        1.71 GB    2 B/param
//   ...
//   θ + g + state            5.13 GB   12 B/param
// The first line starts with `title` ("memory per rank", "memory of rank 0 of 8").
std::string format_memory_report(const MemoryReport& report,
                                 const std::string& title = "memory per rank");

// "1.71 GB", "840.0 MB", "12.3 KB", "100 B" (decimal units: 1 GB = 10^9 bytes).
std::string format_bytes(double bytes);

// "40GB", "40 GB", "37.5GiB", "512MiB", "1000000" (bytes) -> bytes. KB/MB/GB/TB are powers
// of 10, KiB/MiB/GiB/TiB powers of 2 (case-insensitive). Throws Error on anything else.
double parse_bytes(const std::string& text);

// "m", "v", "δθ", "δv", "master", "compensation": how a component is shown.
std::string component_label(const std::string& name);

}  // namespace collage
