// The tensor-core attention kernels (kernels/flash_attention.cu: head sizes 64 and 128) through
// the cuda backend against the cpu backend, forward and backward, causal or not, with and
// without a key mask (a batch row whose keys are all hidden, key 0 of row 0 hidden so causal
// query 0 sees nothing), with and without dropout, on sequences shorter than one 64-row tile,
// of exactly one, and of several with a partial last tile (whose key blocks add their parts of
// dq in turn, kernels/turns.cuh).
//
// Against both of the cpu's attention engines (docs/ARCHITECTURE.md, "cpu attention"): OpenBLAS,
// whose probabilities, dS and D stay fp32, and oneDNN (where it has a bf16 matmul), which rounds
// exactly the operands the kernels round and takes D from the bf16 out as they do.
//
// Tolerances, derived. The kernels differ from the cpu's OpenBLAS engine in three ways:
//  1. Summation order, as the SIMT kernels (tests/cuda/attention_test.cpp derives these): lse
//     within 1e-5 absolute; an output or gradient's fp32 value within ~1e-5 of the sum of its
//     terms' magnitudes, and for gradients 1e-5·G (G the largest gradient of its part, q, k or
//     v) for the error that P, dP and the cpu's D bring in.
//  2. The computed left factor of Z·v, dS·k, Zᵀ·dout and dSᵀ·q is rounded to bf16 before the
//     tensor cores multiply: |rn(x) - x| ≤ 2^-8·|x| (bf16 keeps 8 significant bits), so an element
//     moves by at most
//     2^-8·Σ|term| over its terms: Σ_j Z_ij·|v_jd| for out, scale·Σ_j |dS_ij·k_jd| for dq,
//     scale·Σ_i |dS_ij·q_id| for dk, Σ_i Z_ij·|dout_id| for dv.
//  3. D_i = dout_i·out_i from the bf16 out (the cpu sums P_ij·dP_ij; both equal Σ_j Z_ij·dZ_ij).
//     The kernels' out_d is within (2^-8 + 1e-5)·Σ|term| of the exact value before its bf16
//     rounding (point 2) and within 2^-8·|out_d| ≤ 2^-8·Σ|term| after, so
//     |ΔD_i| ≤ ε_i = (2^-7 + 3e-5)·Σ_d |dout_id|·Σ_j Z_ij·|v_jd| (3e-5 covering the fp32 dot).
//     dS_ij = P_ij·(dP_ij - D_i) then moves by P_ij·ε_i: dq_id by scale·Σ_j P_ij·ε_i·|k_jd|
//     and dk_jd by scale·Σ_i P_ij·ε_i·|q_id|, added to their bounds as they are.
// The oneDNN engine has points 2 and 3 too, each within the same bound of the exact value, so
// against it they count twice (`sides` = 2): its rounded factors are not always the kernels'
// (the kernels' forward rounds p̃ relative to a running max over key tiles, the cpu's relative
// to the row's max; the fp32 values before rounding differ by summation order and exp), and a
// value either side of a rounding boundary rounds apart. Where the kernels' first key tile holds
// the whole row (T ≤ 64 at HS 64) the forwards agree bit for bit here.
// Each Σ|term| is computed here in float64 from the inputs (with the backends' own dropout
// numbers). Both results are rounded to bf16 at the end, so |got - want| ≤
// (sides·2^-8 + 1e-5)·Σ|term| [+ 1e-5·G + sides·D's share] + 2^-7·max(|got|, |want|). The bound
// is a worst case (all rounding errors of one sign); the report prints how much of it the
// largest error used.
// What must be exact: a query that sees no key has out 0, lse -inf and a zero dq row; a hidden
// key has zero dk, dv rows (written over the NaNs dqkv held).
#include <cstdio>
#include <limits>

#include "attention_cases.h"
#include "cuda_test_util.h"
#include "numerics/elementwise_math.h"

