// Warp collectives under the emulator: the four shuffles for every width and several offsets
// and types against a reference written from the CUDA programming guide; partial masks and
// divergent lanes (lanes of one warp at different shuffles); ballot/any/all with partial masks;
// __syncwarp ordering shared memory; and the kernel bugs that must abort, not hang.
#include <cstring>
#if __has_include(<cuda_bf16.h>)
#include <cuda_bf16.h>
#define SIMT_TEST_BF16 1
#endif

#include "simt_test_util.h"

namespace {

using simt_test::DeviceArray;
using simt_test::ReverseSchedule;
using simt_test::SimtTest;

enum Kind : int { kIdx, kXor, kDown, kUp };

// The lane whose value `lane` receives, per the CUDA programming guide: the warp is cut into
// segments of `width` lanes; __shfl_sync reads lane (arg mod width) of the own segment;
// __shfl_xor_sync reads lane^arg unless that lies in a LATER segment; down reads lane+arg
// unless past the segment's end, up reads lane-arg unless before its start (then: own value).
int reference_source(Kind kind, int lane, int arg, int width) {
  const int start = lane - lane % width, end = start + width;
  switch (kind) {
    case kIdx:
      return start + ((arg % width) + width) % width;
    case kXor:
      return (lane ^ arg) < end ? lane ^ arg : lane;
    case kDown:
      return lane + arg < end ? lane + arg : lane;
    case kUp:
      return lane - arg >= start ? lane - arg : lane;
  }
  return -1;
}

template <typename T>
__global__ void shuffle_kernel(const T* in, T* out, int kind, int arg, int width) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  const T value = in[i];
  T result = value;
  switch (kind) {
    case kIdx:
      result = __shfl_sync(0xffffffffu, value, arg, width);
      break;
    case kXor:
      result = __shfl_xor_sync(0xffffffffu, value, arg, width);
      break;
    case kDown:
      result = __shfl_down_sync(0xffffffffu, value, unsigned(arg), width);
      break;
    case kUp:
      result = __shfl_up_sync(0xffffffffu, value, unsigned(arg), width);
      break;
  }
  out[i] = result;
}

template <typename T>
class Shuffle : public SimtTest {
 protected:
  void check_all(const std::vector<T>& values) {
    const unsigned threads = 64, blocks = 2;  // two warps a block, two blocks
    ASSERT_EQ(values.size(), threads * blocks);
    DeviceArray<T> d_in(values.size()), d_out(values.size());
    this->upload(d_in, values);
    int checked = 0;
    for (const int width : {32, 16, 8, 4, 2, 1})
      for (const Kind kind : {kIdx, kXor, kDown, kUp})
        for (const int arg : {0, 1, 3, 5, 16, 31}) {
          this->run(shuffle_kernel<T>, dim3(blocks), dim3(threads), 0, d_in.get(), d_out.get(),
                    int(kind), arg, width);
          const std::vector<T> out = this->download(d_out);
          for (unsigned i = 0; i < values.size(); ++i) {
            const int lane = int(i % 32);
            const unsigned source =
                i - unsigned(lane) + unsigned(reference_source(kind, lane, arg, width));
            ASSERT_EQ(std::memcmp(&out[i], &values[source], sizeof(T)), 0)
                << "kind " << kind << " width " << width << " arg " << arg << " thread " << i
                << " should read thread " << source;
            ++checked;
          }
        }
    EXPECT_EQ(checked, 6 * 4 * 6 * 128);
  }
};

// Every kind of value a kernel shuffles: 4 and 8 bytes, integers, floats, bf16, a vector type.
#if defined(SIMT_TEST_BF16)
using ShuffleTypes =
    ::testing::Types<float, double, int, unsigned, long long, __nv_bfloat16, float2>;
#else
using ShuffleTypes = ::testing::Types<float, double, int, unsigned, long long, float2>;
#endif
TYPED_TEST_SUITE(Shuffle, ShuffleTypes);

