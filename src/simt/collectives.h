#pragma once
// The kernel-facing thread operations: __syncthreads, the warp collectives (__syncwarp,
// __shfl_*_sync, __ballot_sync, __any_sync, __all_sync) and dynamic shared memory. They call
// into the scheduler of the running block (scheduler.cpp), which gives them the semantics of
// a GPU with independent thread scheduling (Volta and later):
//  - __syncthreads releases when every thread of the block that has not exited has arrived;
//  - a warp collective is a rendezvous: the calling lane deposits (mask, value) and waits until
//    every lane named in `mask` has arrived at a warp collective with the same mask, then each
//    reads what it asked for; lanes outside the mask are not involved and run on.
// Kernel bugs stop the process with "simt: ..." on stderr, naming the kernel, block and thread
// (as a GPU fault would): a mask that names an exited lane (or a lane past the end of the
// block; stricter than CUDA for __syncwarp, which tolerates exited lanes, but such a mask is a
// bug for every collective that exchanges values), a lane calling with a mask that does not
// contain itself, lanes of one rendezvous at different collectives, and any state where every
// live thread waits and no barrier can be released (a deadlock).
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace simt {
// The running block's dynamic shared memory (the launch's shared_bytes), 16-byte aligned.
// Its bytes start as a poison pattern in every block; reading past shared_bytes faults.
void* dynamic_shared_memory();

namespace detail {
enum class WarpOp : uint8_t { sync, shfl_idx, shfl_xor, shfl_down, shfl_up, vote, exchange };
// The completion of a warp exchange (warp_exchange below): gets the 32 lanes' data pointers.
using WarpExchange = void (*)(void* const lanes[32]);
// The rendezvous of the running lane (see above). For shuffles, `value` is this lane's
// deposit and the result is the value read from the source lane (all-ones bits when that lane
// is not in the mask: undefined on a GPU); for votes, `value` is the predicate and the result
// the ballot of the mask's lanes.
uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int arg, int width,
                         WarpExchange exchange = nullptr);
void sync_threads();
// A kernel bug that the emulator sees (e.g. a misaligned ldmatrix row): prints "simt: ...",
// naming the kernel, block and thread, and aborts.
[[noreturn]] void kernel_fault(const char* format, ...) __attribute__((format(printf, 1, 2)));

// A rendezvous of the whole warp (mask 0xffffffff, every lane must exist and not have exited)
// that runs `complete` ONCE, in the last lane to arrive, with each lane's `lane_data` pointer
// (lanes[i] is lane i's), before any lane goes on. Each lane's data stays alive meanwhile (it
// waits), so `complete` may read every lane's inputs and write every lane's outputs: the
// warp-wide matrix instructions (warp_matrix.h) are built on it. All lanes must pass the same
// `complete`.
inline void warp_exchange(void* lane_data, WarpExchange complete) {
  warp_collective(WarpOp::exchange, 0xffffffffu, reinterpret_cast<uintptr_t>(lane_data), 0, 32,
                  complete);
}

template <typename T>
inline T shuffle(WarpOp op, unsigned mask, T value, int arg, int width) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8,
                "warp shuffles move trivially copyable values of at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, static_cast<const void*>(&value), sizeof(T));
  bits = warp_collective(op, mask, bits, arg, width);
  T result = value;
  std::memcpy(static_cast<void*>(&result), &bits, sizeof(T));
  return result;
}
}  // namespace detail
}  // namespace simt

inline void __syncthreads() { simt::detail::sync_threads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  simt::detail::warp_collective(simt::detail::WarpOp::sync, mask, 0, 0, 32);
}
template <typename T>
inline T __shfl_sync(unsigned mask, T value, int source_lane, int width = 32) {
  return simt::detail::shuffle(simt::detail::WarpOp::shfl_idx, mask, value, source_lane, width);
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  return simt::detail::shuffle(simt::detail::WarpOp::shfl_xor, mask, value, lane_mask, width);
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32) {
  return simt::detail::shuffle(simt::detail::WarpOp::shfl_down, mask, value, int(delta), width);
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = 32) {
  return simt::detail::shuffle(simt::detail::WarpOp::shfl_up, mask, value, int(delta), width);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return unsigned(
      simt::detail::warp_collective(simt::detail::WarpOp::vote, mask, predicate != 0, 0, 32));
}
inline int __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }
inline int __all_sync(unsigned mask, int predicate) {
  return __ballot_sync(mask, predicate) == mask;
}
