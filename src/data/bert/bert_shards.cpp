// BertShardSet, BertSampleOrder, BertShardReader: the order and the reading rules are
// described in bert_shards.h.
#include "data/bert/bert_shards.h"

#include <fnmatch.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "core/error.h"
#include "core/splitmix64.h"
#include "data/bert/hdf5_probe.h"
#include "data/megatron/numpy_random.h"

namespace collage {

namespace {

// numpy's RandomState(seed).permutation(n).
template <typename T>
std::vector<T> numpy_permutation(uint32_t seed, int64_t n) {
  std::vector<T> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), T{0});
  NumpyRandomState(seed).shuffle(std::span<T>(p));
  return p;
}

}  // namespace

uint32_t bert_stream_seed(uint64_t seed, int64_t epoch, uint64_t stream) {
  return static_cast<uint32_t>(
      splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(epoch)) ^ stream));
}

// ---------------------------------------------------------------------------------------
// BertShardSet

namespace {

// What tells a file that was probed from one that may have been replaced since: device, inode,
// size and modification time in nanoseconds (all -1 when it cannot be read).
std::array<int64_t, 4> file_identity(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return {-1, -1, -1, -1};
  return {static_cast<int64_t>(st.st_dev), static_cast<int64_t>(st.st_ino),
          static_cast<int64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

}  // namespace

BertShardSet::BertShardSet(const std::string& path, int64_t vocab_size,
                           const std::string& name_pattern)
    : path_(path), vocab_size_(vocab_size) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("{}: no such file or directory", path);
  if (fs::is_directory(path, ec)) {
    for (const auto& entry : fs::directory_iterator(path)) {
      if (!entry.is_regular_file()) continue;
      const std::string name = entry.path().filename().string();
      const bool match = name_pattern.empty() ? has_hdf5_extension(name)
                                              : fnmatch(name_pattern.c_str(), name.c_str(), 0) == 0;
      if (match) files_.push_back(entry.path().string());
    }
    std::sort(files_.begin(), files_.end());
    if (files_.empty())
      fail("{}: no files named {} in this directory", path,
           name_pattern.empty() ? "*.hdf5 or *.h5" : "'" + name_pattern + "'");
  } else {
    files_.push_back(path);
  }

  for (const std::string& file : files_) file_identity_.push_back(file_identity(file));
  probe_bert_hdf5_files(files_);  // one probe process for all (hdf5_probe.h)
  for (size_t f = 0; f < files_.size(); ++f) {
    const BertHdf5File file(files_[f], vocab_size, BertHdf5File::kDefaultCacheBytes,
                            Hdf5Probe::kAlreadyRun);
    if (f == 0) {
      seq_len_ = file.seq_len();
      max_predictions_ = file.max_predictions();
    } else if (file.seq_len() != seq_len_ || file.max_predictions() != max_predictions_) {
      fail("{}: S = {}, P = {}, but {} has S = {}, P = {}: the shards of one set share both",
           files_[f], file.seq_len(), file.max_predictions(), files_[0], seq_len_,
           max_predictions_);
    }
    file_samples_.push_back(file.size());
    num_samples_ += file.size();
  }
  if (num_samples_ == 0) fail("{}: the {} file(s) hold no samples", path, files_.size());
}

BertHdf5File BertShardSet::open(int f) const {
  const bool unchanged = file_identity(files_[f]) == file_identity_[f];
  return BertHdf5File(files_[f], vocab_size_, BertHdf5File::kDefaultCacheBytes,
                      unchanged ? Hdf5Probe::kAlreadyRun : Hdf5Probe::kRun);
}

std::pair<int, int64_t> BertShardSet::locate_in_name_order(int64_t i) const {
  COLLAGE_CHECK(i >= 0 && i < num_samples_, "{}: sample {} is outside [0, {})", path_, i,
                num_samples_);
  int f = 0;
  while (i >= file_samples_[f]) i -= file_samples_[f++];
  return {f, i};
}

// ---------------------------------------------------------------------------------------
// BertSampleOrder

BertSampleOrder::BertSampleOrder(std::vector<int64_t> shard_sizes, uint64_t seed)
    : sizes_(std::move(shard_sizes)), seed_(seed) {
  COLLAGE_CHECK(!sizes_.empty(), "BertSampleOrder: no shards");
  for (int64_t n : sizes_) {
    COLLAGE_CHECK(n >= 0, "BertSampleOrder: shard size {} < 0", n);
    samples_per_epoch_ += n;
  }
  COLLAGE_CHECK(samples_per_epoch_ > 0, "BertSampleOrder: the shards hold no samples");
}

BertSampleOrder::Location BertSampleOrder::locate(int64_t epoch, int64_t sample) {
  COLLAGE_CHECK(epoch >= 0 && sample >= 0 && sample < samples_per_epoch_,
                "BertSampleOrder: sample {} of epoch {} is outside [0, {})", sample, epoch,
                samples_per_epoch_);
  if (epoch != cached_epoch_) {
    shard_order_ = numpy_permutation<int>(bert_stream_seed(seed_, epoch, 0),
                                          static_cast<int64_t>(sizes_.size()));
    shard_start_.assign(1, 0);
    for (int f : shard_order_) shard_start_.push_back(shard_start_.back() + sizes_[f]);
    cached_epoch_ = epoch;
  }
  // The last visited shard whose first sample is <= sample (skipping empty shards).
  const size_t k =
      std::upper_bound(shard_start_.begin(), shard_start_.end(), sample) - shard_start_.begin() - 1;
  const int shard = shard_order_[k];
  const int64_t in_shard = sample - shard_start_[k];
  for (const Rows& r : rows_)
    if (r.epoch == epoch && r.shard == shard) return {shard, r.order[in_shard]};
  Rows& r = rows_[next_rows_slot_];
  next_rows_slot_ ^= 1;
  r.epoch = epoch;
  r.shard = shard;
  r.order = numpy_permutation<int64_t>(bert_stream_seed(seed_, epoch, 1 + uint64_t(shard)),
                                       sizes_[shard]);
  return {shard, r.order[in_shard]};
}

// ---------------------------------------------------------------------------------------
// BertShardReader

namespace {
std::vector<int64_t> sizes_of(const BertShardSet& s) {
  std::vector<int64_t> sizes;
  for (int f = 0; f < s.num_files(); ++f) sizes.push_back(s.file_samples(f));
  return sizes;
}
}  // namespace

BertShardReader::BertShardReader(std::shared_ptr<const BertShardSet> shards, uint64_t seed,
                                 int64_t micro_batch_size, int dp_rank, int dp_size,
                                 BertDataPosition start)
    : shards_(std::move(shards)),
      order_(sizes_of(*shards_), seed),
      micro_batch_size_(micro_batch_size),
      dp_rank_(dp_rank),
      dp_size_(dp_size),
      position_(start) {
  COLLAGE_CHECK(micro_batch_size >= 1, "BertShardReader: micro_batch_size {} < 1",
                micro_batch_size);
  COLLAGE_CHECK(dp_size >= 1 && dp_rank >= 0 && dp_rank < dp_size,
                "BertShardReader: data-parallel rank {} of {}", dp_rank, dp_size);
  COLLAGE_CHECK(start.epoch >= 0 && start.sample_in_epoch >= 0 &&
                    start.sample_in_epoch < order_.samples_per_epoch(),
                "{}: position (epoch {}, sample {}) is outside an epoch of {} samples",
                shards_->path(), start.epoch, start.sample_in_epoch, order_.samples_per_epoch());
}

void BertShardReader::next(BertBatch& batch, std::vector<BertDataPosition>* rows_out) {
  const int64_t per_epoch = order_.samples_per_epoch();
  batch.reset(shards_->seq_len(), shards_->max_predictions());
  // This rank's samples, as (shard, row) in stream order; then read run by run of one shard.
  std::vector<BertSampleOrder::Location> where;
  if (rows_out) rows_out->clear();
  for (int64_t j = 0; j < micro_batch_size_; ++j) {
    const int64_t offset = position_.sample_in_epoch + dp_rank_ * micro_batch_size_ + j;
    const BertDataPosition row{position_.epoch + offset / per_epoch, offset % per_epoch};
    where.push_back(order_.locate(row.epoch, row.sample_in_epoch));
    if (rows_out) rows_out->push_back(row);
  }
  std::vector<int64_t> rows;
  for (size_t i = 0; i < where.size();) {
    size_t j = i;
    rows.clear();
    for (; j < where.size() && where[j].shard == where[i].shard; ++j) rows.push_back(where[j].row);
    if (open_shard_ != where[i].shard) {
      file_.reset();  // one shard open at a time
      file_.emplace(shards_->open(where[i].shard));
      open_shard_ = where[i].shard;
      ++shards_opened_;
    }
    file_->append_rows(rows, batch);
    i = j;
  }
  const int64_t next = position_.sample_in_epoch + micro_batch_size_ * dp_size_;
  position_.epoch += next / per_epoch;
  position_.sample_in_epoch = next % per_epoch;
}

}  // namespace collage
