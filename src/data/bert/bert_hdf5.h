#pragma once
// One BERT pretraining HDF5 file, as NVIDIA DeepLearningExamples' create_pretraining_data.py
// writes it (and the AWS `bert_pretrain_wikicorpus_tokenized_hdf5_seqlen{128,512}` shards):
//
//   dataset                shape   content (DLE's dtype)
//   input_ids              [N, S]  [CLS] A [SEP] B [SEP] after masking, 0-padded    (int32)
//   input_mask             [N, S]  1 for real tokens, 0 for padding                 (int8)
//   segment_ids            [N, S]  0 for [CLS] A [SEP], 1 for B [SEP], 0 padding     (int8)
//   masked_lm_positions    [N, P]  positions of the masked tokens, then 0-padded    (int32)
//   masked_lm_ids          [N, P]  the original ids at those positions, 0-padded    (int32)
//   next_sentence_labels   [N]     1: B is a random segment, 0: B follows A         (int8)
//
// S = seq_len (128 or 512), P = max_predictions (20 or 80), N differs per file. A sample's
// labels end at the first position equal to 0: position 0 is [CLS], never masked, so 0 is
// the padding (DLE's run_pretraining.py reads it so). Written by h5py, usually gzip-compressed
// in h5py-chosen chunks: the reader never assumes a chunk shape or a byte order, and reads any
// integer width (int8 .. int64, signed or not), which libhdf5 converts to int32 as it reads.
//
// Checks, and when they run:
//   before open: libhdf5 opens the file in a separate probe process first, which turns its
//   crashes, gigabyte allocations and hangs on damaged metadata into errors (hdf5_probe.h).
//   at open (metadata only: nothing of the data is read, whatever the file's size; 2-6 ms for
//   the 64 MB shard measured below): all six datasets present and integer-typed, of 1, 2, 4 or
//   8 bytes; ranks 2,2,2,2,2,1; the three [N, S] agree on S, the two [N, P] on P, all six on N;
//   1 <= P <= S <= kMaxSeqLen; chunks of at most kMaxChunkBytes, filtered only by gzip,
//   shuffle or fletcher32 (what h5py writes); compact and contiguous storage of the size
//   the shape needs, within the file (hdf5_storage_check.h says why).
//   on every block of rows read: each stored chunk decodes to a whole chunk (hdf5_storage_check.h).
//   on every row handed out (not at open): input_ids and masked_lm_ids in [0, vocab_size);
//   input_mask, segment_ids and next_sentence_labels in {0, 1}; masked_lm_positions in
//   [0, S); and, when its block is read, no stored value outside int32.
//   check_all_rows() reads the whole file to check every row up front (`collage inspect --check`).
// Errors name the file, the dataset and, for values, the row and column.
//
// Reading rows. Rows are read in blocks of whole chunk row bands (one contiguous hyperslab per
// dataset, libhdf5 converting to int32 as it reads) and kept decoded; beyond `cache_bytes` the
// least recently used block is dropped. Why not one hyperslab per row: h5py chunks a [N, 128]
// int32 dataset as [3125, 4] (columns split), so one row touches 32 gzip chunks. Measured on a
// 200k-row seq-128 shard as h5py writes it (64 MB, gzip 4), reading it all in random order by
// 32-row batches on one core of the development machine: one hyperslab per row, 3.4 ms a row
// with libhdf5's 1 MB chunk cache and 0.25 ms with a cache holding the whole file; row blocks,
// 9 us a row (1.8 s for the shard, 1.2 s of it at the first batch, which touches every block),
// 360 MB resident. Opening reads nothing, and a file read at one row reads one block (12500
// rows for that shard, 21 MB). A shard whose decoded size, N * (3S + 2P + 1) * 4 bytes, exceeds
// `cache_bytes` is re-read block by block in random order: keep the bound above the shard.
//
// Not thread-safe: one BertHdf5File is read by one thread at a time.
#include <array>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace collage {

// One training sequence.
struct BertSample {
  std::vector<int32_t> input_ids;    // (S)
  std::vector<int32_t> input_mask;   // (S)
  std::vector<int32_t> segment_ids;  // (S)
  // The labelled positions and their original ids, cut at the first 0 position: (count).
  std::vector<int32_t> masked_positions;
  std::vector<int32_t> masked_ids;
  int32_t next_sentence_label = 0;
};

