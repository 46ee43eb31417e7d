#pragma once
// A directory of BERT pretraining HDF5 shards (bert_hdf5.h), the order training visits their
// samples in, and the reader a data-parallel rank draws its micro-batches from.
//
// Order. Samples form an endless stream of epochs. In epoch e the shards are visited in a
// permuted order and, inside each shard, the rows in a permuted order (the DLE recipe shuffles
// the files, then the samples within a file); every permutation is numpy's legacy
// RandomState(stream_seed(seed, e, stream)).permutation(n), with stream 0 for the shards and
// 1 + f for the rows of shard f (f = index in name order), and
//   stream_seed(seed, e, s) = low 32 bits of m(m(m(seed) ^ e) ^ s), m = splitmix64,
// so scripts/reference/make_bert_hdf5_fixtures.py recomputes it independently. The order does
// not depend on the number of ranks or the batch size.
//
// Ranks. Global micro-batches are consecutive runs of micro_batch_size * dp_size samples of
// the stream; data-parallel rank r reads the slice [r * micro_batch_size, (r+1) *
// micro_batch_size) of each (as Megatron's sampler does, src/data/megatron/pretraining_sampler.h),
// so the ranks' slices are disjoint and together are what one process reads. A micro-batch may
// cross shards and epochs.
//
// Memory. The set opens every shard once at construction to read its shape (metadata only)
// and closes it, after one probe process has opened them all (hdf5_probe.h). A reader keeps one
// shard open at a time and reads the row blocks its rows fall in (bert_hdf5.h, "Reading rows"); as
// rows are shuffled within the shard, that is soon every block, so a rank holds one shard decoded,
// N * (3S + 2P + 1) * 4 bytes, and decodes each shard once per epoch (DLE's readers load whole
// files too).
//
// Position. The next global micro-batch starts at (epoch, sample_in_epoch); a reader built at
// a saved position continues exactly as the uninterrupted reader would, also mid-shard.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/bert/bert_hdf5.h"

namespace collage {

class BertShardSet {
 public:
  // `path` is one .hdf5/.h5 file or a directory; in a directory, the regular files whose name
  // matches `name_pattern` (fnmatch(3), e.g. "*_training_*.hdf5"; empty: every *.hdf5 and
  // *.h5), sorted by name as bytes. Every shard is opened and checked (BertHdf5File), and all
  // must share S and P. Throws collage::Error naming the path and the problem.
  BertShardSet(const std::string& path, int64_t vocab_size, const std::string& name_pattern = "");

  const std::string& path() const { return path_; }
  int64_t vocab_size() const { return vocab_size_; }
  int num_files() const { return static_cast<int>(files_.size()); }
  const std::string& file(int f) const { return files_[f]; }
  int64_t file_samples(int f) const { return file_samples_[f]; }
  int64_t num_samples() const { return num_samples_; }  // per epoch, all shards
  int seq_len() const { return seq_len_; }
  int max_predictions() const { return max_predictions_; }

  // Shard f, opened. The set probed every shard when it was built (hdf5_probe.h); a shard whose
  // device, inode, size and modification time are still those it had then is not probed again.
  BertHdf5File open(int f) const;
  // Global sample i of name order (shard 0's rows, then shard 1's, ...), for `collage inspect`.
  std::pair<int, int64_t> locate_in_name_order(int64_t i) const;

 private:
  std::string path_;
  int64_t vocab_size_;
  std::vector<std::string> files_;
  std::vector<int64_t> file_samples_;
  std::vector<std::array<int64_t, 4>> file_identity_;  // (F) when probed: dev, ino, size, mtime
  int64_t num_samples_ = 0;
  int seq_len_ = 0;
  int max_predictions_ = 0;
};

// The seed of one permutation of the order above.
uint32_t bert_stream_seed(uint64_t seed, int64_t epoch, uint64_t stream);

// Where the next global micro-batch starts.
struct BertDataPosition {
  int64_t epoch = 0;
  int64_t sample_in_epoch = 0;
  bool operator==(const BertDataPosition&) const = default;
};

// Which (shard, row) is sample k of epoch e. Keeps the permutations of the last epoch and the
// last shards asked for, so walking the stream costs O(1) per sample after each shard's
// O(rows) shuffle.
class BertSampleOrder {
 public:
  // Only the shard sizes are needed; sizes[f] may be 0.
  BertSampleOrder(std::vector<int64_t> shard_sizes, uint64_t seed);

  struct Location {
    int shard;
    int64_t row;
  };
  Location locate(int64_t epoch, int64_t sample_in_epoch);
  int64_t samples_per_epoch() const { return samples_per_epoch_; }

 private:
  std::vector<int64_t> sizes_;
  uint64_t seed_;
  int64_t samples_per_epoch_ = 0;
  int64_t cached_epoch_ = -1;
  std::vector<int> shard_order_;      // (F) shards in visiting order
  std::vector<int64_t> shard_start_;  // (F+1) first sample of each visited shard in the epoch
  struct Rows {
    int64_t epoch = -1;
    int shard = -1;
    std::vector<int64_t> order;  // permuted rows
  };
  Rows rows_[2];  // the last two shards (a micro-batch crossing a boundary touches both)
  int next_rows_slot_ = 0;
};

// One data-parallel rank's reader over a shard set.
class BertShardReader {
 public:
  BertShardReader(std::shared_ptr<const BertShardSet> shards, uint64_t seed,
                  int64_t micro_batch_size, int dp_rank, int dp_size, BertDataPosition start = {});

  // This rank's micro_batch_size samples of the next global micro-batch, in stream order;
  // then advances the position by micro_batch_size * dp_size. `rows`, when given, receives
  // each row's place in the stream (dynamic masking keys its random numbers by it).
  void next(BertBatch& batch, std::vector<BertDataPosition>* rows = nullptr);
  BertDataPosition position() const { return position_; }
  // Continues from `position` (the open shard stays open: seeking back to the start of the
  // validation set does not decode its shard again).
  void seek(BertDataPosition position) { position_ = position; }
  int64_t samples_per_epoch() const { return order_.samples_per_epoch(); }
  // The shard currently open (-1: none yet), for tests of "one shard at a time".
  int open_shard() const { return open_shard_; }
  int64_t shards_opened() const { return shards_opened_; }

 private:
  std::shared_ptr<const BertShardSet> shards_;
  BertSampleOrder order_;
  int64_t micro_batch_size_;
  int dp_rank_;
  int dp_size_;
  BertDataPosition position_;
  std::optional<BertHdf5File> file_;
  int open_shard_ = -1;
  int64_t shards_opened_ = 0;
};

}  // namespace collage
