#pragma once
// A model's safetensors, one file or Hugging Face's shards with their index
// (safetensors_shards.h), opened lazily: the constructor reads and checks every file's header
// and the index, none of the tensors' data; read(name) then reads just that tensor's bytes
// (pread), so a caller that converts a tensor at a time holds one tensor, not the model.
//
// What is opened, for a path that is
//   - a directory: DIR/model.safetensors.index.json if it is there, else DIR/model.safetensors
//     (both there is an Error: Hugging Face's loaders take model.safetensors, an index would say
//     otherwise, and which one the writer meant is unknown);
//   - a file named *.index.json: that index, its shards beside it;
//   - any other file: that safetensors file.
// With an index, its "weight_map" ({tensor name: shard file name}) is checked against the
// shards' headers both ways: every tensor it names is in the header of the shard it names,
// and every tensor of a shard is in it, mapped to that shard; no tensor is in two shards.
// The index's "metadata" (total_size) is not checked: writers differ in what they count.
//
// Every shard stays open (one descriptor each) until the reader is destroyed, so read() reads
// the files that were checked. read() may be called from several threads at once.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/posix_file.h"
#include "checkpoint/safetensors.h"

namespace collage {

class SafetensorsReader {
 public:
  // Opens `path` (above) and checks every header and the index, against the files' sizes
  // (a truncated shard is refused here, not when read); Error naming the file and the tensor
  // or key.
  explicit SafetensorsReader(const std::string& path);

  // Every tensor: name, dtype, shape, the file that holds it and where. Ordered by file (the
  // files in files() order), then by offset in the file.
  const std::vector<SafetensorsStoredTensor>& tensors() const { return tensors_; }
  // The "__metadata__" of the first file (each shard written by safetensors_shards.h, or by
  // Hugging Face, carries the same).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The paths of the safetensors files read: the index's shards sorted by name, or one file.
  const std::vector<std::string>& files() const { return files_; }
  // The path of the index; empty for a single file.
  const std::string& index() const { return index_; }

  bool contains(const std::string& name) const { return by_name_.count(name) != 0; }
  // The tensor named `name`; Error naming it and the path opened if there is none.
  const SafetensorsStoredTensor& tensor(const std::string& name) const;
  // The bytes of tensor `name` (numel · dtype size, little-endian, row-major), read from its
  // file now.
  std::vector<uint8_t> read(const std::string& name) const;

 private:
  void open_index(const std::string& index);
  void open_single(const std::string& file);
  // Opens `file`, reads its header, appends its tensors; returns the header's tensor names.
  std::vector<std::string> add_file(const std::string& file);

  std::string path_;  // as given, for errors
  std::string index_;
  std::vector<std::string> files_;
  std::vector<FileDescriptor> descriptors_;       // (files)
  std::vector<SafetensorsStoredTensor> tensors_;  // (tensors)
  std::vector<size_t> file_of_;                   // (tensors) index into files_
  std::map<std::string, size_t> by_name_;         // name -> index into tensors_
  std::map<std::string, std::string> metadata_;
};

}  // namespace collage
