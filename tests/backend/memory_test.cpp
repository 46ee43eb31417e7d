// allocate / release / copies / zero of both cpu backends (zero also over threads).
#include <cstdio>
#include <fstream>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "backend_test_util.h"

namespace collage::test {
namespace {

template <typename S>
class MemoryTest : public ::testing::Test {};
TYPED_TEST_SUITE(MemoryTest, StorageTypes, StorageNames);

TYPED_TEST(MemoryTest, AllocateIsZeroedAndAligned) {
  auto backend = Storage<TypeParam>::make();
  for (size_t bytes :
       {size_t(0), size_t(1), size_t(255), size_t(256), size_t(1000), size_t(1) << 22}) {
    auto* p = static_cast<unsigned char*>(backend->allocate(bytes));
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u) << bytes;
    size_t nonzero = 0;
    for (size_t i = 0; i < bytes; i++) nonzero += p[i] != 0;
    EXPECT_EQ(nonzero, 0u) << bytes;
    backend->release(p);
  }
}

TYPED_TEST(MemoryTest, CopiesAndZero) {
  auto backend = Storage<TypeParam>::make();
  const size_t n = 1001;
  std::vector<unsigned char> host(n);
  for (size_t i = 0; i < n; i++) host[i] = static_cast<unsigned char>(i * 7 + 1);
  void* a = backend->allocate(n);
  void* b = backend->allocate(n);
  backend->copy_to_device(a, host.data(), n);
  backend->copy(b, a, n);
  std::vector<unsigned char> back(n);
  backend->copy_to_host(back.data(), b, n);
  EXPECT_EQ(back, host);
  backend->zero(static_cast<char*>(b) + 10, 100);  // only [10, 110)
  backend->copy_to_host(back.data(), b, n);
  for (size_t i = 0; i < n; i++) {
    EXPECT_EQ(back[i], (i >= 10 && i < 110) ? 0 : host[i]) << i;
  }
  backend->release(a);
  backend->release(b);
}

// Large regions are zeroed in one slice per thread, and the largest with non-temporal stores
// over their whole cache lines (backend/cpu/zero.cpp): every byte of an odd-sized region that
// starts off a cache line is cleared, for 1 to 3 threads, sliced (3 MiB) and streamed (33 MiB),
// and its neighbours are left alone.
TYPED_TEST(MemoryTest, ZeroOfALargeRegionClearsItExactly) {
  for (const size_t megabytes : {3, 33}) {
    for (int threads : {1, 2, 3}) {
      const size_t n = (megabytes << 20) + 12345, begin = 7, end = n - 5;
      auto backend = Storage<TypeParam>::make(threads);
      std::vector<unsigned char> host(n);
      for (size_t i = 0; i < n; i++) host[i] = static_cast<unsigned char>(i % 251 + 1);
      void* p = backend->allocate(n);
      backend->copy_to_device(p, host.data(), n);
      backend->zero(static_cast<char*>(p) + begin, end - begin);
      std::vector<unsigned char> back(n);
      backend->copy_to_host(back.data(), p, n);
      size_t wrong = 0;
      for (size_t i = 0; i < n; i++) wrong += back[i] != ((i >= begin && i < end) ? 0 : host[i]);
      EXPECT_EQ(wrong, 0u) << megabytes << " MiB, " << threads << " threads";
      backend->release(p);
    }
  }
}

// The active choice of a /sys/kernel/mm/transparent_hugepage file ("always [madvise] never"),
// or "" where the kernel has none.
std::string transparent_huge_pages_mode() {
  std::ifstream file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(file, line);
  const size_t open = line.find('['), close = line.find(']');
  return open == std::string::npos || close == std::string::npos
             ? ""
             : line.substr(open + 1, close - open - 1);
}

// AnonHugePages of the mapping of /proc/self/smaps that holds address p, in kB; -1 if none does.
// A mapping's header line starts "begin-end " in hex; its fields follow, one a line.
long huge_page_kb_at(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto address = reinterpret_cast<unsigned long>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long begin = 0, end = 0;
    long kb = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2) {
      inside = address >= begin && address < end;
    } else if (inside && std::sscanf(line.c_str(), "AnonHugePages: %ld kB", &kb) == 1) {
      return kb;
    }
  }
  return -1;
}

// A region of 2 MiB or more starts on a 2 MiB boundary and asks for transparent huge pages
// (cpu_backend.cpp, allocate): where the kernel gives them to such a request, a 64 MiB region
// holds some.
TEST(Memory, LargeRegionsSitOnHugePagesWhereTheKernelAllows) {
  auto backend = make_cpu_backend(1);
  const size_t bytes = size_t(64) << 20;
  void* p = backend->allocate(bytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (size_t(2) << 20), 0u);
  const std::string mode = transparent_huge_pages_mode();
  if (mode != "always" && mode != "madvise") {
    backend->release(p);
    GTEST_SKIP() << "transparent huge pages are '" << mode << "' on this kernel, not always or "
                 << "madvise: a request for them is not granted";
  }
  EXPECT_GT(huge_page_kb_at(p), 0) << "no huge page in a 64 MiB region (mode " << mode << ")";
  backend->release(p);
}

TEST(Memory, Names) {
  EXPECT_EQ(make_cpu_backend(1)->name(), "cpu");
  EXPECT_EQ(make_cpu_backend_fp32(1)->name(), "cpu-fp32");
}

}  // namespace
}  // namespace collage::test
