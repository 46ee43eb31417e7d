// kernels/layernorm.cu and kernels/bias.cu under the host emulator against the cpu backend
// (src/backend/cpu/layernorm.cpp, src/backend/cpu/matmul.cpp's dbias).
//
// Tolerances. Both backends evaluate the same fp32 expressions; they differ only in the order
// of the fp32 sums (a row's Σx, Σ(x - mean)², Σg, Σg·x̂; a column's Σ over rows). Summing m
// terms in any order with depth D (the most roundings on any term's path) errs by at most
// D·u·Σ|terms| (u = 2^-24, first order). The cpu's SIMD reduction has D ≤ m (whatever lanes
// GCC uses); a warp gives D = ceil(C/32) + 5 (a lane's share, then 5 shuffle levels); the
// column sums give D = 32 + ceil(N/32) (a chunk of rows, then the chunks). So two results
// differ by at most (D_cpu + D_gpu)·u·Σ|terms|, plus one rounding per operation after the sum.
// A bf16 result whose fp32 values differ by δ on the two sides is within δ + 1 ulp (each
// rounding moves half an ulp at most); with δ far below an ulp, that is 1 ulp.
// Where both sides sum in the same order the results must be bit-identical: the parameter
// gradients over N ≤ 32 rows (one chunk: row order, as the cpu) and the fused residual.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "cuda_test_util.h"

