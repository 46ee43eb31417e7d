// Atomics across blocks and across worker OS threads: integer histograms, float and double
// atomicAdd of exactly representable values (order-independent sums), max/min, CAS, exchange.
#include <algorithm>

#include "simt_test_util.h"

namespace {

using simt_test::DeviceArray;
using simt_test::SimtTest;
using simt_test::WorkerThreads;

template <typename Count>
__global__ void histogram(const int* values, int n, Count* bins) {
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += int(gridDim.x * blockDim.x))
    atomicAdd(&bins[values[i]], Count(1));
}

template <typename Count>
void check_histogram(SimtTest& test, simt::Stream* stream) {
  const int n = 50000, bins = 37;
  std::vector<int> values(n);
  std::vector<Count> expected(bins, 0);
  for (int i = 0; i < n; ++i) {
    values[i] = int((uint64_t(i) * 2654435761u) % 1000) % bins;
    expected[size_t(values[i])]++;
  }
  DeviceArray<int> d_values(n);
  DeviceArray<Count> d_bins(bins);
  simt::memcpy_async(stream, d_values.get(), values.data(), d_values.bytes());
  simt::memset_async(stream, d_bins.get(), 0, d_bins.bytes());
  ASSERT_EQ(simt::launch(stream, histogram<Count>, dim3(40), dim3(160), 0, d_values.get(), n,
                         d_bins.get()),
            nullptr);
  std::vector<Count> out(bins);
  simt::memcpy_async(stream, out.data(), d_bins.get(), d_bins.bytes());
  ASSERT_EQ(simt::synchronize(stream), nullptr);
  EXPECT_EQ(out, expected);
  (void)test;
}

TEST_F(SimtTest, IntegerHistogramAcrossBlocks) {
  for (const unsigned workers : {1u, 2u}) {
    WorkerThreads pool(workers);
    check_histogram<int>(*this, stream);
    check_histogram<unsigned>(*this, stream);
    check_histogram<unsigned long long>(*this, stream);
  }
}

// Sums of multiples of 1/4 below 2^22: every partial sum is exact in float, so the result does
// not depend on the order of the additions.
__global__ void float_sums(float* total_f, double* total_d, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  const float value = float(i % 97) * 0.25f;
  atomicAdd(total_f, value);
  atomicAdd(total_d, double(value) * 1024.0);
}

TEST_F(SimtTest, FloatAtomicAddOfExactValues) {
  for (const unsigned workers : {1u, 2u}) {
    WorkerThreads pool(workers);
    const int n = 150000;  // every partial sum below 2^22: exact in steps of 1/4
    double expected = 0;
    for (int i = 0; i < n; ++i) expected += double(i % 97) * 0.25;
    DeviceArray<float> d_f(1);
    DeviceArray<double> d_d(1);
    simt::memset_async(stream, d_f.get(), 0, 4);
    simt::memset_async(stream, d_d.get(), 0, 8);
    run(float_sums, dim3((n + 127) / 128), dim3(128), 0, d_f.get(), d_d.get(), n);
    EXPECT_EQ(double(download(d_f)[0]), expected);
    EXPECT_EQ(download(d_d)[0], expected * 1024.0);
  }
}

// max/min/sub/exch/CAS over all threads of the grid; a CAS loop increments a counter.
__global__ void other_atomics(int* ints, unsigned* uints, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  const int key = (i * 7919) % n - n / 2;  // each of -n/2 .. n/2-1 once
  atomicMax(&ints[0], key);
  atomicMin(&ints[1], key);
  atomicSub(&ints[2], 3);
  atomicMax(&uints[0], unsigned(i) * 3u);
  atomicMin(&uints[1], unsigned(i) + 5u);
  int seen = ints[3];
  for (int assumed; (assumed = atomicCAS(&ints[3], seen, seen + 2)) != seen;) seen = assumed;
  atomicExch(&ints[4], 42);
  atomicAdd(&uints[2], atomicExch(&uints[3], 1u) == 0u ? 1u : 0u);  // only the first sees 0
}

TEST_F(SimtTest, MaxMinSubCasExch) {
  for (const unsigned workers : {1u, 2u}) {
    WorkerThreads pool(workers);
    const int n = 6007;  // prime: key is a permutation
    DeviceArray<int> d_ints(5);
    DeviceArray<unsigned> d_uints(4);
    upload(d_ints, std::vector<int>{-1000000, 1000000, 0, 0, 0});
    upload(d_uints, std::vector<unsigned>{0u, ~0u, 0u, 0u});
    run(other_atomics, dim3((n + 255) / 256), dim3(256), 0, d_ints.get(), d_uints.get(), n);
    EXPECT_EQ(download(d_ints), (std::vector<int>{n / 2, -n / 2, -3 * n, 2 * n, 42}));
    EXPECT_EQ(download(d_uints), (std::vector<unsigned>{unsigned(n - 1) * 3u, 5u, 1u, 1u}));
  }
}

}  // namespace
