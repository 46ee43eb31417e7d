// Same inputs, same thread count: bit-identical results, for every op whose parallel
// decomposition could race or reorder sums (gradient accumulation over rows or tokens,
// tiled GEMMs, reductions). Sizes large enough that both threads take part.
#include "backend/cpu/cpu_backend.h"
#include "backend_test_util.h"

namespace collage::test {
namespace {

// Runs `op` twice on fresh copies of `initial` and expects the same bits.
template <typename T, typename B, typename Op>
void expect_repeatable(B& backend, const std::vector<T>& initial, Op op, const std::string& what) {
  DeviceBuffer<T, B> first(backend, initial), second(backend, initial);
  op(first.get());
  op(second.get());
  EXPECT_TRUE(same_bits(first.download(), second.download())) << what;
}

TEST(Determinism, BackwardOpsAndReductionsRepeatBitForBit) {
  auto backend = make_cpu_backend(kThreads);
  Rng rng(1);
  using Buffer = DeviceBuffer<bf16, Backend>;

  {  // matmul backward: several channel tiles per thread, partial dinp sums
    const int N = 37, C = 96, OC = 1100;
    Buffer inp(*backend, random_values<bf16>(rng, size_t(N) * C)),
        weight(*backend, random_values<bf16>(rng, size_t(OC) * C)),
        dout(*backend, random_values<bf16>(rng, size_t(N) * OC));
    const auto zeros_in = std::vector<bf16>(size_t(N) * C),
               zeros_w = std::vector<bf16>(size_t(OC) * C);
    expect_repeatable(
        *backend, zeros_in,
        [&](bf16* d) {
          backend->matmul_backward(d, nullptr, nullptr, dout.get(), inp.get(), weight.get(), N, C,
                                   OC);
        },
        "matmul dinp");
    expect_repeatable(
        *backend, zeros_w,
        [&](bf16* d) {
          backend->matmul_backward(nullptr, d, nullptr, dout.get(), inp.get(), weight.get(), N, C,
                                   OC);
        },
        "matmul dweight");
    expect_repeatable(
        *backend, std::vector<bf16>(OC),
        [&](bf16* d) {
          backend->matmul_backward(nullptr, nullptr, d, dout.get(), inp.get(), weight.get(), N, C,
                                   OC);
        },
        "matmul dbias");
  }
  {  // embedding backward: 512 positions over 20 tokens, so every token repeats
    const int B = 4, T = 128, C = 40, V = 20;
    std::vector<int32_t> tokens(size_t(B) * T);
    for (auto& t : tokens) t = rng.integer(0, V - 1);
    DeviceBuffer<int32_t, Backend> d_tokens(*backend, tokens);
    Buffer dout(*backend, random_values<bf16>(rng, size_t(B) * T * C));
    expect_repeatable(
        *backend, std::vector<bf16>(size_t(V) * C),
        [&](bf16* d) {
          backend->embedding_backward(d, nullptr, dout.get(), d_tokens.get(), B, T, C, 0, V);
        },
        "dwte");
    expect_repeatable(
        *backend, std::vector<bf16>(size_t(T) * C),
        [&](bf16* d) {
          backend->embedding_backward(nullptr, d, dout.get(), d_tokens.get(), B, T, C, 0, V);
        },
        "dwpe");
  }
  {  // layernorm parameter gradients: sums over all rows
    const int N = 300, C = 200;
    Buffer inp(*backend, random_values<bf16>(rng, size_t(N) * C)),
        weight(*backend, random_values<bf16>(rng, C)),
        dout(*backend, random_values<bf16>(rng, size_t(N) * C));
    DeviceBuffer<float, Backend> mean(*backend, size_t(N)), rstd(*backend, size_t(N));
    Buffer out(*backend, size_t(N) * C);
    backend->layernorm_forward(out.get(), mean.get(), rstd.get(), inp.get(), weight.get(),
                               weight.get(), N, C, 1e-5f);
    expect_repeatable(
        *backend, std::vector<bf16>(C),
        [&](bf16* d) {
          backend->layernorm_backward(nullptr, d, nullptr, dout.get(), inp.get(), weight.get(),
                                      mean.get(), rstd.get(), N, C);
        },
        "layernorm dweight");
  }
  {  // attention backward
    const int B = 2, T = 100, NH = 3, HS = 16;
    Buffer qkv(*backend, random_values<bf16>(rng, size_t(B) * T * 3 * NH * HS)),
        dout(*backend, random_values<bf16>(rng, size_t(B) * T * NH * HS)),
        out(*backend, size_t(B) * T * NH * HS);
    DeviceBuffer<float, Backend> lse(*backend, size_t(B) * NH * T);
    backend->attention_forward(out.get(), lse.get(), qkv.get(), nullptr, true, B, T, NH, HS);
    expect_repeatable(
        *backend, std::vector<bf16>(size_t(B) * T * 3 * NH * HS),
        [&](bf16* d) {
          backend->attention_backward(d, dout.get(), out.get(), qkv.get(), lse.get(), nullptr, true,
                                      B, T, NH, HS);
        },
        "dqkv");
  }
  {  // cross-entropy backward
    const int N = 16, V = 3000, Vp = 3072;
    Buffer logits(*backend, random_values<bf16>(rng, size_t(N) * Vp, 3.0));
    std::vector<int32_t> targets(N);
    for (auto& t : targets) t = rng.integer(0, V - 1);
    DeviceBuffer<int32_t, Backend> d_targets(*backend, targets);
    expect_repeatable(
        *backend, std::vector<bf16>(size_t(N) * Vp),
        [&](bf16* d) {
          backend->cross_entropy_backward(d, logits.get(), d_targets.get(), N, V, Vp, 0.1f);
        },
        "dlogits");
  }
  {  // host reductions
    const int64_t n = 1000003;
    Buffer x(*backend, random_values<bf16>(rng, size_t(n)));
    std::vector<float> f(n);
    for (auto& v : f) v = float(rng.normal());
    DeviceBuffer<float, Backend> d_f(*backend, f);
    const double squares = backend->sum_squares(x.get(), n), total = backend->sum(d_f.get(), n);
    EXPECT_EQ(backend->sum_squares(x.get(), n), squares);
    EXPECT_EQ(backend->sum(d_f.get(), n), total);
  }
}

}  // namespace
}  // namespace collage::test