namespace collage::test {
namespace {

constexpr double kU = 0x1p-24;  // fp32 unit roundoff
constexpr float kEps = 1e-5f;
// 64, 768, 1088, 2304: the 128-bit path; 1088 (some lanes hold 5 chunks of a row, the others 4)
// and 2304 (more than the 8 chunks a lane holds in registers: read again in each pass) too.
constexpr int kColumns[] = {1, 7, 64, 100, 768, 771, 1088, 2304};
constexpr int64_t kRows[] = {1, 5, 33};

// The spacing of bf16 values at |v| (8 significant bits; subnormal spacing 2^-133).
double bf16_ulp(double v) {
  int exponent = 0;
  std::frexp(std::fabs(v), &exponent);  // |v| in [2^(exponent-1), 2^exponent)
  return std::ldexp(1.0, std::max(exponent - 1 - 7, -133));
}

// The largest error seen, in the units the report quotes.
struct Worst {
  double mean_u = 0;     // |Δmean| / (u · mean|x|)
  double rstd_u = 0;     // |Δrstd| / (u · rstd)
  double bf16_ulps = 0;  // |Δ| of a bf16 result in ulps of the larger
  double of_bound = 0;   // |Δ| / tolerance, over every check (must stay ≤ 1)
  void print(const char* what, bool statistics) const {
    if (statistics) {
      std::printf("[ worst    ] %s: mean %.2f u·mean|x|, rstd %.2f u relative\n", what, mean_u,
                  rstd_u);
    }
    std::printf("[ worst    ] %s: bf16 results %.2f ulp apart, %.3f of the bound\n", what,
                bf16_ulps, of_bound);
  }
};

// |got - want| ≤ ulp + delta for a bf16 result (see the top of the file).
void expect_bf16_close(bf16 got, bf16 want, double delta, Worst& worst, const std::string& what) {
  const double g = bf16_to_float(got), w = bf16_to_float(want);
  const double ulp = bf16_ulp(std::max(std::fabs(g), std::fabs(w)));
  const double bound = ulp + delta;
  worst.bf16_ulps = std::max(worst.bf16_ulps, std::fabs(g - w) / ulp);
  worst.of_bound = std::max(worst.of_bound, std::fabs(g - w) / bound);
  EXPECT_LE(std::fabs(g - w), bound) << what << ": " << cuda_name() << " " << g << ", cpu " << w;
}

void expect_close_counted(double got, double want, double bound, Worst& worst,
                          const std::string& what) {
  worst.of_bound = std::max(worst.of_bound, std::fabs(got - want) / bound);
  EXPECT_LE(std::fabs(got - want), bound)
      << what << ": " << cuda_name() << " " << got << ", cpu " << want;
}

std::string shape(const char* op, int64_t N, int C) {
  return std::string(op) + " N=" + std::to_string(N) + " C=" + std::to_string(C);
}

// The depth bound of a row sum: the cpu's (≤ C) plus a warp's, plus the division by C.
double row_depth(int C) { return C + std::ceil(C / 32.0) + 5 + 1; }

// Checks a forward's out (N, C), mean, rstd (emulated) against the cpu's, for the input rows
// x (N, C) both normalised.
struct ForwardResult {
  std::vector<bf16> out;
  std::vector<float> mean, rstd;
};
void check_forward(const ForwardResult& got, const ForwardResult& want, const std::vector<bf16>& x,
                   const std::vector<bf16>& weight, const std::vector<bf16>* bias, int64_t N, int C,
                   Worst& worst, const std::string& what) {
  for (int64_t row = 0; row < N; row++) {
    double abs_sum = 0, squares = 0;
    const double m = want.mean[row], s = want.rstd[row];
    for (int c = 0; c < C; c++) {
      const double v = bf16_to_float(x[row * C + c]);
      abs_sum += std::fabs(v);
      squares += (v - m) * (v - m);
    }
    // mean: Σx in two orders, then the division.
    const double D = row_depth(C);
    const double tol_mean = D * kU * abs_sum / C + kU * std::fabs(m);
    worst.mean_u =
        std::max(worst.mean_u, std::fabs(got.mean[row] - m) / (kU * std::max(abs_sum / C, 1e-30)));
    expect_close_counted(got.mean[row], m, tol_mean, worst,
                         what + " mean[" + std::to_string(row) + "]");
    // rstd = (Σ(x - mean)²/C + eps)^-1/2: the sum of squares in two orders (each term two
    // roundings), its shift by the other side's mean (C·Δmean² exactly), then /C, +eps, sqrt and
    // 1/ (one rounding each); the -1/2 power halves the relative error of the sum.
    const double rel_rstd =
        0.5 * ((D + 2) * kU + C * tol_mean * tol_mean / (squares + C * kEps)) + 4 * kU;
    worst.rstd_u = std::max(worst.rstd_u, std::fabs(got.rstd[row] - s) / (kU * s));
    expect_close_counted(got.rstd[row], s, rel_rstd * s, worst,
                         what + " rstd[" + std::to_string(row) + "]");
    // out = (x - mean)·rstd·weight + bias: the statistics' errors times the weight, and the
    // three or four roundings of each side.
    for (int c = 0; c < C; c++) {
      const double v = bf16_to_float(x[row * C + c]), w = bf16_to_float(weight[c]);
      const double b = bias ? bf16_to_float((*bias)[c]) : 0.0;
      const double delta = std::fabs(w) * s * (tol_mean + std::fabs(v - m) * rel_rstd) +
                           8 * kU * (std::fabs((v - m) * s * w) + std::fabs(b));
      expect_bf16_close(got.out[row * C + c], want.out[row * C + c], delta, worst,
                        what + " out[" + std::to_string(row) + ", " + std::to_string(c) + "]");
    }
  }
}

TEST(CudaLayernorm, ForwardMatchesCpuWithinRounding) {
  BackendPair pair;
  Rng rng(21);
  Worst worst;
  for (int C : kColumns) {
    for (int64_t N : kRows) {
      for (bool with_bias : {true, false}) {
        // Offset 1 (2 bytes) turns C = 64 to the scalar path; other C take it anyway.
        for (int offset : {0, 1}) {
          if (offset && C != 64) continue;
          const std::string what = shape("layernorm_forward", N, C) +
                                   (with_bias ? "" : " no bias") + (offset ? " misaligned" : "");
          // x = N(0.5, 1)·scale: a mean away from 0, rows of small and of large scale.
          std::vector<bf16> x(size_t(N * C) + offset);
          for (size_t i = offset; i < x.size(); i++) {
            const double scale = (i - offset) / C % 2 ? 1e-3 : 4.0;
            x[i] = float_to_bf16(float((0.5 + rng.normal()) * scale));
          }
          const std::vector<bf16> weight = random_values<bf16>(rng, size_t(C) + offset);
          const std::vector<bf16> bias = random_values<bf16>(rng, size_t(C) + offset);
          const Mirrored<bf16> inp(pair, x), w(pair, weight), b(pair, bias);
          const Mirrored<bf16> out(pair, size_t(N * C) + offset);
          const Mirrored<float> mean(pair, size_t(N)), rstd(pair, size_t(N));
          pair.cpu->layernorm_forward(out.cpu() + offset, mean.cpu(), rstd.cpu(),
                                      inp.cpu() + offset, w.cpu() + offset,
                                      with_bias ? b.cpu() + offset : nullptr, N, C, kEps);
          pair.emulated->layernorm_forward(
              out.emulated() + offset, mean.emulated(), rstd.emulated(), inp.emulated() + offset,
              w.emulated() + offset, with_bias ? b.emulated() + offset : nullptr, N, C, kEps);
          auto strip = [&](std::vector<bf16> v) {
            v.erase(v.begin(), v.begin() + offset);
            return v;
          };
          const ForwardResult got{strip(out.from_emulated()), mean.from_emulated(),
                                  rstd.from_emulated()};
          const ForwardResult want{strip(out.from_cpu()), mean.from_cpu(), rstd.from_cpu()};
          const std::vector<bf16> bias_used = strip(bias);
          check_forward(got, want, strip(x), strip(weight), with_bias ? &bias_used : nullptr, N, C,
                        worst, what);
        }
      }
    }
  }
  worst.print("layernorm_forward", true);
}

TEST(CudaLayernorm, FusedResidualIsAddThenLayernorm) {
  BackendPair pair;
  Rng rng(22);
  Worst worst;
  for (int C : kColumns) {
    for (int64_t N : kRows) {
      const std::string what = shape("residual_layernorm_forward", N, C);
      const size_t n = size_t(N * C);
      // b is small next to a, so that rn(a + b) rounds away much of b.
      const Mirrored<bf16> a(pair, random_values<bf16>(rng, n, 2.0));
      const Mirrored<bf16> b(pair, random_values<bf16>(rng, n, 0.05));
      const std::vector<bf16> weight = random_values<bf16>(rng, size_t(C));
      const Mirrored<bf16> w(pair, weight), bias(pair, random_values<bf16>(rng, size_t(C)));
      const Mirrored<bf16> residual(pair, n), out(pair, n);
      const Mirrored<float> mean(pair, size_t(N)), rstd(pair, size_t(N));
      pair.cpu->residual_layernorm_forward(residual.cpu(), out.cpu(), mean.cpu(), rstd.cpu(),
                                           a.cpu(), b.cpu(), w.cpu(), bias.cpu(), N, C, kEps);
      pair.emulated->residual_layernorm_forward(
          residual.emulated(), out.emulated(), mean.emulated(), rstd.emulated(), a.emulated(),
          b.emulated(), w.emulated(), bias.emulated(), N, C, kEps);
      // The residual is add()'s: bit for bit the cpu's.
      const std::vector<bf16> x = residual.from_cpu();
      expect_same_bits(residual.from_emulated(), x, what + " residual");
      const std::vector<bf16> bias_host = bias.from_cpu();
      check_forward({out.from_emulated(), mean.from_emulated(), rstd.from_emulated()},
                    {out.from_cpu(), mean.from_cpu(), rstd.from_cpu()}, x, weight, &bias_host, N, C,
                    worst, what);
      // And the fusion is exactly the emulated add() followed by layernorm_forward().
      const Mirrored<bf16> residual2(pair, n), out2(pair, n);
      const Mirrored<float> mean2(pair, size_t(N)), rstd2(pair, size_t(N));
      pair.emulated->add(residual2.emulated(), a.emulated(), b.emulated(), int64_t(n));
      pair.emulated->layernorm_forward(out2.emulated(), mean2.emulated(), rstd2.emulated(),
                                       residual2.emulated(), w.emulated(), bias.emulated(), N, C,
                                       kEps);
      expect_same_bits(out.from_emulated(), out2.from_emulated(), what + " out vs unfused");
      expect_same_bits(mean.from_emulated(), mean2.from_emulated(), what + " mean vs unfused");
      expect_same_bits(rstd.from_emulated(), rstd2.from_emulated(), what + " rstd vs unfused");
    }
  }
  worst.print("residual_layernorm_forward", true);
}

// Column sums over N rows of identical fp32 terms: the same bits for N ≤ 32 (one chunk, row
// order, as the cpu), else the two orders' bound. `abs_sums` (C): Σ_rows |term|.
void check_column_sums(const std::vector<bf16>& got, const std::vector<bf16>& want,
                       const std::vector<bf16>& initial, const std::vector<double>& abs_sums,
                       int64_t N, Worst& worst, const std::string& what) {
  if (N <= 32) {
    expect_same_bits(got, want, what + " (one chunk: the cpu's order)");
    return;
  }
  const double depth = double(N) + 32 + std::ceil(N / 32.0) + 1;
  for (size_t c = 0; c < got.size(); c++) {
    const double delta = depth * kU * (abs_sums[c] + std::fabs(bf16_to_float(initial[c])));
    expect_bf16_close(got[c], want[c], delta, worst, what + "[" + std::to_string(c) + "]");
  }
}

TEST(CudaLayernorm, BackwardAccumulatesLikeCpu) {
  BackendPair pair;
  Rng rng(23);
  Worst worst;
  // Which gradients are wanted: bit 0 dinp, 1 dweight, 2 dbias (null otherwise).
  for (int C : kColumns) {
    for (int64_t N : {int64_t(1), int64_t(5), int64_t(33), int64_t(100)}) {
      for (int wanted : {7, 1, 6, 4}) {
        if (wanted != 7 && C != 100) continue;
        const std::string what =
            shape("layernorm_backward", N, C) + " gradients=" + std::to_string(wanted);
        const size_t n = size_t(N * C);
        const std::vector<bf16> x = random_values<bf16>(rng, n, 2.0);
        const std::vector<bf16> dy = random_values<bf16>(rng, n);
        const std::vector<bf16> weight = random_values<bf16>(rng, size_t(C));
        // The saved statistics, computed here (any values serve: both sides get the same).
        std::vector<float> mean(N), rstd(N);
        for (int64_t row = 0; row < N; row++) {
          double sum = 0, squares = 0;
          for (int c = 0; c < C; c++) sum += bf16_to_float(x[row * C + c]);
          mean[row] = float(sum / C);
          for (int c = 0; c < C; c++)
            squares += std::pow(bf16_to_float(x[row * C + c]) - mean[row], 2);
          rstd[row] = float(1 / std::sqrt(squares / C + kEps));
        }
        const std::vector<bf16> dx0 = random_values<bf16>(rng, n);
        const std::vector<bf16> dw0 = random_values<bf16>(rng, size_t(C));
        const std::vector<bf16> db0 = random_values<bf16>(rng, size_t(C));
        const Mirrored<bf16> inp(pair, x), dout(pair, dy), w(pair, weight);
        const Mirrored<float> m(pair, mean), s(pair, rstd);
        const Mirrored<bf16> dinp(pair, dx0), dweight(pair, dw0), dbias(pair, db0);
        pair.cpu->layernorm_backward((wanted & 1) ? dinp.cpu() : nullptr,
                                     (wanted & 2) ? dweight.cpu() : nullptr,
                                     (wanted & 4) ? dbias.cpu() : nullptr, dout.cpu(), inp.cpu(),
                                     w.cpu(), m.cpu(), s.cpu(), N, C);
        pair.emulated->layernorm_backward(
            (wanted & 1) ? dinp.emulated() : nullptr, (wanted & 2) ? dweight.emulated() : nullptr,
            (wanted & 4) ? dbias.emulated() : nullptr, dout.emulated(), inp.emulated(),
            w.emulated(), m.emulated(), s.emulated(), N, C);
        // dinp += rstd·(g - mean(g) - x̂·mean(g·x̂)): the terms are the same fp32 values on both
        // sides; the two row sums differ by their orders, then ~6 roundings per side.
        const std::vector<bf16> dinp_got = dinp.from_emulated(), dinp_want = dinp.from_cpu();
        if (!(wanted & 1)) expect_same_bits(dinp_got, dx0, what + " dinp untouched");
        std::vector<double> dw_abs(C, 0.0), db_abs(C, 0.0);
        for (int64_t row = 0; row < N; row++) {
          double g_sum = 0, g_abs = 0, gx_sum = 0, gx_abs = 0;
          const double mr = mean[row], sr = rstd[row];
          for (int c = 0; c < C; c++) {
            const double g = double(bf16_to_float(dy[row * C + c])) * bf16_to_float(weight[c]);
            const double xhat = (bf16_to_float(x[row * C + c]) - mr) * sr;
            g_sum += g, g_abs += std::fabs(g), gx_sum += g * xhat, gx_abs += std::fabs(g * xhat);
            dw_abs[c] += std::fabs(bf16_to_float(dy[row * C + c]) * xhat);
            db_abs[c] += std::fabs(bf16_to_float(dy[row * C + c]));
          }
          if (!(wanted & 1)) continue;
          const double D = row_depth(C);
          const double g_mean = g_sum / C, gx_mean = gx_sum / C;
          const double tol_g = D * kU * g_abs / C, tol_gx = D * kU * gx_abs / C;
          for (int c = 0; c < C; c++) {
            const double g = double(bf16_to_float(dy[row * C + c])) * bf16_to_float(weight[c]);
            const double xhat = (bf16_to_float(x[row * C + c]) - mr) * sr;
            const double delta =
                sr * (tol_g + std::fabs(xhat) * tol_gx) +
                8 * kU *
                    (std::fabs(bf16_to_float(dx0[row * C + c])) +
                     sr * (std::fabs(g) + std::fabs(g_mean) + std::fabs(xhat * gx_mean)));
            expect_bf16_close(
                dinp_got[row * C + c], dinp_want[row * C + c], delta, worst,
                what + " dinp[" + std::to_string(row) + ", " + std::to_string(c) + "]");
          }
        }
        if (wanted & 2) {
          check_column_sums(dweight.from_emulated(), dweight.from_cpu(), dw0, dw_abs, N, worst,
                            what + " dweight");
        } else {
          expect_same_bits(dweight.from_emulated(), dw0, what + " dweight untouched");
        }
        if (wanted & 4) {
          check_column_sums(dbias.from_emulated(), dbias.from_cpu(), db0, db_abs, N, worst,
                            what + " dbias");
        } else {
          expect_same_bits(dbias.from_emulated(), db0, what + " dbias untouched");
        }
      }
    }
  }
  worst.print("layernorm_backward", false);
}

// dinp_sums: the bias gradient formed from the dinp rows the backward has just written must be
// exactly what matmul_backward's dbias gives from them afterwards, on the same backend, with
// dinp, dweight and dbias unchanged; on the 128-bit and the scalar path (C = 100), over one
// chunk of rows and several.
TEST(CudaLayernorm, BackwardSumsOfDinpAreTheBiasGradientsBits) {
  BackendPair pair;
  Rng rng(25);
  for (int C : kColumns) {
    for (int64_t N : {int64_t(1), int64_t(33), int64_t(100)}) {
      const std::string what = shape("layernorm_backward dinp_sums", N, C);
      const size_t n = size_t(N * C);
      const std::vector<bf16> x = random_values<bf16>(rng, n, 2.0),
                              dy = random_values<bf16>(rng, n);
      const std::vector<bf16> weight = random_values<bf16>(rng, size_t(C));
      std::vector<float> mean(N), rstd(N);
      for (int64_t row = 0; row < N; row++)
        mean[row] = float(rng.normal()) * 0.1f, rstd[row] = float(rng.uniform(0.5, 2.0));
      const std::vector<bf16> dx0 = random_values<bf16>(rng, n);
      const std::vector<bf16> dw0 = random_values<bf16>(rng, size_t(C)),
                              db0 = random_values<bf16>(rng, size_t(C)),
                              ds0 = random_values<bf16>(rng, size_t(C));
      const Mirrored<bf16> inp(pair, x), dout(pair, dy), w(pair, weight);
      const Mirrored<float> m(pair, mean), s(pair, rstd);
      const Mirrored<bf16> fused_dinp(pair, dx0), fused_dw(pair, dw0), fused_db(pair, db0),
          fused_sums(pair, ds0);
      const Mirrored<bf16> two_dinp(pair, dx0), two_dw(pair, dw0), two_db(pair, db0),
          two_sums(pair, ds0);
      Backend& gpu = *pair.emulated;
      gpu.layernorm_backward(fused_dinp.emulated(), fused_dw.emulated(), fused_db.emulated(),
                             dout.emulated(), inp.emulated(), w.emulated(), m.emulated(),
                             s.emulated(), N, C, fused_sums.emulated());
      gpu.layernorm_backward(two_dinp.emulated(), two_dw.emulated(), two_db.emulated(),
                             dout.emulated(), inp.emulated(), w.emulated(), m.emulated(),
                             s.emulated(), N, C);
      gpu.matmul_backward(nullptr, nullptr, two_sums.emulated(), two_dinp.emulated(), nullptr,
                          nullptr, N, 1, C);
      expect_same_bits(fused_dinp.from_emulated(), two_dinp.from_emulated(), what + " dinp");
      expect_same_bits(fused_dw.from_emulated(), two_dw.from_emulated(), what + " dweight");
      expect_same_bits(fused_db.from_emulated(), two_db.from_emulated(), what + " dbias");
      expect_same_bits(fused_sums.from_emulated(), two_sums.from_emulated(), what + " dinp_sums");
    }
  }
}

// bias_backward through matmul_backward with only dbias wanted (no GEMM runs then). N = 1000:
// 32 row chunks, more than the totals' 16 slices, so each slice adds two chunks.
TEST(CudaBias, BackwardAccumulatesColumnSumsLikeCpu) {
  BackendPair pair;
  Rng rng(24);
  Worst worst;
  for (int OC : kColumns) {
    for (int64_t N :
         {int64_t(1), int64_t(5), int64_t(32), int64_t(33), int64_t(100), int64_t(1000)}) {
      const std::string what = shape("bias_backward", N, OC);
      const std::vector<bf16> dy = random_values<bf16>(rng, size_t(N * OC));
      const std::vector<bf16> db0 = random_values<bf16>(rng, size_t(OC));
      const Mirrored<bf16> dout(pair, dy), dbias(pair, db0);
      pair.cpu->matmul_backward(nullptr, nullptr, dbias.cpu(), dout.cpu(), nullptr, nullptr, N, 1,
                                OC);
      pair.emulated->matmul_backward(nullptr, nullptr, dbias.emulated(), dout.emulated(), nullptr,
                                     nullptr, N, 1, OC);
      std::vector<double> abs_sums(OC, 0.0);
      for (int64_t row = 0; row < N; row++)
        for (int c = 0; c < OC; c++) abs_sums[c] += std::fabs(bf16_to_float(dy[row * OC + c]));
      check_column_sums(dbias.from_emulated(), dbias.from_cpu(), db0, abs_sums, N, worst, what);
    }
  }
  worst.print("bias_backward", false);
}

}  // namespace
}  // namespace collage::test
