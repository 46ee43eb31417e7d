// The BERT and RoBERTa encoders on the cuda backend (its kernels under the host SIMT emulator,
// and on a real GPU where there is one) against the cpu backend: the same weights and padded batch
// (the PyTorch fixtures of scripts/reference/bert_reference.py), with dropout on, give the same
// losses and gradients. Dropout draws identical masks on both (Philox by element index), so the
// only differences are the kernels' summation orders. Measured on these fixtures: the MLM loss
// sum 8.5e-9 relative (RoBERTa; BERT's equal), every gradient bit-identical. Limits: losses 1e-5
// relative, gradients 1e-3 of each tensor's norm (the attention kernels may differ from the cpu by
// a few ulp on other shapes); a wrong mask, layout or op gives O(1) differences. The fixture's
// 8-dimensional heads run the SIMT attention kernels, whose probabilities stay fp32 as the cpu's
// OpenBLAS engine keeps them, so the cpu runs that engine (cpu_gemm openblas): its oneDNN engine
// rounds them to bf16 as the tensor-core kernels do (docs/ARCHITECTURE.md, "cpu attention").
#include "model/bert.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../model/fixture_reader.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "dist/backend_choice.h"
#include "model/host_values.h"

namespace collage {
namespace {

using test::entry;

struct EncoderRun {
  BertT<bf16>::Loss loss;
  std::vector<float> grads;
};

EncoderRun run(Backend& backend, const std::string& arch, std::vector<ParameterInfo>* table) {
  const test::Fixture f =
      test::read_fixture(fmt::format("{}/{}_encoder.bin", COLLAGE_FIXTURES, arch));
  const std::vector<float>& c = entry(f, "config").data;
  ModelConfig config;
  config.arch = arch;
  config.n_layer = int(c[0]), config.hidden_size = int(c[1]), config.n_head = int(c[2]);
  config.ffn_hidden_size = int(c[3]), config.vocab_size = int(c[4]);
  config.max_position_embeddings = int(c[5]), config.type_vocab_size = int(c[6]);
  config.pad_token_id = int(c[7]), config.layernorm_eps = c[8];
  config.hidden_dropout = 0.1f, config.attention_dropout = 0.1f;
  const int P = int(c[9]);
  const std::vector<int64_t>& shape = entry(f, "batch.input_ids").shape;
  const int B = int(shape[0]), T = int(shape[1]);
  auto ints = [&](const std::string& name) {
    const std::vector<float>& d = entry(f, name).data;
    return std::vector<int32_t>(d.begin(), d.end());
  };
  const std::vector<int32_t> ids = ints("batch.input_ids"), mask = ints("batch.input_mask"),
                             segments = ints("batch.segment_ids"),
                             positions = ints("batch.masked_lm_positions"),
                             labels = ints("batch.masked_lm_ids");
  const std::vector<int32_t> nsp =
      arch == "bert" ? ints("batch.next_sentence_labels") : std::vector<int32_t>();

  BertT<bf16> model(config, backend, B, T, P);
  std::vector<float> host(size_t(model.num_parameters()));
  for (const ParameterInfo& p : model.parameters()) {
    const test::FixtureTensor& t = entry(f, "param." + p.name);
    std::copy(t.data.begin(), t.data.end(), host.begin() + p.offset);
  }
  model.load_parameters(host.data());
  model.zero_gradients();
  const BertInputs batch{ids.data(),       mask.data(),   segments.data(),
                         positions.data(), labels.data(), nsp.empty() ? nullptr : nsp.data()};
  EncoderRun r;
  r.loss = model.forward(batch, B, /*dropout=*/true, /*dropout_seed=*/77, /*dropout_index=*/5);
  model.backward(float(1.0 / double(r.loss.mlm_count)),
                 r.loss.nsp_count ? float(1.0 / double(r.loss.nsp_count)) : 0.0f);
  r.grads = download_values(backend, model.gradient_memory(), model.num_parameters());
  *table = model.parameters();
  return r;
}

class CudaBert : public ::testing::TestWithParam<const char*> {};

// The encoder's forward and backward on `cuda` against the cpu's.
void expect_follows_the_cpu(const std::string& arch, Backend& cuda_backend) {
  auto cpu = make_cpu_backend(2, "openblas");
  Backend* cuda = &cuda_backend;
  std::vector<ParameterInfo> table;
  const EncoderRun want = run(*cpu, arch, &table), got = run(*cuda, arch, &table);
  ASSERT_EQ(got.loss.mlm_count, want.loss.mlm_count);
  EXPECT_LT(std::abs(got.loss.mlm_sum - want.loss.mlm_sum) / want.loss.mlm_sum, 1e-5)
      << "MLM " << got.loss.mlm_sum << " vs " << want.loss.mlm_sum;
  if (arch == "bert")
    EXPECT_LT(std::abs(got.loss.nsp_sum - want.loss.nsp_sum) / want.loss.nsp_sum, 1e-5)
        << "NSP " << got.loss.nsp_sum << " vs " << want.loss.nsp_sum;
  for (const ParameterInfo& p : table) {
    double diff = 0, norm = 0;
    for (int64_t i = p.offset; i < p.offset + p.numel; i++) {
      diff += double(got.grads[i] - want.grads[i]) * (got.grads[i] - want.grads[i]);
      norm += double(want.grads[i]) * want.grads[i];
    }
    EXPECT_LT(std::sqrt(diff / std::max(norm, 1e-30)), 1e-3) << p.name;
  }
}

TEST_P(CudaBert, EmulatedFollowsTheCpu) {
  expect_follows_the_cpu(GetParam(), *make_cuda_emulated_backend());
}

// The same on a real GPU: skipped on machines without one.
TEST_P(CudaBert, DeviceFollowsTheCpu) {
  if (choose_backend("auto").name != "cuda") GTEST_SKIP() << "no usable GPU";
  expect_follows_the_cpu(GetParam(), *make_cuda_backend(0));
}

INSTANTIATE_TEST_SUITE_P(Encoders, CudaBert, ::testing::Values("bert", "roberta"));

}  // namespace
}  // namespace collage