namespace collage::test {
namespace {

using Case = AttentionShape;
// {2, 200, 1, 64}: four key blocks of 64 in each of two (b, h) add to dq in turn.
const Case kCases[] = {
    {2, 37, 2, 64}, {1, 64, 1, 128}, {1, 130, 1, 64}, {1, 70, 2, 128}, {2, 200, 1, 64}};

// Σ|term| of every output and gradient element (float64), laid out as out (B, T, C) and
// dqkv (B, T, 3C); from_delta: what D's error can add to each dqkv element (point 3).
struct TermSums {
  std::vector<double> out, dqkv, from_delta;
};

TermSums term_sums(const Case& c, const std::vector<bf16>& qkv_bits,
                   const std::vector<bf16>& dout_bits, const std::vector<int32_t>& mask,
                   bool causal, float p, uint64_t seed) {
  const int C = c.NH * c.HS, T = c.T;
  auto qkv = [&](int b, int t, int part, int h, int d) {
    return double(bf16_to_float(qkv_bits[(size_t(b) * T + t) * 3 * C + part * C + h * c.HS + d]));
  };
  auto dout = [&](int b, int t, int h, int d) {
    return double(bf16_to_float(dout_bits[(size_t(b) * T + t) * C + h * c.HS + d]));
  };
  const double scale = 1.0 / std::sqrt(double(c.HS));
  const float keep_scale = math::dropout_keep_scale(p);
  TermSums sums{std::vector<double>(size_t(c.B) * T * C),
                std::vector<double>(size_t(c.B) * T * 3 * C),
                std::vector<double>(size_t(c.B) * T * 3 * C)};
  std::vector<double> P(size_t(T) * T), F(size_t(T) * T), dS(size_t(T) * T);
  std::vector<double> out_terms(size_t(T) * c.HS), eps(T);
  for (int b = 0; b < c.B; b++) {
    for (int h = 0; h < c.NH; h++) {
      for (int i = 0; i < T; i++) {
        double max = -INFINITY;
        std::vector<double> s(T, -INFINITY);
        for (int j = 0; j < T; j++) {
          if ((causal && j > i) || (!mask.empty() && mask[size_t(b) * T + j] == 0)) continue;
          double dot = 0;
          for (int d = 0; d < c.HS; d++) dot += qkv(b, i, 0, h, d) * qkv(b, j, 1, h, d);
          s[j] = dot * scale;
          max = std::max(max, s[j]);
        }
        double total = 0;
        for (int j = 0; j < T; j++) total += s[j] == -INFINITY ? 0.0 : std::exp(s[j] - max);
        double D = 0;
        for (int j = 0; j < T; j++) {
          const size_t ij = size_t(i) * T + j;
          P[ij] = s[j] == -INFINITY ? 0.0 : std::exp(s[j] - max) / total;
          const uint64_t element = ((uint64_t(b) * c.NH + h) * T + i) * T + j;
          F[ij] = p == 0
                      ? 1.0
                      : math::dropout_factor(math::dropout_uniform(seed, element), p, keep_scale);
          double dz = 0;
          for (int d = 0; d < c.HS; d++) dz += dout(b, i, h, d) * qkv(b, j, 2, h, d);
          dS[ij] = F[ij] * dz;  // dP for now
          D += P[ij] * dS[ij];
        }
        for (int j = 0; j < T; j++)
          dS[size_t(i) * T + j] = P[size_t(i) * T + j] * (dS[size_t(i) * T + j] - D);
      }
      for (int i = 0; i < T; i++) {  // Σ_j Z_ij·|v_jd|, then ε_i
        eps[i] = 0;
        for (int d = 0; d < c.HS; d++) {
          double out = 0;
          for (int j = 0; j < T; j++)
            out += P[size_t(i) * T + j] * F[size_t(i) * T + j] * std::fabs(qkv(b, j, 2, h, d));
          out_terms[size_t(i) * c.HS + d] = out;
          eps[i] += std::fabs(dout(b, i, h, d)) * out;
        }
        eps[i] *= std::ldexp(1.0, -7) + 3e-5;
      }
      for (int i = 0; i < T; i++) {
        for (int d = 0; d < c.HS; d++) {
          double dq = 0, dk = 0, dv = 0, dq_delta = 0, dk_delta = 0;
          for (int j = 0; j < T; j++) {
            const size_t ij = size_t(i) * T + j, ji = size_t(j) * T + i;
            dq += scale * std::fabs(dS[ij] * qkv(b, j, 1, h, d));
            dk += scale * std::fabs(dS[ji] * qkv(b, j, 0, h, d));  // key i, over queries j
            dv += P[ji] * F[ji] * std::fabs(dout(b, j, h, d));
            dq_delta += scale * P[ij] * eps[i] * std::fabs(qkv(b, j, 1, h, d));
            dk_delta += scale * P[ji] * eps[j] * std::fabs(qkv(b, j, 0, h, d));
          }
          const size_t row = size_t(b) * T + i;
          sums.out[row * C + h * c.HS + d] = out_terms[size_t(i) * c.HS + d];
          sums.dqkv[row * 3 * C + h * c.HS + d] = dq;
          sums.dqkv[row * 3 * C + C + h * c.HS + d] = dk;
          sums.dqkv[row * 3 * C + 2 * C + h * c.HS + d] = dv;
          sums.from_delta[row * 3 * C + h * c.HS + d] = dq_delta;
          sums.from_delta[row * 3 * C + C + h * c.HS + d] = dk_delta;
        }
      }
    }
  }
  return sums;
}

// |got - want| ≤ (sides·2^-8 + 1e-5)·Σ|term| + floor + sides·extra + 2^-7·max(|got|, |want|)
// for the elements at `indices` (extra per element, or none); returns the largest fraction of
// the bound.
double check_bound(const std::vector<bf16>& got, const std::vector<bf16>& want,
                   const std::vector<double>& sums, const std::vector<double>* extra, double floor,
                   int sides, const char* what, const std::vector<size_t>& indices) {
  double worst = 0;
  int misses = 0;
  for (size_t i : indices) {
    const double g = bf16_to_float(got[i]), w = bf16_to_float(want[i]);
    const double bound = (sides * std::ldexp(1.0, -8) + 1e-5) * sums[i] + floor +
                         sides * (extra ? (*extra)[i] : 0.0) +
                         std::ldexp(std::max(std::fabs(g), std::fabs(w)), -7);
    const double diff = std::fabs(g - w);
    if (bound > 0) worst = std::max(worst, diff / bound);
    if (!(diff <= bound) && ++misses <= 5)
      ADD_FAILURE() << what << "[" << i << "]: " << g << ", cpu " << w << " (bound " << bound
                    << ")";
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << indices.size() << " off";
  return worst;
}

// The cpu's results, from its own copy of the inputs.
struct CpuResults {
  std::vector<bf16> out, dx;
  std::vector<float> lse;
};
CpuResults run_cpu(Backend& cpu, const Case& c, const AttentionInputs& in, bool causal, float p,
                   uint64_t seed, uint64_t offset) {
  DeviceBuffer<bf16, Backend> x(cpu, in.qkv), out(cpu, in.dout.size()), dy(cpu, in.dout),
      dx(cpu, in.dqkv0);
  DeviceBuffer<float, Backend> lse(cpu, size_t(c.B) * c.NH * c.T);
  DeviceBuffer<int32_t, Backend> mask(cpu, in.mask.empty() ? std::vector<int32_t>(1) : in.mask);
  const int32_t* key_mask = in.mask.empty() ? nullptr : mask.get();
  cpu.attention_forward_dropout(out.get(), lse.get(), x.get(), key_mask, causal, c.B, c.T, c.NH,
                                c.HS, p, seed, offset);
  cpu.attention_backward_dropout(dx.get(), dy.get(), out.get(), x.get(), lse.get(), key_mask,
                                 causal, c.B, c.T, c.NH, c.HS, p, seed, offset);
  return {out.download(), dx.download(), lse.download()};
}

// The kernels' results against one cpu engine's; `sides` = 1 for OpenBLAS (fp32 probabilities:
// only the kernels round), 2 for oneDNN (both round: points 2 and 3 twice).
void check_against(const char* engine, int sides, const Case& c, const AttentionInputs& in,
                   const TermSums& sums, const std::vector<bf16>& got_out,
                   const std::vector<float>& got_lse, const std::vector<bf16>& got_dx,
                   const CpuResults& want) {
  SCOPED_TRACE(engine);
  const int C = c.NH * c.HS;
  double lse_worst = 0;
  for (size_t i = 0; i < got_lse.size(); i++) {
    if (std::isinf(want.lse[i])) {
      EXPECT_EQ(got_lse[i], want.lse[i]) << "lse[" << i << "]";
    } else {
      EXPECT_NEAR(got_lse[i], want.lse[i], 1e-5) << "lse[" << i << "]";
      lse_worst = std::max(lse_worst, std::fabs(double(got_lse[i]) - want.lse[i]));
    }
  }
  std::vector<size_t> all_out(in.dout.size());
  for (size_t i = 0; i < in.dout.size(); i++) all_out[i] = i;
  const double out_used =
      check_bound(got_out, want.out, sums.out, nullptr, 0.0, sides, "out", all_out);
  double used[3];
  const char* names[3] = {"dq", "dk", "dv"};
  for (int part = 0; part < 3; part++) {
    std::vector<size_t> indices;
    double G = 0;
    for (size_t row = 0; row < size_t(c.B) * c.T; row++) {
      for (int e = 0; e < C; e++) {
        const size_t i = row * 3 * C + size_t(part) * C + e;
        indices.push_back(i);
        G = std::max(G, std::fabs(double(bf16_to_float(want.dx[i]))));
      }
    }
    used[part] = check_bound(got_dx, want.dx, sums.dqkv, &sums.from_delta, 1e-5 * G, sides,
                             names[part], indices);
  }
  std::printf(
      "    cpu %s: |dlse| %.1e; largest error as a fraction of its bound: out %.2f, dq %.2f, dk "
      "%.2f, dv %.2f\n",
      engine, lse_worst, out_used, used[0], used[1], used[2]);
}

void run_case(BackendPair& pair, Backend* onednn_cpu, Rng& rng, const Case& c, bool causal,
              bool masked, float p) {
  SCOPED_TRACE(::testing::Message()
               << "B=" << c.B << " T=" << c.T << " NH=" << c.NH << " HS=" << c.HS
               << " causal=" << causal << " masked=" << masked << " p=" << p);
  const uint64_t seed = 0x5eed, offset = 0;
  const AttentionInputs in(pair, rng, c, masked);
  pair.emulated->attention_forward_dropout(in.out.emulated(), in.lse.emulated(), in.x.emulated(),
                                           in.mask_emulated, causal, c.B, c.T, c.NH, c.HS, p, seed,
                                           offset);
  pair.emulated->attention_backward_dropout(in.dx.emulated(), in.dy.emulated(), in.out.emulated(),
                                            in.x.emulated(), in.lse.emulated(), in.mask_emulated,
                                            causal, c.B, c.T, c.NH, c.HS, p, seed, offset);
  const auto got_out = in.out.from_emulated();
  const auto got_lse = in.lse.from_emulated();
  const auto got_dx = in.dx.from_emulated();
  const TermSums sums = term_sums(c, in.qkv, in.dout, in.mask, causal, p, seed);
  std::printf("  B=%d T=%d NH=%d HS=%d causal=%d masked=%d p=%.2f\n", c.B, c.T, c.NH, c.HS,
              int(causal), int(masked), double(p));
  check_against("OpenBLAS", 1, c, in, sums, got_out, got_lse, got_dx,
                run_cpu(*pair.cpu, c, in, causal, p, seed, offset));
  if (onednn_cpu)
    check_against("oneDNN", 2, c, in, sums, got_out, got_lse, got_dx,
                  run_cpu(*onednn_cpu, c, in, causal, p, seed, offset));
  expect_unseen_rows_zero(c, in, causal, got_out, got_lse, got_dx);
}

// The cpu's oneDNN engine, where oneDNN has a bf16 matmul here (else its comparison is left
// out, saying so once).
std::unique_ptr<Backend> make_onednn_cpu() {
  if (const std::string why = GemmEngine<bf16, true>::unavailable(); !why.empty()) {
    std::printf("[ skipped  ] the comparison with the cpu's oneDNN engine: %s\n", why.c_str());
    return nullptr;
  }
  return make_cpu_backend(kThreads, "onednn");
}

TEST(CudaFlashAttention, ForwardAndBackwardMatchCpu) {
  BackendPair pair("openblas");
  const auto onednn_cpu = make_onednn_cpu();
  Rng rng(11);
  for (const Case& c : kCases)
    for (const bool causal : {false, true})
      for (const bool masked : {false, true})
        run_case(pair, onednn_cpu.get(), rng, c, causal, masked, 0.0f);
}

TEST(CudaFlashAttention, DropoutMatchesCpu) {
  BackendPair pair("openblas");
  const auto onednn_cpu = make_onednn_cpu();
  Rng rng(12);
  // T 37 and 70 draw each element's number on its own; at T 200 (a multiple of 4, offset 0) the
  // backward's lanes share Philox blocks (flash_attention.cu, dropout_factors_shared).
  for (const Case& c : {kCases[0], kCases[3], kCases[4]})
    for (const bool causal : {false, true})
      run_case(pair, onednn_cpu.get(), rng, c, causal, causal, 0.25f);
}

// attention_backward's dqkv_sums (the qkv bias gradient): formed by the tensor-core kernels from
// the rows they write (T a multiple of 32), else by the column sums afterwards; either way the
// bits of attention_backward then matmul_backward's dbias, with dqkv unchanged. Shapes: both
// head sizes; T = 64 (one block of 64 rows), 96 (three chunks: the second block's last chunk
// lies past T) and 37 (not whole chunks: the column sums after); causal, or not with a key mask
// (hidden keys' zero rows); head size 16 on the SIMT kernels.
TEST(CudaFlashAttention, BackwardSumsOfDqkvAreTheQkvBiasGradientsBits) {
  BackendPair pair;
  Rng rng(13);
  const Case cases[] = {
      {2, 64, 2, 64}, {1, 96, 2, 128}, {1, 96, 1, 64}, {2, 37, 1, 64}, {1, 64, 2, 16}};
  for (const Case& c : cases) {
    for (const bool causal : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "B=" << c.B << " T=" << c.T << " NH=" << c.NH
                                        << " HS=" << c.HS << " causal=" << causal);
      const AttentionInputs in(pair, rng, c, /*masked=*/!causal);
      Backend& gpu = *pair.emulated;
      gpu.attention_forward(in.out.emulated(), in.lse.emulated(), in.x.emulated(), in.mask_emulated,
                            causal, c.B, c.T, c.NH, c.HS);
      const size_t C3 = size_t(3) * c.NH * c.HS;
      const std::vector<bf16> sums0 = random_values<bf16>(rng, C3, 4.0);
      const Mirrored<bf16> fused_sums(pair, sums0), two_sums(pair, sums0);
      const Mirrored<bf16> two_dx(pair, in.dqkv0);
      gpu.attention_backward(in.dx.emulated(), in.dy.emulated(), in.out.emulated(), in.x.emulated(),
                             in.lse.emulated(), in.mask_emulated, causal, c.B, c.T, c.NH, c.HS,
                             fused_sums.emulated());
      gpu.attention_backward(two_dx.emulated(), in.dy.emulated(), in.out.emulated(),
                             in.x.emulated(), in.lse.emulated(), in.mask_emulated, causal, c.B, c.T,
                             c.NH, c.HS);
      gpu.matmul_backward(nullptr, nullptr, two_sums.emulated(), two_dx.emulated(), nullptr,
                          nullptr, int64_t(c.B) * c.T, 1, int(C3));
      expect_same_bits(in.dx.from_emulated(), two_dx.from_emulated(), "dqkv");
      expect_same_bits(fused_sums.from_emulated(), two_sums.from_emulated(), "dqkv_sums");
    }
  }
}

}  // namespace
}  // namespace collage::test
