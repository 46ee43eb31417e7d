#pragma once
// Training checkpoints: one self-checking file per saved step, written atomically.
//
// File `<dir>/step_<step, 8+ digits>.ckpt`, little-endian:
//
//   offset 0    12 B  magic "COLLAGE-CKPT"
//          12    4 B  u32 format version (1)
//          16    8 B  u64 H: bytes of the JSON metadata
//          24    8 B  u64 D: bytes of the tensor data section
//          32    H B  JSON: {"step": N, "meta": {caller's metadata},
//                            "tensors": [{"name", "dtype", "shape", "offset", "bytes"}, ...]}
//          A     D B  tensor data, A = 32 + H rounded up to 64; each tensor's raw elements at
//                     A + offset (offsets are multiples of 64, gaps are zero bytes)
//          A+D   4 B  u32 CRC-32C (Castagnoli) of every byte before it
//
// Saving writes `<path>.tmp`, fsyncs it, renames it into place and fsyncs the directory, so
// a crash leaves either the old set of checkpoints or the new one, never a half file under a
// checkpoint name. Then `<dir>/latest` (a text file holding the newest file name) is replaced
// the same way, and checkpoints beyond `keep` are deleted. One process writes a directory.
//
// A multi-rank run saves a set (docs/PARALLEL.md §5): each rank's shard is a file
// of this format in `<dir>/step_<step>.shards/`, and once every shard is on disk rank 0 writes
// `<dir>/step_<step>.ckpt` as the set's manifest: a checkpoint without tensors whose metadata
// lists the shard files ("shards": names relative to dir). A crash before the manifest leaves
// no step_<step>.ckpt, so the set is never resumed from; a manifest verifies only with every
// shard it lists, each of its step and of its save: the manifest and every shard carry the
// set's "save_id" (a random 64-bit number in hex, one per save), so a shard left by another
// save of the same step (a rank killed while a resumed run rewrote the step) or copied from
// another step never verifies with the manifest.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace collage {

struct CheckpointTensor {
  std::string name;            // unique in the checkpoint, e.g. "h.0.attn.qkv.weight"
  std::string dtype;           // "bf16" | "f32" | "i32" | "u8"
  std::vector<int64_t> shape;  // {} is a scalar
  std::vector<uint8_t> bytes;  // numel * dtype size raw little-endian elements
  uint64_t file_offset = 0;    // where its bytes start in the file (set when read)

  int64_t numel() const;
};

struct Checkpoint {
  int64_t step = 0;
  // The caller's metadata: consumed samples, data position, RNG states (as strings), the
  // resolved config YAML, strategy name, ... Stored and returned as is.
  nlohmann::json meta = nlohmann::json::object();
  std::vector<CheckpointTensor> tensors;
  std::string path;  // set by load_checkpoint(), for messages

  // The tensor called `name`; throws Error naming the checkpoint when there is none.
  const CheckpointTensor& tensor(const std::string& name) const;
};

// Writes `<dir>/step_<8-digit step>.ckpt` (creating dir), points `<dir>/latest` at it, then
// deletes all but the newest `keep` (>= 1) checkpoints up to this step, and leftover .tmp
// files of earlier steps. Checkpoints of later steps (left by a run this one was rolled back
// from) are kept, with a warning. Returns the path written.
std::string save_checkpoint(const std::string& dir, const Checkpoint& checkpoint, int keep);

// Writes one checkpoint file at `path` atomically (its directory created); no `latest`, no
// pruning: the shards of a set.
void write_checkpoint_file(const std::string& path, const Checkpoint& checkpoint);

// Reads and fully verifies a checkpoint: magic, version, sizes, directory, checksum. Any
// corruption or truncation throws Error naming the file. A manifest is returned as it is.
Checkpoint load_checkpoint(const std::string& path);

// The step, metadata and tensor directory of `path` (header checks only: no tensor data is
// read and the checksum is not verified), for learning what a checkpoint holds before loading.
Checkpoint read_checkpoint_header(const std::string& path);

// The bytes of `tensor` (from read_checkpoint_header(path)) read from the file alone, without
// the checksum: verify_checkpoint() first. For reading a large checkpoint a tensor at a time.
std::vector<uint8_t> read_checkpoint_tensor(const std::string& path,
                                            const CheckpointTensor& tensor);

// The shard files a manifest lists (empty for a single-file checkpoint).
std::vector<std::string> checkpoint_shard_paths(const Checkpoint& manifest);

// The checks of load_checkpoint() without keeping the tensor data in memory; for a manifest,
// of every shard it lists too, and that each belongs to the manifest's save.
void verify_checkpoint(const std::string& path);

// Throws Error naming `shard` unless it belongs to `manifest`'s set: the same step, and the
// same save_id when the manifest has one (sets written before save ids have none).
void check_shard_of_set(const Checkpoint& manifest, const Checkpoint& shard);

// step -> path of every `step_<digits>.ckpt` in `dir` (or, with `suffix` ".ckpt.tmp",
// leftovers of interrupted saves); empty when `dir` does not exist.
std::map<int64_t, std::string> list_checkpoints(const std::string& dir,
                                                const std::string& suffix = ".ckpt");

// Deletes every checkpoint of `dir` (files, set shards, leftovers of interrupted saves, `latest`).
void remove_checkpoints(const std::string& dir);

// What `--resume ARG` means:
//  - "latest": the newest checkpoint in `dir` that verifies: the one `<dir>/latest` names,
//    else (missing or corrupt, logged as a warning) the others from the highest step down.
//    *.tmp files are never considered. Throws Error when `dir` has no checkpoint, or none
//    verifies.
//  - a directory: "latest" within it.
//  - a file path: returned as is (load_checkpoint() verifies it); Error if it does not exist.
std::string resolve_resume(const std::string& arg, const std::string& dir);

// "step_00000042.ckpt"
std::string checkpoint_file_name(int64_t step);
// "step_00000042.shards"
std::string checkpoint_shard_directory_name(int64_t step);

// Bytes per element of a checkpoint dtype; throws Error for an unknown dtype.
size_t checkpoint_dtype_size(const std::string& dtype);

// CRC-32C (Castagnoli, reflected, init and final xor 0xffffffff), continuable:
// crc32c(b, nb, crc32c(a, na)) == crc32c(a followed by b).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

}  // namespace collage
