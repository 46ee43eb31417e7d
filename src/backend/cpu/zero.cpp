// Zeroing memory (Backend::zero): above all the gradients, which the trainer zeroes before
// every step and the backward then accumulates into (GPT-2 124M: 249 MB).
//
// Two things make a large region slow to clear, each measured on the 2-core Intel development
// VM over 249 MB:
//  - One core's stores do not fill the memory bandwidth that two reach: one thread took
//    25.5 ms, two 12.8. So a region of 1 MiB or more is cut into one slice per thread.
//  - An ordinary store first reads the line it writes (read-for-ownership), so memset moves
//    twice the bytes it clears; glibc's memset switches to non-temporal stores only above a
//    size it derives from the last-level cache, which a VM may report as hundreds of MB. Non-
//    temporal stores write whole lines without reading them: 12.9 ms with memset on two
//    threads, 5.3 ms streamed. They also leave the lines out of the caches, which is right for
//    a region far larger than them (the backward reads the gradients long after, from DRAM
//    either way) and wrong for a small one that the next op reads at once (an activation
//    gradient zeroed before its op adds into it). So only a region of kStreamingBytes or more
//    is streamed.
#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "backend/cpu/kernels.h"

namespace collage::cpu {
namespace {

constexpr size_t kParallelBytes = size_t(1) << 20;    // below this a parallel region costs more
constexpr size_t kStreamingBytes = size_t(32) << 20;  // well above the L2s of a few cores
constexpr size_t kLine = 64;

// Zeroes [begin, end) with non-temporal stores over its whole 64-byte lines and memset over
// the partial lines at either end (either may be empty, or the whole range where it holds no
// whole line). The fence orders the streamed stores before whatever this thread does next
// (the end of the parallel region then orders them for the others).
void stream_zeros(char* begin, char* end) {
#if defined(__SSE2__)
  const auto at = [](char* p) { return reinterpret_cast<uintptr_t>(p); };
  char* first_line = std::min(end, begin + (kLine - at(begin) % kLine) % kLine);
  char* last_line = std::max(first_line, end - at(end) % kLine);
  std::memset(begin, 0, size_t(first_line - begin));
  const __m128i zeros = _mm_setzero_si128();
  for (char* line = first_line; line < last_line; line += kLine) {
    auto* p = reinterpret_cast<__m128i*>(line);
    _mm_stream_si128(p, zeros);
    _mm_stream_si128(p + 1, zeros);
    _mm_stream_si128(p + 2, zeros);
    _mm_stream_si128(p + 3, zeros);
  }
  _mm_sfence();
  std::memset(last_line, 0, size_t(end - last_line));
#else
  std::memset(begin, 0, size_t(end - begin));
#endif
}

}  // namespace

void zero_bytes(CpuContext& cx, void* dst, size_t bytes) {
  const bool streamed = bytes >= kStreamingBytes;
  auto clear = [streamed](char* from, char* to) {
    if (streamed) {
      stream_zeros(from, to);
    } else if (to > from) {  // memset is not given a null pointer, even for 0 bytes
      std::memset(from, 0, size_t(to - from));
    }
  };
  char* begin = static_cast<char*>(dst);
  if (bytes < kParallelBytes || cx.threads <= 1) {
    clear(begin, begin + bytes);
    return;
  }
  const int slices = cx.threads;
  const size_t per_slice = (bytes / slices + kLine - 1) / kLine * kLine;  // whole lines a slice
#pragma omp parallel for schedule(static) num_threads(cx.threads)
  for (int s = 0; s < slices; s++) {
    const size_t from = std::min(bytes, per_slice * size_t(s));
    const size_t to = std::min(bytes, from + per_slice);
    if (to > from) clear(begin + from, begin + to);
  }
}

}  // namespace collage::cpu
