#pragma once
// Moving a model's values between host floats and device storage: bf16 storage rounds
// (nearest-even) on the way in and widens exactly on the way out; fp32 storage copies. Shared
// by the models' load/save of parameters and the tests that read gradients back.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "backend/backend.h"
#include "numerics/bf16.h"

namespace collage {

template <typename Storage>
void upload_values(BackendT<Storage>& backend, Storage* device, const float* host, int64_t n) {
  std::vector<Storage> staged(static_cast<size_t>(n));
  if constexpr (std::is_same_v<Storage, bf16>) {
    float_to_bf16_array(host, staged.data(), n);
  } else {
    std::copy(host, host + n, staged.begin());
  }
  backend.copy_to_device(device, staged.data(), staged.size() * sizeof(Storage));
}

template <typename Storage>
void download_values(BackendT<Storage>& backend, float* host, const Storage* device, int64_t n) {
  std::vector<Storage> staged(static_cast<size_t>(n));
  backend.copy_to_host(staged.data(), device, staged.size() * sizeof(Storage));
  if constexpr (std::is_same_v<Storage, bf16>) {
    bf16_to_float_array(staged.data(), host, n);
  } else {
    std::copy(staged.begin(), staged.end(), host);
  }
}

// The n values at `device` as host floats.
template <typename Storage>
std::vector<float> download_values(BackendT<Storage>& backend, const Storage* device, int64_t n) {
  std::vector<float> host(static_cast<size_t>(n));
  download_values(backend, host.data(), device, n);
  return host;
}

}  // namespace collage