TYPED_TEST(Shuffle, AllKindsWidthsAndOffsets) {
  std::vector<TypeParam> values(128);
  for (size_t i = 0; i < values.size(); ++i) {
    // Distinct bit patterns in every byte that the type has.
    unsigned char bytes[sizeof(TypeParam)];
    for (size_t b = 0; b < sizeof(TypeParam); ++b) bytes[b] = (unsigned char)(i * 37 + b * 101 + 1);
    if constexpr (std::is_floating_point_v<TypeParam>) {
      values[i] = TypeParam(i) * TypeParam(1.25) + TypeParam(1e-3) * TypeParam(i % 7);
    } else {
      std::memcpy(&values[i], bytes, sizeof(TypeParam));
    }
  }
  this->check_all(values);
}

// Partial masks: even lanes shuffle among themselves, odd lanes among themselves with a
// different kind and width, then the whole warp shuffles up by one within 16-lane segments.
__global__ void partial_masks(int* out) {
  const int lane = int(threadIdx.x & 31);
  const int v = lane * 100 + int(threadIdx.x >> 5);
  int a;
  if (lane % 2 == 0)
    a = __shfl_xor_sync(0x55555555u, v, 2);
  else
    a = __shfl_down_sync(0xaaaaaaaau, v, 2, 8);
  out[threadIdx.x] = __shfl_up_sync(0xffffffffu, a, 1, 16);
}

TEST_F(SimtTest, PartialMasks) {
  for (const bool reverse : {false, true}) {
    ReverseSchedule order(reverse);
    DeviceArray<int> d_out(96);
    run(partial_masks, dim3(1), dim3(96), 0, d_out.get());
    const std::vector<int> out = download(d_out);
    for (int t = 0; t < 96; ++t) {
      const int warp = t / 32, lane = t % 32;
      auto first = [&](int l) {  // a of lane l
        const int source = l % 2 == 0 ? l ^ 2 : reference_source(kDown, l, 2, 8);
        return source * 100 + warp;
      };
      ASSERT_EQ(out[t], first(reference_source(kUp, lane, 1, 16))) << "thread " << t;
    }
  }
}

// The divergent example: lanes of one warp reach different shuffles (lower half first, or upper
// half first).
__global__ void divergent_shuffles(int* out, bool upper_first) {
  const int lane = int(threadIdx.x & 31);
  int v = lane;
  if (!upper_first && lane < 16) v = __shfl_xor_sync(0x0000ffffu, v, 1);
  if (upper_first && lane >= 16) v = __shfl_xor_sync(0xffff0000u, v, 1);
  v = __shfl_xor_sync(0xffffffffu, v, 16);
  out[threadIdx.x] = v;
}

TEST_F(SimtTest, DivergentLanesAtDifferentShuffles) {
  for (const bool reverse : {false, true}) {
    ReverseSchedule order(reverse);
    for (const bool upper_first : {false, true}) {
      DeviceArray<int> d_out(64);
      run(divergent_shuffles, dim3(1), dim3(64), 0, d_out.get(), upper_first);
      const std::vector<int> out = download(d_out);
      for (int t = 0; t < 64; ++t) {
        const int lane = t % 32, partner = lane ^ 16;
        const bool swapped = upper_first ? partner >= 16 : partner < 16;
        ASSERT_EQ(out[t], swapped ? partner ^ 1 : partner)
            << "thread " << t << (upper_first ? " (upper half first)" : " (lower half first)");
      }
    }
  }
}

// A source lane outside the mask takes no part; its value is undefined on a GPU and the
// emulator returns all-ones bits (-1, NaN), so a kernel that uses it sees garbage.
__global__ void source_outside_mask(int* out) {
  const int lane = int(threadIdx.x);
  int v = lane;
  if (lane < 16) v = __shfl_down_sync(0x0000ffffu, v, 8);
  out[lane] = v;
}

TEST_F(SimtTest, SourceOutsideMaskIsPoison) {
  DeviceArray<int> d_out(32);
  run(source_outside_mask, dim3(1), dim3(32), 0, d_out.get());
  const std::vector<int> out = download(d_out);
  for (int lane = 0; lane < 32; ++lane)
    EXPECT_EQ(out[lane], lane < 8 ? lane + 8 : lane < 16 ? -1 : lane) << "lane " << lane;
}

