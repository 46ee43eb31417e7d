// The gradient norm's sum of squares (src/backend/cpu/gradient_squares.h) against a plain loop
// written from the order that header states, bit for bit, in every compilation this CPU can
// run (AVX2 and AVX-512) and at 1 and 2 threads; the data spans 50 binades so that another
// order gives other bits (checked too). The cpu backend's sum_squares adds the chunks in order.
#include "backend/cpu/gradient_squares.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/optimizer_isa.h"

namespace collage::test {
namespace {

using cpu::kSquaresChunk;

double square_of_bits(uint16_t bits) {
  const uint32_t word = uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof value);
  return double(value) * double(value);
}

// One chunk in gradient_squares.h's words, with `lanes` lanes (16 is the stated order).
double reference_chunk(const uint16_t* x, int64_t n, int lanes) {
  std::vector<double> lane(size_t(lanes), 0.0);
  const int64_t whole = n / lanes * lanes;
  for (int64_t i = 0; i < whole; i++) lane[size_t(i % lanes)] += square_of_bits(x[i]);
  for (int64_t i = whole; i < n; i++) lane[0] += square_of_bits(x[i]);
  double total = 0;
  for (double s : lane) total += s;
  return total;
}

// Random bf16 of both signs with exponents from 2^-17 to 2^18, and some zeros: squares over 70
// binades, so that most additions round, and where an addition happens changes the bits.
std::vector<uint16_t> spread_values(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> x(static_cast<size_t>(n));
  for (uint16_t& v : x) {
    const uint32_t sign = rng() % 2, exponent = 110 + rng() % 36, mantissa = rng() % 128;
    v = rng() % 500 == 0 ? 0 : uint16_t((sign << 15) | (exponent << 7) | mantissa);
  }
  return x;
}

std::string bits_of(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  char text[40];
  std::snprintf(text, sizeof text, "%a (0x%016llx)", d, static_cast<unsigned long long>(u));
  return text;
}

// Whole groups only, tails of every length, fewer than a group, several chunks with a ragged
// last one.
const int64_t kLengths[] = {0,
                            1,
                            2,
                            3,
                            5,
                            8,
                            13,
                            15,
                            16,
                            17,
                            18,
                            19,
                            21,
                            24,
                            29,
                            31,
                            32,
                            33,
                            47,
                            63,
                            100,
                            111,
                            127,
                            255,
                            1000,
                            kSquaresChunk,
                            kSquaresChunk + 1,
                            3 * kSquaresChunk + 100 + 7};

TEST(GradientSquares, EveryCompilationSumsInTheStatedOrder) {
  for (const cpu::OptimizerLoop& loop : cpu::runnable_optimizer_loops()) {
    for (const int64_t n : kLengths) {
      const std::vector<uint16_t> x = spread_values(n, uint64_t(n) + 1);
      const int64_t chunks = (n + kSquaresChunk - 1) / kSquaresChunk;
      for (const int threads : {1, 2}) {
        std::vector<double> partial(size_t(chunks), -1.0);
        loop.sum_squares_chunks(x.data(), n, threads, partial.data());
        for (int64_t c = 0; c < chunks; c++) {
          const int64_t begin = c * kSquaresChunk;
          const double want =
              reference_chunk(x.data() + begin, std::min(kSquaresChunk, n - begin), 16);
          ASSERT_EQ(bits_of(partial[size_t(c)]), bits_of(want))
              << loop.name << " loop, n = " << n << ", chunk " << c << ", " << threads
              << " threads";
        }
      }
    }
  }
}

// The data above tells orders apart: 8 lanes (as GCC vectorizes the same loop over fp32
// inputs) and one lane give other bits, and all three agree to a relative 1e-13.
TEST(GradientSquares, TheDataTellsOrdersApart) {
  const int64_t n = kSquaresChunk;
  const std::vector<uint16_t> x = spread_values(n, uint64_t(n) + 1);
  const double stated = reference_chunk(x.data(), n, 16);
  EXPECT_NE(bits_of(reference_chunk(x.data(), n, 8)), bits_of(stated));
  EXPECT_NE(bits_of(reference_chunk(x.data(), n, 1)), bits_of(stated));
  EXPECT_NEAR(reference_chunk(x.data(), n, 1) / stated, 1.0, 1e-13);
}

TEST(GradientSquares, BackendAddsTheChunksInOrder) {
  const int64_t n = 3 * kSquaresChunk + 100 + 7;
  const std::vector<uint16_t> x = spread_values(n, 7);
  double want = 0;
  for (int64_t begin = 0; begin < n; begin += kSquaresChunk) {
    want += reference_chunk(x.data() + begin, std::min(kSquaresChunk, n - begin), 16);
  }
  auto backend = make_cpu_backend(2, "openblas");
  auto* device = static_cast<bf16*>(backend->allocate(size_t(2 * n)));
  backend->copy_to_device(device, x.data(), size_t(2 * n));
  EXPECT_EQ(bits_of(backend->sum_squares(device, n)), bits_of(want));
  backend->release(device);
}

// ±inf squares to +inf and NaN stays NaN, in every compilation and in the tail.
TEST(GradientSquares, InfinityAndNan) {
  for (const cpu::OptimizerLoop& loop : cpu::runnable_optimizer_loops()) {
    for (const int64_t at : {int64_t(3), int64_t(17)}) {  // in a group of 16, in the tail
      std::vector<uint16_t> x = spread_values(18, 3);
      double sum = 0;
      x[size_t(at)] = 0xff80;  // −inf
      loop.sum_squares_chunks(x.data(), 18, 1, &sum);
      EXPECT_TRUE(std::isinf(sum) && sum > 0) << loop.name << " at " << at << ": " << sum;
      x[size_t(at)] = 0x7fc1;  // a NaN
      loop.sum_squares_chunks(x.data(), 18, 1, &sum);
      EXPECT_TRUE(std::isnan(sum)) << loop.name << " at " << at << ": " << sum;
    }
  }
}

}  // namespace
}  // namespace collage::test
