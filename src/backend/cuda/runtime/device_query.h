#pragma once
// Which GPUs the CUDA runtime can use (GPU build only: defined in runtime_device.cpp).
#include <string>

namespace collage::cuda {

// The number of usable GPUs; 0 with `why` set when there are none or the runtime cannot start
// (no driver: cudaGetDeviceCount fails with error 35 rather than reporting zero devices).
int usable_gpu_count(std::string& why);
// "NVIDIA A100-SXM4-40GB (108 SMs, 40 GiB)" for logs.
std::string gpu_name(int device);
// "NVIDIA A100-SXM4-40GB": the device's name alone, to look up its peak; "" when unknown.
std::string gpu_model_name(int device);

}  // namespace collage::cuda