// Rows of one or more files, flat and row-major, ready for a model's batch.
struct BertBatch {
  int64_t size = 0;  // B rows
  int seq_len = 0;
  int max_predictions = 0;
  std::vector<int32_t> input_ids;    // (B, S)
  std::vector<int32_t> input_mask;   // (B, S)
  std::vector<int32_t> segment_ids;  // (B, S)
  // (B, P): row b's labels are the first masked_counts[b] entries; the rest are set to 0,
  // even where the file holds something after the first 0 position.
  std::vector<int32_t> masked_positions;
  std::vector<int32_t> masked_ids;
  std::vector<int32_t> masked_counts;         // (B) labels per row, <= P
  std::vector<int32_t> next_sentence_labels;  // (B)

  // Empties the batch for rows of shape (seq_len, max_predictions).
  void reset(int seq_len, int max_predictions);
  // Row b as a BertSample.
  BertSample sample(int64_t b) const;
};

// What `collage inspect` prints about one dataset of the file.
struct BertHdf5DatasetInfo {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;    // "int32", "uint16", "int32 (big-endian)", ...
  std::string storage;  // "contiguous", "chunked [4096, 128] gzip", ...
};

// Whether BertHdf5File first opens the file in a probe process (hdf5_probe.h): always, unless
// the caller has just probed it (BertShardSet probes all its shards in one process) or is the
// probe.
enum class Hdf5Probe { kRun, kAlreadyRun };

class BertHdf5File {
 public:
  // The six dataset names, in the order of datasets().
  static const char* const kDatasetNames[6];
  // vocab_size when no vocabulary is known (`collage inspect` without --vocab-file): ids are
  // then only checked to be >= 0.
  static constexpr int64_t kUnknownVocab = std::numeric_limits<int32_t>::max();
  // Default bound of the decoded rows one open file keeps (int32, all six datasets).
  static constexpr int64_t kDefaultCacheBytes = int64_t{2} << 30;
  // The longest sequence a file may declare (S): 2048 times BERT's 512, so that one row,
  // decoded, stays in the megabytes whatever a damaged header claims.
  static constexpr int64_t kMaxSeqLen = int64_t{1} << 20;
  // The most one row block may take decoded; fewer rows than the chunks suggest when rows are
  // long (a seq-512 file's 65536-row blocks take 445 MB, under it).
  static constexpr int64_t kMaxBlockBytes = int64_t{512} << 20;
  // The largest chunk a dataset may declare (h5py's are at most 1 MB): libhdf5 allocates one
  // chunk's decoded size to read it.
  static constexpr int64_t kMaxChunkBytes = int64_t{256} << 20;

  // Opens `path` and checks its metadata (see the top of this file); throws collage::Error
  // naming the file and dataset. vocab_size bounds input_ids and masked_lm_ids.
  // cache_bytes bounds the decoded row blocks kept while the file is open (at least one block
  // is kept, whatever the bound). libhdf5 opens the file in a probe process first
  // (hdf5_probe.h), unless `probe` says that has been done.
  BertHdf5File(std::string path, int64_t vocab_size, int64_t cache_bytes = kDefaultCacheBytes,
               Hdf5Probe probe = Hdf5Probe::kRun);
  ~BertHdf5File();
  BertHdf5File(BertHdf5File&& other) noexcept;
  BertHdf5File& operator=(BertHdf5File&& other) noexcept;
  BertHdf5File(const BertHdf5File&) = delete;
  BertHdf5File& operator=(const BertHdf5File&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return num_rows_; }                // N
  int seq_len() const { return seq_len_; }                  // S
  int max_predictions() const { return max_predictions_; }  // P
  int64_t vocab_size() const { return vocab_size_; }
  std::vector<BertHdf5DatasetInfo> datasets() const;

  // Row `row` (0 <= row < size()), checked.
  BertSample get(int64_t row);
  // Appends rows[0..k) to `batch` in the order given (repeats allowed), each row checked. The
  // batch must have been reset() to this file's (S, P).
  void append_rows(std::span<const int64_t> rows, BertBatch& batch);
  // Reads and checks every row, rows_per_read at a time (bounded memory).
  void check_all_rows(int64_t rows_per_read = 4096);

 private:
  struct Handles;  // libhdf5 ids, so that hdf5.h stays out of this header
  void plan_row_blocks(int64_t cache_bytes);
  int64_t row_width() const;  // int32 values of one row over the six datasets: 3S + 2P + 1
  int dataset_width(int d) const;
  void read_block(int64_t first, int64_t count, std::array<std::vector<int32_t>, 6>& out);
  void check_row(int64_t row, const int32_t* const (&values)[6]) const;
  std::string path_;
  int64_t vocab_size_ = 0;
  int64_t num_rows_ = 0;
  int seq_len_ = 0;
  int max_predictions_ = 0;
  Handles* h_ = nullptr;
};

// True when `path` names a BERT HDF5 file by its extension (.hdf5 or .h5).
bool has_hdf5_extension(const std::string& path);

}  // namespace collage