// Votes with partial masks: lanes 0-19 vote among themselves, lanes 20-31 among themselves.
__global__ void votes(unsigned* out) {
  const unsigned lane = threadIdx.x & 31;
  unsigned* o = out + 5 * threadIdx.x;
  if (lane < 20) {
    const unsigned mask = 0x000fffffu;
    o[0] = __ballot_sync(mask, lane % 3 == 0 ? int(lane + 4) : 0);  // any non-zero is true
    o[1] = unsigned(__any_sync(mask, lane == 7));
    o[2] = unsigned(__all_sync(mask, lane < 20));
    o[3] = unsigned(__any_sync(mask, 0));
    o[4] = unsigned(__all_sync(mask, lane != 4));
  } else {
    const unsigned mask = 0xfff00000u;
    o[0] = __ballot_sync(mask, lane & 1);
    o[1] = unsigned(__any_sync(mask, lane == 7));
    o[2] = unsigned(__all_sync(mask, 1));
    o[3] = unsigned(__any_sync(mask, lane == 31));
    o[4] = unsigned(__all_sync(mask, lane != 31));
  }
}

TEST_F(SimtTest, BallotAnyAllWithPartialMasks) {
  DeviceArray<unsigned> d_out(5 * 64);
  run(votes, dim3(1), dim3(64), 0, d_out.get());
  const std::vector<unsigned> out = download(d_out);
  unsigned low_ballot = 0, high_ballot = 0;
  for (unsigned lane = 0; lane < 20; ++lane) low_ballot |= (lane % 3 == 0 ? 1u : 0u) << lane;
  for (unsigned lane = 20; lane < 32; ++lane) high_ballot |= (lane & 1) << lane;
  for (unsigned t = 0; t < 64; ++t) {
    const unsigned* o = &out[5 * t];
    if (t % 32 < 20) {
      EXPECT_EQ(o[0], low_ballot) << t;
      EXPECT_EQ(o[1], 1u) << t;
      EXPECT_EQ(o[2], 1u) << t;
      EXPECT_EQ(o[3], 0u) << t;
      EXPECT_EQ(o[4], 0u) << t;
    } else {
      EXPECT_EQ(o[0], high_ballot) << t;
      EXPECT_EQ(o[1], 0u) << t;
      EXPECT_EQ(o[2], 1u) << t;
      EXPECT_EQ(o[3], 1u) << t;
      EXPECT_EQ(o[4], 0u) << t;
    }
  }
}

// A partial last warp: a block of 40 threads, whose second warp has lanes 0-7.
__global__ void partial_warp(unsigned* out) {
  const unsigned lane = threadIdx.x & 31;
  const unsigned mask = threadIdx.x < 32 ? 0xffffffffu : 0xffu;
  unsigned sum = lane;
  for (int offset = 4; offset > 0; offset >>= 1) sum += __shfl_xor_sync(mask, sum, offset, 8);
  out[threadIdx.x] = __ballot_sync(mask, lane >= 2) ^ (sum << 8);
}

TEST_F(SimtTest, PartialLastWarp) {
  DeviceArray<unsigned> d_out(40);
  run(partial_warp, dim3(1), dim3(40), 0, d_out.get());
  const std::vector<unsigned> out = download(d_out);
  for (unsigned t = 0; t < 40; ++t) {
    const unsigned lane = t % 32, group = lane / 8 * 8;
    const unsigned sum = 8 * group + 28;  // lanes group..group+7
    const unsigned ballot = t < 32 ? 0xfffffffcu : 0xfcu;
    EXPECT_EQ(out[t], ballot ^ (sum << 8)) << "thread " << t;
  }
}

// __syncwarp orders shared memory between the lanes of its mask (lanes 16-31 exit first).
__global__ void syncwarp_exchange(int* out, bool with_syncwarp) {
  int* slot = static_cast<int*>(simt::dynamic_shared_memory());
  const int lane = int(threadIdx.x);
  if (lane >= 16) return;
  slot[lane] = lane * 3;
  if (with_syncwarp) __syncwarp(0x0000ffffu);
  out[lane] = slot[lane ^ 1];
}

