// Test helper for the export tests (tests/export/export_gpt2_test.py, export_hf_test.py):
// collage's own logits for given inputs, from a checkpoint, to compare with Hugging Face's
// forward in torch on the exported weights.
//
//   export_dump_logits CHECKPOINT TOKENS B T OUT MODE
//       a GPT: TOKENS, B·T int32 token ids; OUT, the (B, T, V) logits
//   export_dump_logits CHECKPOINT INPUT_IDS TOKEN_TYPE_IDS ATTENTION_MASK B T OUT NSP_OUT MODE
//       an encoder (BERT, RoBERTa): three files of B·T int32 each (attention_mask 1 for a real
//       token, 0 for padding); OUT, the (B, T, V) masked-LM logits at every position
//       (BertT's inference mode, bert.h); NSP_OUT, BERT's (B, 2) next-sentence logits, or "-"
//       for an architecture without that head
//
// Every file is raw little-endian; outputs are float32 with V = model.vocab_size (the padding
// columns dropped). The form must match the checkpoint's architecture. MODE fp32 runs the model at
// fp32 (GptT<float> / BertT<float> on the cpu backend) with the checkpoint's bf16 weights widened
// exactly (no rounding anywhere after); MODE bf16 runs the trained model as it trains (every stored
// activation rounded to bf16).
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "config/architecture.h"
#include "model/bert.h"
#include "model/gpt.h"
#include "model/host_values.h"
#include "numerics/bf16.h"
#include "tools/export.h"

namespace {

struct Inputs {
  int B = 0, T = 0;
  std::vector<int32_t> ids, types, mask;  // (B, T); types and mask: encoders only
};

struct Logits {
  std::vector<float> lm;   // (B, T, V)
  std::vector<float> nsp;  // (B, 2), BERT only
};

std::vector<int32_t> read_ints(const std::string& path, int64_t count) {
  std::vector<int32_t> values(static_cast<size_t>(count));
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(values.data()), std::streamsize(values.size() * 4));
  if (!in) throw collage::Error(fmt::format("{}: fewer than {} int32 values", path, count));
  return values;
}

void write_floats(const std::string& path, const std::vector<float>& values) {
  std::ofstream file(path, std::ios::binary);
  file.write(reinterpret_cast<const char*>(values.data()), std::streamsize(values.size() * 4));
  if (!file) throw collage::Error(fmt::format("{}: write failed", path));
}

// (rows, Vp) on the device -> (rows, V) on the host.
template <typename Storage>
std::vector<float> real_columns(collage::BackendT<Storage>& backend, const Storage* logits,
                                int64_t rows, const collage::ModelConfig& config) {
  const int64_t Vp = config.padded_vocab(), V = config.vocab_size;
  const std::vector<float> padded = collage::download_values(backend, logits, rows * Vp);
  std::vector<float> out;
  out.reserve(size_t(rows * V));
  for (int64_t row = 0; row < rows; row++)
    out.insert(out.end(), padded.begin() + row * Vp, padded.begin() + row * Vp + V);
  return out;
}

template <typename Storage>
Logits gpt_logits(collage::BackendT<Storage>& backend, const collage::ModelConfig& config,
                  const std::vector<float>& weights, const Inputs& in) {
  collage::GptT<Storage> model(config, backend, in.B, in.T);
  model.load_parameters(weights.data());  // bf16 storage: exact, the values are bf16 already
  model.forward(in.ids.data(), nullptr, in.B);
  return {real_columns(backend, model.logits(), int64_t{in.B} * in.T, config), {}};
}

template <typename Storage>
Logits encoder_logits(collage::BackendT<Storage>& backend, const collage::ModelConfig& config,
                      const std::vector<float>& weights, const Inputs& in) {
  // max_predictions = T: room for the head at every position.
  collage::BertT<Storage> model(config, backend, in.B, in.T, in.T);
  model.load_parameters(weights.data());
  collage::BertInputs batch;  // no labels: every position, no loss (bert.h)
  batch.input_ids = in.ids.data();
  batch.input_mask = in.mask.data();
  batch.segment_ids = in.types.data();
  model.forward(batch, in.B, /*dropout=*/false);
  Logits out{real_columns(backend, model.mlm_logits(), int64_t{in.B} * in.T, config), {}};
  if (model.nsp_logits())
    out.nsp = collage::download_values(backend, model.nsp_logits(), int64_t{in.B} * 2);
  return out;
}

template <typename Storage>
Logits logits(collage::BackendT<Storage>& backend, const collage::ModelConfig& config,
              const std::vector<float>& weights, const Inputs& in, bool encoder) {
  return encoder ? encoder_logits(backend, config, weights, in)
                 : gpt_logits(backend, config, weights, in);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7 && argc != 10) {
    std::fprintf(stderr,
                 "usage: %s CHECKPOINT TOKENS B T OUT fp32|bf16\n"
                 "       %s CHECKPOINT INPUT_IDS TOKEN_TYPE_IDS ATTENTION_MASK B T OUT NSP_OUT|- "
                 "fp32|bf16\n",
                 argv[0], argv[0]);
    return 2;
  }
  try {
    const bool encoder_form = argc == 10;
    const std::string checkpoint = argv[1], mode = argv[argc - 1];
    const int shape_at = encoder_form ? 5 : 3;
    Inputs in;
    in.B = std::atoi(argv[shape_at]), in.T = std::atoi(argv[shape_at + 1]);
    const std::string out_path = argv[shape_at + 2];
    const std::string nsp_path = encoder_form ? argv[8] : "-";
    if (in.B < 1 || in.T < 1)
      throw collage::Error(fmt::format("B {} and T {} must be >= 1", in.B, in.T));
    if (mode != "fp32" && mode != "bf16")
      throw collage::Error("mode must be fp32 or bf16, got " + mode);

    const collage::CheckpointWeights w = collage::read_checkpoint_weights(checkpoint);
    const collage::ModelConfig& config = w.config.model;
    const collage::Architecture& arch = collage::architecture(config);
    const bool encoder = arch.objective == collage::Objective::masked_lm;
    if (encoder != encoder_form)
      throw collage::Error(
          fmt::format("{}: model.arch {} takes the {} form (see the usage)", checkpoint,
                      config.arch, encoder ? "INPUT_IDS TOKEN_TYPE_IDS ATTENTION_MASK" : "TOKENS"));
    if (encoder && arch.next_sentence == (nsp_path == "-"))
      throw collage::Error(
          fmt::format("{}: model.arch {} {} a next-sentence head: NSP_OUT must be {}, got {}",
                      checkpoint, config.arch, arch.next_sentence ? "has" : "has no",
                      arch.next_sentence ? "a file" : "-", nsp_path));
    const int64_t n = int64_t{in.B} * in.T;
    in.ids = read_ints(argv[2], n);
    if (encoder) in.types = read_ints(argv[3], n), in.mask = read_ints(argv[4], n);

    std::vector<float> weights(w.values.size());
    collage::bf16_to_float_array(w.values.data(), weights.data(), int64_t(weights.size()));
    Logits out;
    if (mode == "fp32") {
      auto backend = collage::make_cpu_backend_fp32(0);
      out = logits(*backend, config, weights, in, encoder);
    } else {
      auto backend = collage::make_cpu_backend(0);
      out = logits(*backend, config, weights, in, encoder);
    }
    write_floats(out_path, out.lm);
    if (nsp_path != "-") write_floats(nsp_path, out.nsp);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "export_dump_logits: %s\n", e.what());
    return 1;
  }
  return 0;
}
