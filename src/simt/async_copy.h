#pragma once
// cp.async, the Ampere/Hopper copy from global to shared memory that bypasses registers (through
// kernels/async_copy.cuh, which is inline PTX under nvcc and these functions under g++). A
// thread issues copies, closes them into a group with commit, and waits until at most N of its
// groups are still in flight; only then may the block read the data (after a __syncthreads for
// other threads' copies). The emulator does a copy at the latest moment the PTX ISA allows,
// when its thread waits for its group: a kernel that reads shared memory before waiting sees
// the old bytes here too, where a GPU might happen to have finished the copy already.
#include <cstdint>

namespace simt {

// cp.async.cg.shared.global [destination], [source], bytes, source_bytes: source_bytes of
// `source` (0 .. bytes) and zeros for the rest. bytes is 16; both addresses 16-byte aligned.
void copy_async(void* destination, const void* source, uint32_t bytes, uint32_t source_bytes);
// cp.async.commit_group: the copies issued since the last commit form one group.
void copy_async_commit();
// cp.async.wait_group pending: completes all but the `pending` most recent groups.
void copy_async_wait(uint32_t pending);

}  // namespace simt
