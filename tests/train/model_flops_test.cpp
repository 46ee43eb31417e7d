// The model FLOP count (src/plan/model_flops.h) against two independent things: the
// published parameter counts of the Hugging Face models collage's configs reproduce (GPT-2
// 124,439,808; BertForPreTraining bert-base-uncased 110,106,428; RobertaForMaskedLM
// roberta-base 124,697,433), and collage's own parameter table, whose every row must land in
// exactly one share of the count (or be a lookup table the count leaves out).
#include "plan/model_flops.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>

#include "backend/cpu/onednn_gemm.h"
#include "config/architecture.h"
#include "config/config.h"
#include "core/error.h"
#include "model/trainable_model.h"

namespace collage {
namespace {

Config config_file(const std::string& relative, const std::vector<std::string>& overrides = {}) {
  return load_config(fmt::format("{}/{}", COLLAGE_SOURCE_DIR, relative), overrides);
}

// The shares of model_flops() rebuilt from the parameter table by name. Vocabulary-sized rows
// are padded to a multiple of 128 in the table; the count uses the real vocabulary.
struct TableShares {
  double body = 0, masked_head = 0, sequence_head = 0, lookup = 0;
};

TableShares shares_from_table(const ModelConfig& m) {
  TableShares s;
  const double vocab_scale = double(m.vocab_size) / m.padded_vocab();
  const bool encoder = architecture(m).family == ModelFamily::bert;  // bert.h's names
  for (const ParameterInfo& info : model_parameter_table(m)) {
    const std::string& name = info.name;
    const bool vocab_rows = name == "wte.weight" || name == "lm_head.weight" ||
                            name == "embeddings.word.weight" || name == "mlm.decoder.bias";
    const double n = vocab_rows ? info.numel * vocab_scale : double(info.numel);
    if (!encoder) {
      if (name == "wpe.weight" || (name == "wte.weight" && !m.tie_embeddings)) {
        s.lookup += n;
      } else {
        s.body += n;  // blocks, ln_f, and the head (wte when tied, else lm_head)
      }
    } else if (name == "embeddings.position.weight" || name == "embeddings.token_type.weight") {
      s.lookup += n;
    } else if (name == "embeddings.word.weight" || name.starts_with("mlm.")) {
      s.masked_head += n;  // the word embedding is the MLM decoder's (tied) weight
    } else if (name.starts_with("pooler.") || name.starts_with("nsp.")) {
      s.sequence_head += n;
    } else {
      s.body += n;
    }
  }
  return s;
}

void expect_shares_match_table(const Config& config) {
  const ModelFlops f = model_flops(config);
  const TableShares s = shares_from_table(config.model);
  EXPECT_EQ(f.body_parameters, s.body);
  EXPECT_EQ(f.masked_head_parameters, s.masked_head);
  EXPECT_EQ(f.sequence_head_parameters, s.sequence_head);
}

TEST(ModelFlops, Gpt2SmallMatchesItsPublishedSizeAndHandArithmetic) {
  const Config config = config_file("configs/gpt/125m.yaml",
                                    {"data.seq_len=1024", "model.max_position_embeddings=1024"});
  const ModelFlops f = model_flops(config);
  // GPT-2 124M has 124,439,808 parameters, of which the 1024×768 position table is looked up.
  EXPECT_EQ(f.body_parameters + 1024 * 768, 124439808.0);
  // 6N + 12·L·T·C = 6·123,653,376 + 12·12·1024·768 = 741,920,256 + 113,246,208.
  EXPECT_EQ(f.per_token(), 855166464.0);
  EXPECT_EQ(f.per_sequence(), 855166464.0 * 1024);
  expect_shares_match_table(config);
}

TEST(ModelFlops, BertBaseMatchesBertForPreTraining) {
  const Config config = config_file("configs/bert/base.yaml", {"data.seq_len=128"});
  const ModelFlops f = model_flops(config);
  const double lookups = 512 * 768 + 2 * 768;  // positions, token types
  EXPECT_EQ(f.body_parameters + f.masked_head_parameters + f.sequence_head_parameters + lookups,
            110106428.0);
  // The MLM head runs on max_predictions rows, the pooler and NSP on one row per sequence.
  const int P = config.data.max_predictions;
  ASSERT_GT(P, 0);
  EXPECT_EQ(f.masked_positions, P);
  EXPECT_EQ(f.per_sequence(), 6 * (f.body_parameters * 128 + f.masked_head_parameters * P +
                                   f.sequence_head_parameters) +
                                  12.0 * 12 * 128 * 768 * 128);
  expect_shares_match_table(config);
}

TEST(ModelFlops, RobertaBaseMatchesRobertaForMaskedLM) {
  const Config config = config_file("configs/roberta/base.yaml");
  const ModelFlops f = model_flops(config);
  EXPECT_EQ(f.sequence_head_parameters, 0.0);  // no pooler, no NSP
  EXPECT_EQ(f.body_parameters + f.masked_head_parameters + 514 * 768 + 1 * 768, 124697433.0);
  expect_shares_match_table(config);
}

TEST(ModelFlops, EveryTableRowIsCountedOnceForOtherShapes) {
  // Untied rope GPT (lm_head counted, wte looked up), odd sizes, and the tiny demo configs.
  expect_shares_match_table(config_file(
      "configs/demo/gpt-tiny.yaml", {"model.position_embedding=rope", "model.tie_embeddings=false",
                                     "model.vocab_size=301", "model.ffn_hidden_size=100"}));
  expect_shares_match_table(config_file("configs/demo/gpt-tiny.yaml"));
  expect_shares_match_table(config_file("configs/demo/bert-tiny.yaml"));
  expect_shares_match_table(config_file("configs/gpt/6.7b.yaml"));
}

TEST(ModelFlops, GpuPeaksComeFromTheDatasheetTable) {
  EXPECT_EQ(gpu_peak("NVIDIA A100-SXM4-80GB").flops, 312e12);
  EXPECT_EQ(gpu_peak("NVIDIA A100-SXM4-40GB").flops, 312e12);
  EXPECT_EQ(gpu_peak("NVIDIA H100 80GB HBM3").flops, 989e12);
  EXPECT_EQ(gpu_peak("NVIDIA H100 PCIe").flops, 756e12);
  EXPECT_EQ(gpu_peak("NVIDIA H100 NVL").flops, 835e12);
  EXPECT_EQ(gpu_peak("NVIDIA H200").flops, 989e12);
  const DevicePeak unknown = gpu_peak("NVIDIA GeForce RTX 4090");
  EXPECT_EQ(unknown.flops, 0.0);  // no MFU rather than a made-up one
  EXPECT_NE(unknown.source.find("RTX 4090"), std::string::npos) << unknown.source;
}

// The cpu backends' peak is the measured rate of the engine that multiplies: the one
// parallel.cpu_gemm resolves to for the cpu backend, OpenBLAS sgemm for cuda-emulated (its
// cuBLASLt calls become sgemm), whatever parallel.cpu_gemm says.
TEST(ModelFlops, CpuPeakIsTheMeasuredRateOfTheEngineThatRuns) {
  const bool onednn_bf16 = cpu::onednn_support().bf16_matmul;
  const std::string sgemm = "cpu: OpenBLAS fp32 sgemm measured at ";
  const std::string onednn = "cpu: oneDNN bf16 matmul measured at ";
  ParallelConfig parallel;
  parallel.threads = 1;
  parallel.cpu_gemm = "onednn";
  const DevicePeak emulated = backend_peak("cuda-emulated", parallel, 0);
  EXPECT_EQ(emulated.source.find(sgemm), 0u) << emulated.source;
  const std::pair<const char*, std::string> expected[] = {
      {"auto", onednn_bf16 ? onednn : sgemm}, {"openblas", sgemm}, {"onednn", onednn}};
  for (const auto& [setting, source] : expected) {
    SCOPED_TRACE(setting);
    parallel.cpu_gemm = setting;
    if (source == onednn && !onednn_bf16) {  // refused, as make_cpu_backend refuses it
      EXPECT_THROW(backend_peak("cpu", parallel, 0), Error);
      continue;
    }
    const DevicePeak peak = backend_peak("cpu", parallel, 0);
    EXPECT_TRUE(std::isfinite(peak.flops) && peak.flops > 0) << peak.flops;
    EXPECT_EQ(peak.source.find(source), 0u) << peak.source;
    EXPECT_NE(peak.source.find(format_flop_rate(peak.flops) + " ("), std::string::npos)
        << peak.source;
    EXPECT_NE(peak.source.find(", 1 thread"), std::string::npos) << peak.source;
  }
}

TEST(ModelFlops, RatesReadInTheirUnit) {
  EXPECT_EQ(format_flop_rate(41.26e12), "41.3 TFLOP/s");
  EXPECT_EQ(format_flop_rate(87.24e9), "87.2 GFLOP/s");
}

}  // namespace
}  // namespace collage
