// Fuzz target: a checkpoint file (load_checkpoint: header, metadata JSON, tensor table,
// checksum).
#include "checkpoint/checkpoint.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collage;
  const std::string path =
      fuzz::write_file("step_00000001.ckpt", {reinterpret_cast<const char*>(data), size});
  fuzz::refusals_allowed([&] { load_checkpoint(path); });
  return 0;
}
