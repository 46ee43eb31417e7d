// Test helper for tests/export/export_gpt2_test.py: collage's own logits for given tokens, from
// a checkpoint, to compare with GPT-2's forward in torch on the exported weights.
//
//   export_dump_logits CHECKPOINT TOKENS B T OUT fp32|bf16
//
// TOKENS: B·T int32 token ids (raw little-endian); OUT: B·T·V float32 logits (V =
// model.vocab_size, the padding columns dropped). fp32 runs GptT<float> on the cpu backend with
// the checkpoint's bf16 weights widened exactly (no rounding anywhere after); bf16 runs the
// trained model as it trains (GptT<bf16>, every stored activation rounded to bf16).
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "model/gpt.h"
#include "model/host_values.h"
#include "numerics/bf16.h"
#include "tools/export.h"

namespace {

template <typename Storage>
std::vector<float> logits(collage::BackendT<Storage>& backend, const collage::ModelConfig& config,
                          const std::vector<float>& weights, const std::vector<int32_t>& tokens,
                          int B, int T) {
  collage::GptT<Storage> model(config, backend, B, T);
  model.load_parameters(weights.data());  // bf16 storage: exact, the values are bf16 already
  model.forward(tokens.data(), nullptr, B);
  const int64_t Vp = config.padded_vocab(), V = config.vocab_size;
  const std::vector<float> padded = collage::download_values(backend, model.logits(), B * T * Vp);
  std::vector<float> out;
  out.reserve(size_t(B * T * V));
  for (int64_t row = 0; row < int64_t{B} * T; row++)
    out.insert(out.end(), padded.begin() + row * Vp, padded.begin() + row * Vp + V);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s CHECKPOINT TOKENS B T OUT fp32|bf16\n", argv[0]);
    return 2;
  }
  try {
    const std::string mode = argv[6];
    const int B = std::atoi(argv[3]), T = std::atoi(argv[4]);
    const collage::CheckpointWeights w = collage::read_checkpoint_weights(argv[1]);
    std::vector<int32_t> tokens(size_t(B) * T);
    std::ifstream in(argv[2], std::ios::binary);
    in.read(reinterpret_cast<char*>(tokens.data()), std::streamsize(tokens.size() * 4));
    if (!in) throw collage::Error(fmt::format("{}: fewer than {} int32 tokens", argv[2], B * T));
    std::vector<float> weights(w.values.size());
    collage::bf16_to_float_array(w.values.data(), weights.data(), int64_t(weights.size()));
    std::vector<float> out;
    if (mode == "fp32") {
      auto backend = collage::make_cpu_backend_fp32(0);
      out = logits(*backend, w.config.model, weights, tokens, B, T);
    } else if (mode == "bf16") {
      auto backend = collage::make_cpu_backend(0);
      out = logits(*backend, w.config.model, weights, tokens, B, T);
    } else {
      throw collage::Error("mode must be fp32 or bf16, got " + mode);
    }
    std::ofstream file(argv[5], std::ios::binary);
    file.write(reinterpret_cast<const char*>(out.data()), std::streamsize(out.size() * 4));
    if (!file) throw collage::Error(fmt::format("{}: write failed", argv[5]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "export_dump_logits: %s\n", e.what());
    return 1;
  }
  return 0;
}