TEST_F(SimtTest, SyncwarpOrdersSharedMemory) {
  for (const bool reverse : {false, true}) {
    ReverseSchedule order(reverse);
    for (const bool with_syncwarp : {true, false}) {
      DeviceArray<int> d_out(16);
      run(syncwarp_exchange, dim3(1), dim3(32), 16 * sizeof(int), d_out.get(), with_syncwarp);
      const std::vector<int> out = download(d_out);
      int wrong = 0;
      for (int lane = 0; lane < 16; ++lane) wrong += out[lane] != (lane ^ 1) * 3;
      EXPECT_EQ(wrong, with_syncwarp ? 0 : 8) << (reverse ? "reverse order" : "default order");
    }
  }
}

// ---- kernel bugs: abort with a message, never hang ----

__global__ void lane_exits_while_others_wait(int* out) {
  const int lane = int(threadIdx.x & 31);
  if (lane == 5) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, lane, 1);
}
__global__ void mask_names_exited_lane(int* out) {
  const int lane = int(threadIdx.x & 31);
  if (lane < 4) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, lane, 1);
}
__global__ void full_mask_in_partial_warp(float* out) {
  float v = float(threadIdx.x);
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  out[threadIdx.x] = v;
}
__global__ void mask_without_caller(int* out) {
  out[threadIdx.x] = __shfl_sync(threadIdx.x == 0 ? 0xfffffffeu : 0xffffffffu, 1, 0);
}
__global__ void different_collectives(int* out) {
  if (threadIdx.x % 2 == 0)
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
  else
    out[threadIdx.x] = int(__ballot_sync(0xffffffffu, 1));
}
__global__ void mismatched_masks(int* out) {
  const unsigned lane = threadIdx.x & 31;
  out[threadIdx.x] = __shfl_xor_sync(lane < 16 ? 0xffffffffu : 0xffff0001u, 1, 1);
}
__global__ void bad_width(int* out) { out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1, 12); }

class WarpMisuse : public SimtTest {
 protected:
  template <typename T>
  void launch_and_sync(void (*kernel)(T*), unsigned threads) {
    DeviceArray<T> d_out(threads);
    simt::launch(stream, kernel, dim3(1), dim3(threads), 0, d_out.get());
    simt::synchronize(stream);
  }
};

TEST_F(WarpMisuse, LaneExitsWhileNamedInAWaitingMask) {
  EXPECT_DEATH(launch_and_sync(lane_exits_while_others_wait, 32),
               "simt: kernel .*block \\(0,0,0\\), thread \\(5,0,0\\).*exited while lane 0 waits "
               "for it in __shfl_xor_sync with mask 0xffffffff");
}
TEST_F(WarpMisuse, MaskNamesAnExitedLane) {
  EXPECT_DEATH(launch_and_sync(mask_names_exited_lane, 64),
               "simt: .*thread \\(4,0,0\\).*__shfl_xor_sync with mask 0xffffffff names lane 0, "
               "which has exited");
}
TEST_F(WarpMisuse, FullMaskInAPartialWarp) {
  EXPECT_DEATH(launch_and_sync(full_mask_in_partial_warp, 40),
               "simt: .*thread \\(32,0,0\\).*names lane 8, which does not exist \\(the block has "
               "40 threads\\)");
}
TEST_F(WarpMisuse, MaskWithoutTheCallingLane) {
  EXPECT_DEATH(launch_and_sync(mask_without_caller, 32),
               "simt: .*thread \\(0,0,0\\).*mask 0xfffffffe, which does not name the calling "
               "lane 0");
}
TEST_F(WarpMisuse, LanesOfOneRendezvousAtDifferentCollectives) {
  EXPECT_DEATH(launch_and_sync(different_collectives, 32), "must call the same collective");
}
TEST_F(WarpMisuse, MismatchedMasksDeadlock) {
  EXPECT_DEATH(launch_and_sync(mismatched_masks, 32),
               "simt: .*deadlock.*threads \\(0,0,0\\)-\\(15,0,0\\) in __shfl_xor_sync with "
               "mask 0xffffffff; threads \\(16,0,0\\)-\\(31,0,0\\) in __shfl_xor_sync with "
               "mask 0xffff0001");
}
TEST_F(WarpMisuse, WidthNotAPowerOfTwo) {
  EXPECT_DEATH(launch_and_sync(bad_width, 32), "width 12 \\(must be a power of two");
}

}  // namespace
