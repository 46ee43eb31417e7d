// The row-major -> column-major mapping the cuBLASLt GEMM is built from (gemm_layout.h): the
// column-major product that cuBLASLt would compute from the mapped descriptors, evaluated here
// as BLAS defines it, must equal the row-major product the GemmCall asks for, in every element
// and reading nothing outside the operands. The cuBLASLt call itself needs a GPU; this is the
// part of it that can be checked without one.
#include "backend/cuda/runtime/gemm_layout.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace collage::cuda {
namespace {

// op(x)(i, p) of a column-major operand: x(r, c) is data[r + c·ld].
double column_major_element(const std::vector<double>& data, const ColumnMajorOperand& x, int64_t i,
                            int64_t p) {
  const int64_t r = x.transpose ? p : i, c = x.transpose ? i : p;
  EXPECT_TRUE(r >= 0 && r < x.rows && c >= 0 && c < x.cols) << "(" << r << ", " << c << ")";
  EXPECT_LE(x.rows, x.ld) << "leading dimension below the row count";
  return data[size_t(r + c * x.ld)];
}

struct Case {
  const char* name;
  int64_t M, N, K;
  bool transpose_a, transpose_b;
  int64_t pad_a, pad_b, pad_d;  // leading dimensions beyond the stored width
};

TEST(GemmLayout, ColumnMajorProblemIsTheRowMajorProduct) {
  const Case cases[] = {
      // the three GEMMs of matmul (src/backend/cuda/cuda_backend.cpp), N=5 rows, C=7, OC=3
      {"forward: inp · weightᵀ", 5, 3, 7, false, true, 0, 0, 0},
      {"dinp += dout · weight", 5, 7, 3, false, false, 0, 0, 0},
      {"dweight += doutᵀ · inp", 3, 7, 5, true, false, 0, 0, 0},
      {"both transposed, padded", 4, 6, 9, true, true, 2, 3, 1},
      {"neither transposed, padded", 6, 2, 1, false, false, 5, 1, 4},
      {"one row", 1, 8, 8, false, true, 0, 0, 0},
  };
  std::mt19937 gen(3);
  std::uniform_real_distribution<double> value(-1, 1);
  for (const Case& t : cases) {
    SCOPED_TRACE(t.name);
    GemmCall g;
    g.M = t.M, g.N = t.N, g.K = t.K;
    g.transpose_a = t.transpose_a, g.transpose_b = t.transpose_b;
    // Stored shapes: a (M, K) or (K, M); b (K, N) or (N, K); d (M, N).
    const int64_t a_rows = t.transpose_a ? t.K : t.M, a_cols = t.transpose_a ? t.M : t.K;
    const int64_t b_rows = t.transpose_b ? t.N : t.K, b_cols = t.transpose_b ? t.K : t.N;
    g.lda = a_cols + t.pad_a, g.ldb = b_cols + t.pad_b, g.ldd = t.N + t.pad_d;
    std::vector<double> a(size_t(a_rows * g.lda)), b(size_t(b_rows * g.ldb));
    for (double& x : a) x = value(gen);
    for (double& x : b) x = value(gen);

    const ColumnMajorGemm c = column_major(g);
    // Shapes as cuBLASLt checks them: op(first) (m, k), op(second) (k, n), output (m, n).
    auto op_rows = [](const ColumnMajorOperand& x) { return x.transpose ? x.cols : x.rows; };
    auto op_cols = [](const ColumnMajorOperand& x) { return x.transpose ? x.rows : x.cols; };
    EXPECT_EQ(op_rows(c.first), c.m);
    EXPECT_EQ(op_cols(c.first), c.k);
    EXPECT_EQ(op_rows(c.second), c.k);
    EXPECT_EQ(op_cols(c.second), c.n);
    EXPECT_EQ(c.output.rows, c.m);
    EXPECT_EQ(c.output.cols, c.n);
    EXPECT_FALSE(c.output.transpose);

    // first is our b, second our a; the output is d. Compare every element of d.
    for (int64_t i = 0; i < c.m; i++) {
      for (int64_t j = 0; j < c.n; j++) {
        double column_major = 0;
        for (int64_t p = 0; p < c.k; p++) {
          column_major +=
              column_major_element(b, c.first, i, p) * column_major_element(a, c.second, p, j);
        }
        // The same memory as the row-major d(r, col) with r = j, col = i.
        const int64_t r = j, col = i;
        double row_major = 0;
        for (int64_t p = 0; p < t.K; p++) {
          const double a_rp = t.transpose_a ? a[size_t(p * g.lda + r)] : a[size_t(r * g.lda + p)];
          const double b_pc =
              t.transpose_b ? b[size_t(col * g.ldb + p)] : b[size_t(p * g.ldb + col)];
          row_major += a_rp * b_pc;
        }
        EXPECT_EQ(i + j * c.output.ld, r * g.ldd + col)
            << "output element (" << r << ", " << col << ") lands elsewhere";
        EXPECT_NEAR(column_major, row_major, 1e-12) << "d(" << r << ", " << col << ")";
      }
    }
  }
}

}  // namespace
}  // namespace collage::cuda
