// A micro-batch's backward leaves nothing behind that changes the next one's. Backward ops write
// their input's gradient and the models zero only the buffers that ops add into (backend.h), so
// a buffer that a model forgot to zero, or an op that read its old output, would carry the
// previous micro-batch's values into this one. A fresh model's buffers hold zeros, which would
// hide both. Each case runs another micro-batch first, then the one compared, and expects the
// parameter gradients of a fresh model that ran the compared one alone, bit for bit, on the cpu
// (bf16, as training runs) and under the CUDA emulator.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "dist/backend_choice.h"
#include "encoder_fixture.h"
#include "model/bert.h"
#include "model/gpt.h"
#include "model/host_values.h"

namespace collage {
namespace {

struct NamedBackend {
  std::string name;
  std::function<std::unique_ptr<Backend>()> make;
};
const NamedBackend kBackends[] = {{"cpu", [] { return make_cpu_backend(2); }},
                                  {"cuda-emulated", [] { return make_cuda_emulated_backend(); }}};

// The parameter gradients as bits, and how many differ from `want`'s.
std::vector<uint16_t> gradient_bits(Backend& backend, TrainableModel& model) {
  std::vector<uint16_t> bits(size_t(model.num_parameters()));
  backend.copy_to_host(bits.data(), model.gradient_memory(), bits.size() * sizeof(uint16_t));
  return bits;
}
int64_t differing(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want) {
  int64_t n = 0;
  for (size_t i = 0; i < got.size(); i++) n += got[i] != want[i];
  return n;
}

ModelConfig gpt_config(bool rope) {
  ModelConfig m;
  m.n_layer = 2, m.hidden_size = 32, m.n_head = 2, m.vocab_size = 77;
  m.max_position_embeddings = 16;
  if (rope) m.position_embedding = "rope", m.tie_embeddings = false;
  return m;
}

TEST(BackwardReuse, GptSecondMicroBatchMatchesAFreshModel) {
  const int B = 3, T = 16;
  std::vector<int32_t> first(B * T), second(B * T), targets(B * T);
  for (int i = 0; i < B * T; i++)
    first[i] = (i * 7 + 3) % 77, second[i] = (i * 11 + 5) % 77, targets[i] = (i * 13 + 1) % 77;
  for (const NamedBackend& nb : kBackends) {
    for (const bool rope : {false, true}) {
      SCOPED_TRACE(nb.name + (rope ? ", rope, untied" : ", learned positions, tied"));
      auto backend = nb.make();
      GPT fresh(gpt_config(rope), *backend, B, T), reused(gpt_config(rope), *backend, B, T);
      fresh.init_weights(5), reused.init_weights(5);
      const float dloss = 1.0f / (B * T);
      fresh.forward(second.data(), targets.data(), B);
      fresh.backward(dloss);
      reused.forward(first.data(), first.data(), B);  // other tokens and targets
      reused.backward(dloss);
      reused.zero_gradients();
      reused.forward(second.data(), targets.data(), B);
      reused.backward(dloss);
      const auto want = gradient_bits(*backend, fresh);
      EXPECT_EQ(differing(gradient_bits(*backend, reused), want), 0);
    }
  }
}

// BERT with both heads and dropout (the fixture's config keeps the default 0.1): the earlier
// micro-batch runs with dropout when the compared one runs without it, and the other way
// round, so that both of BertT's dropout backwards (the op, and the copy when it is off) meet
// buffers that hold other values.
TEST(BackwardReuse, BertSecondMicroBatchMatchesAFreshModel) {
  const test::Fixture f = test::read_encoder_fixture("bert");
  const test::EncoderCase k = test::encoder_case(f, "bert");
  ASSERT_GT(k.config.hidden_dropout, 0.0f);
  for (const NamedBackend& nb : kBackends) {
    for (const bool compared_dropout : {false, true}) {
      SCOPED_TRACE(nb.name + (compared_dropout ? ", compared with dropout" : ", without"));
      auto backend = nb.make();
      BERT fresh(k.config, *backend, k.B, k.T, k.P), reused(k.config, *backend, k.B, k.T, k.P);
      fresh.init_weights(9), reused.init_weights(9);
      fresh.forward(k.batch(), k.B, compared_dropout, 21, 2);
      fresh.backward(0.5f, 0.5f);
      reused.forward(k.batch(), k.B, !compared_dropout, 17, 1);
      reused.backward(0.5f, 0.5f);
      reused.zero_gradients();
      reused.forward(k.batch(), k.B, compared_dropout, 21, 2);
      reused.backward(0.5f, 0.5f);
      const auto want = gradient_bits(*backend, fresh);
      EXPECT_EQ(differing(gradient_bits(*backend, reused), want), 0);
    }
  }
}

}  // namespace
}  // namespace collage
