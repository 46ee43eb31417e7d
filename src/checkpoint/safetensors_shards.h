#pragma once
// A model's weights split over several safetensors files, laid out as Hugging Face lays them
// out (huggingface_hub's split_torch_state_dict_into_shards, used by transformers'
// save_pretrained(max_shard_size=...)), so that its loaders read the directory as they read
// their own:
//
//   one shard:   DIR/model.safetensors                     (no index)
//   k shards:    DIR/model-00001-of-0000k.safetensors ... DIR/model-0000k-of-0000k.safetensors
//                DIR/model.safetensors.index.json:
//                  {"metadata": {"total_size": <sum of every tensor's bytes>},
//                   "weight_map": {"<tensor name>": "<its shard's file name>", ...}}
//                (keys sorted, two-space indent, ASCII only, a final newline, as transformers
//                writes it with json.dumps(indent=2, sort_keys=True))
//
// Every shard is a whole safetensors file (safetensors.h) with the same "__metadata__"
// (Hugging Face puts {"format": "pt"} in each).
//
// The plan (plan_safetensors_shards) walks the tensors in order with a current shard:
//   - a tensor of more than max bytes gets a shard of its own, placed in the list at once, while
//     the current shard stays open: tensors before and after it may share a shard after it;
//   - otherwise, if adding it would take the current shard past max bytes, the current shard is
//     closed and a new one started (a shard of exactly max bytes is allowed);
//   - the last shard is closed at the end.
// Sizes count tensor bytes only, not headers, so a file is a little larger than its shard size.
// E.g. max 10 and tensors of 4, 4, 4, 10, 3, 12, 5 bytes: [4, 4], [4], [10], [12], [3, 5] (the
// 12 is its own shard, written before the shard of the 3 that precedes it). No tensors at all:
// one empty model.safetensors (Hugging Face writes nothing).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"

namespace collage {

inline constexpr const char* kSafetensorsSingleFile = "model.safetensors";
inline constexpr const char* kSafetensorsIndexFile = "model.safetensors.index.json";
inline constexpr uint64_t kDefaultMaxShardBytes = 5'000'000'000;  // Hugging Face's "5GB"

// "--max-shard-size" as Hugging Face writes it: integer bytes ("1000000"), or a number and a unit,
// KB, MB, GB, TB (powers of 10) or KiB, MiB, GiB, TiB (powers of 2), case-insensitive, blanks
// around and between allowed ("5GB", "1.5 gib", "500mb"). A fraction is computed exactly and
// rounded down to whole bytes. Error naming the value for anything else, zero, or a size past
// 2^64 - 1.
uint64_t parse_max_shard_size(const std::string& text);

struct SafetensorsShardPlan {
  std::vector<std::vector<size_t>> shards;  // each shard's tensor indices, in the order given
  std::vector<size_t> shard_of;             // (tensors) the shard each tensor is in
  uint64_t total_size = 0;                  // the sum of the tensors' bytes
};

// Hugging Face's plan (above) for tensors of `tensor_bytes[i]` bytes, in that order; for no
// tensors, one empty shard.
SafetensorsShardPlan plan_safetensors_shards(const std::vector<uint64_t>& tensor_bytes,
                                             uint64_t max_shard_bytes);

// The file name of shard `shard` (0-based) of `count`: model.safetensors when count is 1,
// else model-00001-of-00003.safetensors (5 digits each, counting from 1).
std::string safetensors_shard_file(size_t shard, size_t count);

// The text of model.safetensors.index.json for `tensors` laid out by `plan` (see above).
std::string safetensors_index_json(const std::vector<SafetensorsTensorInfo>& tensors,
                                   const SafetensorsShardPlan& plan);

// Writes the tensors into the existing directory `dir` as planned for `max_shard_bytes`: every
// shard with `metadata` as its "__metadata__", then, for more than one shard, the index; each
// file fsynced (not the directory: callers write into a staging directory and rename it).
// `bytes_of(i)` is asked for tensor i once each, in order 0, 1, ..., and written at once; a
// shard's file stays open until its last tensor is written (with the plan above, at most two
// at a time: the current shard and a tensor's own). Names, dtypes and shapes are checked
// before any file is created; a callback returning the wrong number of bytes is an Error naming
// the tensor and the file. Returns the names of the files written (relative to `dir`): the
// shards in order, then the index.
std::vector<std::string> write_safetensors_shards(
    const std::string& dir, const std::vector<SafetensorsTensorInfo>& tensors,
    const std::map<std::string, std::string>& metadata, uint64_t max_shard_bytes,
    const SafetensorsBytesFn& bytes_of);

}  // namespace collage
