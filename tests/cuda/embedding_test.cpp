// embedding_forward / embedding_backward of the cuda backend (kernels/embedding.cu) under the
// host SIMT emulator against the cpu backend (src/backend/cpu/embedding.cpp). Both directions
// must agree bit for bit: the forward is a lookup (one rounding of word + position), and the
// backward groups the owned rows by token on the device and sums each group in ascending row
// order in fp32, exactly the cpu's order (dwpe: Σ over b in order, also the cpu's).
//
// Cases: C in {1, 7, 64, 130} (the 128-bit path for 64, the scalar path otherwise and for
// 64 at a 2-byte offset), with and without the position table, vocab-parallel ranges that
// leave some tokens to other ranks, tokens that repeat a lot (one token on ~30% of the rows,
// so one long group) as well as rarely, an owned range over 2^16 tokens (three radix passes),
// N up to 2000 rows, a range of one token, a range that owns no token of the batch, and the
// scratch reused across calls of different sizes on one backend.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "cuda_test_util.h"

namespace collage::test {
namespace {

struct Case {
  int B, T, C;
  int64_t vocab;                   // tokens are drawn from [0, vocab)
  int64_t vocab_begin, vocab_end;  // this rank's rows of the table
  bool positions;                  // with a wpe table
  int offset;                      // elements from the aligned allocations (1: no 128-bit path)
};

const Case kCases[] = {
    {2, 13, 1, 50, 0, 50, true, 0},            // everything owned, C = 1
    {3, 17, 7, 50, 10, 37, true, 0},           // a shard, C = 7
    {2, 33, 64, 700, 40, 690, true, 0},        // 128-bit path, two radix passes
    {2, 33, 64, 300, 0, 300, false, 1},        // 64 at an odd offset: the scalar path
    {4, 500, 7, 1000, 100, 900, false, 0},     // N = 2000
    {1, 29, 130, 97, 13, 61, true, 0},         // C = 130
    {4, 250, 1, 70000, 1000, 69000, true, 0},  // owned range > 2^16: three radix passes
    {2, 9, 7, 50, 20, 21, true, 0},            // one owned token
    {2, 9, 7, 50, 60, 70, true, 0},            // owns none of the batch's tokens
};

std::string describe(const Case& c) {
  return "B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) + " C=" + std::to_string(c.C) +
         " vocab=[" + std::to_string(c.vocab_begin) + "," + std::to_string(c.vocab_end) + ") of " +
         std::to_string(c.vocab) + (c.positions ? " +wpe" : "") +
         " offset=" + std::to_string(c.offset);
}

// Tokens in [0, vocab): ~30% one hot token inside the owned range, ~10% one other token, the
// rest uniform (so some fall outside the owned range whenever it is a proper shard).
std::vector<int32_t> random_tokens(Rng& rng, const Case& c) {
  const int64_t owned_middle = (c.vocab_begin + c.vocab_end) / 2;
  const int32_t hot = int32_t(std::min<int64_t>(owned_middle, c.vocab - 1));
  const int32_t warm = int32_t(rng.integer(0, int(c.vocab - 1)));
  std::vector<int32_t> tokens(size_t(c.B) * c.T);
  for (auto& token : tokens) {
    const double u = rng.uniform(0, 1);
    token = u < 0.3 ? hot : u < 0.4 ? warm : int32_t(rng.integer(0, int(c.vocab - 1)));
  }
  return tokens;
}

// dout (N, C) on which the order of a token's sum shows in the bf16 result: N(0, 1) values,
// except that the first row of each token's group holds +2^20 and its last row −2^20 (groups
// of three rows or more). Summed in fp32 in row order, the small values in between are
// rounded to ulp(2^20) = 2^-3 while the big value is in the sum, and the big ones cancel, so
// the result is small and carries those rounding errors (~1% of it); any other order (or an
// unstable sort that moves the big rows) rounds differently. (Sums of bf16 values of similar
// size are exact in fp32 in any order and would not tell.)
std::vector<bf16> order_sensitive_dout(Rng& rng, const std::vector<int32_t>& tokens, int C,
                                       int offset) {
  std::vector<bf16> dout = random_values<bf16>(rng, size_t(offset) + tokens.size() * C);
  std::map<int32_t, std::vector<size_t>> rows_of;
  for (size_t row = 0; row < tokens.size(); row++) rows_of[tokens[row]].push_back(row);
  for (const auto& [token, rows] : rows_of) {
    if (rows.size() < 3) continue;
    for (int c = 0; c < C; c++) {
      dout[offset + rows.front() * C + c] = float_to_bf16(0x1p20f);
      dout[offset + rows.back() * C + c] = float_to_bf16(-0x1p20f);
    }
  }
  return dout;
}

TEST(CudaEmbedding, ForwardAndBackwardBitIdenticalToCpu) {
  BackendPair pair;  // one pair for all cases: the device scratch grows and is reused
  Rng rng(31);
  for (const Case& c : kCases) {
    SCOPED_TRACE(describe(c));
    const int64_t N = int64_t(c.B) * c.T, rows = c.vocab_end - c.vocab_begin;
    const int o = c.offset;
    const auto tokens = random_tokens(rng, c);
    int64_t owned = 0;
    for (int32_t token : tokens) owned += token >= c.vocab_begin && token < c.vocab_end;
    if (rows > 1 && c.vocab_begin > 0 && c.vocab_end < c.vocab) {
      EXPECT_GT(owned, 0);
      EXPECT_LT(owned, N) << "a shard should leave some tokens to other ranks";
    }

    const Mirrored<int32_t> d_tokens(pair, tokens);
    const Mirrored<bf16> wte(pair, random_values<bf16>(rng, size_t(rows * c.C + o)));
    const Mirrored<bf16> wpe(pair, random_values<bf16>(rng, size_t(c.T * c.C + o)));
    const Mirrored<bf16> out(pair, random_values<bf16>(rng, size_t(N * c.C + o)));
    const bf16* wpe_cpu = c.positions ? wpe.cpu() + o : nullptr;
    const bf16* wpe_emulated = c.positions ? wpe.emulated() + o : nullptr;
    pair.cpu->embedding_forward(out.cpu() + o, d_tokens.cpu(), wte.cpu() + o, wpe_cpu, c.B, c.T,
                                c.C, c.vocab_begin, c.vocab_end);
    pair.emulated->embedding_forward(out.emulated() + o, d_tokens.emulated(), wte.emulated() + o,
                                     wpe_emulated, c.B, c.T, c.C, c.vocab_begin, c.vocab_end);
    expect_same_bits(out.from_emulated(), out.from_cpu(), "embedding_forward out");

    // The backward accumulates into gradients that already hold values.
    const auto dwte0 = random_values<bf16>(rng, size_t(rows * c.C + o));
    const Mirrored<bf16> dout(pair, order_sensitive_dout(rng, tokens, c.C, o));
    const Mirrored<bf16> dwte(pair, dwte0);
    const Mirrored<bf16> dwpe(pair, random_values<bf16>(rng, size_t(c.T * c.C + o)));
    pair.cpu->embedding_backward(dwte.cpu() + o, c.positions ? dwpe.cpu() + o : nullptr,
                                 dout.cpu() + o, d_tokens.cpu(), c.B, c.T, c.C, c.vocab_begin,
                                 c.vocab_end);
    pair.emulated->embedding_backward(
        dwte.emulated() + o, c.positions ? dwpe.emulated() + o : nullptr, dout.emulated() + o,
        d_tokens.emulated(), c.B, c.T, c.C, c.vocab_begin, c.vocab_end);
    const auto dwte_got = dwte.from_emulated();
    expect_same_bits(dwte_got, dwte.from_cpu(), "embedding_backward dwte");
    expect_same_bits(dwpe.from_emulated(), dwpe.from_cpu(), "embedding_backward dwpe");
    if (owned > 0) EXPECT_FALSE(same_bits(dwte_got, dwte0)) << "nothing added to dwte";
    if (owned == 0) EXPECT_TRUE(same_bits(dwte_got, dwte0)) << "dwte changed without its tokens";
  }
}

// Only one of the two gradients requested (a null gradient is skipped).
TEST(CudaEmbedding, BackwardSkipsNullGradients) {
  BackendPair pair;
  Rng rng(32);
  const Case c{3, 11, 7, 40, 5, 35, true, 0};
  const int64_t rows = c.vocab_end - c.vocab_begin;
  const auto tokens = random_tokens(rng, c);
  const Mirrored<int32_t> d_tokens(pair, tokens);
  const Mirrored<bf16> dout(pair, order_sensitive_dout(rng, tokens, c.C, 0));
  const auto dwte0 = random_values<bf16>(rng, size_t(rows * c.C));
  const auto dwpe0 = random_values<bf16>(rng, size_t(c.T * c.C));
  const Mirrored<bf16> dwte(pair, dwte0), dwpe(pair, dwpe0);
  pair.cpu->embedding_backward(nullptr, dwpe.cpu(), dout.cpu(), d_tokens.cpu(), c.B, c.T, c.C,
                               c.vocab_begin, c.vocab_end);
  pair.emulated->embedding_backward(nullptr, dwpe.emulated(), dout.emulated(), d_tokens.emulated(),
                                    c.B, c.T, c.C, c.vocab_begin, c.vocab_end);
  expect_same_bits(dwpe.from_emulated(), dwpe.from_cpu(), "dwpe only");
  EXPECT_FALSE(same_bits(dwpe.from_emulated(), dwpe0));
  pair.cpu->embedding_backward(dwte.cpu(), nullptr, dout.cpu(), d_tokens.cpu(), c.B, c.T, c.C,
                               c.vocab_begin, c.vocab_end);
  pair.emulated->embedding_backward(dwte.emulated(), nullptr, dout.emulated(), d_tokens.emulated(),
                                    c.B, c.T, c.C, c.vocab_begin, c.vocab_end);
  expect_same_bits(dwte.from_emulated(), dwte.from_cpu(), "dwte only");
  EXPECT_FALSE(same_bits(dwte.from_emulated(), dwte0));
}

}  // namespace
}  // namespace collage::test
