// BertHdf5File: the format and the checks are described in bert_hdf5.h.
#include "data/bert/bert_hdf5.h"

#include <hdf5.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "core/error.h"
#include "data/bert/hdf5_probe.h"
#include "data/bert/hdf5_storage_check.h"

namespace collage {

const char* const BertHdf5File::kDatasetNames[6] = {"input_ids",     "input_mask",
                                                    "segment_ids",   "masked_lm_positions",
                                                    "masked_lm_ids", "next_sentence_labels"};

namespace {

enum Dataset : int {
  kInputIds,
  kInputMask,
  kSegmentIds,
  kMaskedPositions,
  kMaskedIds,
  kNextSentenceLabels,
  kNumDatasets
};
constexpr int kExpectedRank[kNumDatasets] = {2, 2, 2, 2, 2, 1};

// libhdf5 prints its error stack to stderr by default; collage reports errors itself (with
// the innermost HDF5 message, below). The setting is per thread in a thread-safe libhdf5.
void silence_hdf5_errors() {
  thread_local bool silenced = false;
  if (!silenced) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    silenced = true;
  }
}

// The descriptions on the current HDF5 error stack, outermost first, joined: "unable to open
// file: file signature not found".
std::string hdf5_error_text() {
  std::vector<std::string> messages;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned, const H5E_error2_t* e, void* out) -> herr_t {
        auto& m = *static_cast<std::vector<std::string>*>(out);
        if (e->desc && *e->desc && (m.empty() || m.back() != e->desc)) m.emplace_back(e->desc);
        return 0;
      },
      &messages);
  H5Eclear2(H5E_DEFAULT);
  if (messages.empty()) return "libhdf5 gave no reason";
  if (messages.size() == 1) return messages[0];
  return messages.front() + ": " + messages.back();
}

std::string type_description(hid_t type) {
  const size_t bits = H5Tget_size(type) * 8;
  switch (H5Tget_class(type)) {
    case H5T_INTEGER: {
      std::string s = fmt::format("{}int{}", H5Tget_sign(type) == H5T_SGN_NONE ? "u" : "", bits);
      if (H5Tget_order(type) == H5T_ORDER_BE) s += " (big-endian)";
      return s;
    }
    case H5T_FLOAT:
      return fmt::format("float{}", bits);
    case H5T_STRING:
      return "string";
    case H5T_COMPOUND:
      return "compound";
    case H5T_ENUM:
      return "enum";
    default:
      return fmt::format("type class {}", static_cast<int>(H5Tget_class(type)));
  }
}

std::string filter_description(H5Z_filter_t id, const unsigned* cd, size_t cd_count,
                               const char* name) {
  switch (id) {
    case H5Z_FILTER_DEFLATE:
      return cd_count > 0 ? fmt::format("gzip {}", cd[0]) : "gzip";
    case H5Z_FILTER_SHUFFLE:
      return "shuffle";
    case H5Z_FILTER_FLETCHER32:
      return "fletcher32";
    case H5Z_FILTER_SZIP:
      return "szip";
    default:
      return fmt::format("filter {} '{}'", static_cast<int>(id), name);
  }
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// Filled by libhdf5 when a stored value does not fit the int32 it is read into (libhdf5 would
// otherwise clamp it silently). The source type is the dataset's, recorded before the read.
struct ConversionState {
  size_t src_size = 0;
  bool src_signed = true;
  bool overflow = false;
  std::string value;  // the first value that did not fit
};

H5T_conv_ret_t on_conversion_exception(H5T_conv_except_t, hid_t, hid_t, void* src, void*,
                                       void* user) {
  auto* s = static_cast<ConversionState*>(user);
  if (!s->overflow && src != nullptr && s->src_size <= 8) {
    // libhdf5 hands the source value over in native (little-endian) byte order.
    uint64_t bits = 0;
    std::memcpy(&bits, src, s->src_size);
    const int shift = static_cast<int>(64 - 8 * s->src_size);
    if (s->src_signed && shift > 0)
      s->value = fmt::format("{}", static_cast<int64_t>(bits << shift) >> shift);
    else if (s->src_signed)
      s->value = fmt::format("{}", static_cast<int64_t>(bits));
    else
      s->value = fmt::format("{}", bits);
  }
  s->overflow = true;
  return H5T_CONV_UNHANDLED;  // let libhdf5 clamp; the read then fails on `overflow`
}

}  // namespace

struct BertHdf5File::Handles {
  hid_t file = H5I_INVALID_HID;
  std::array<hid_t, kNumDatasets> dataset;
  std::array<hid_t, kNumDatasets> type;  // the stored type of each dataset
  std::array<std::vector<int64_t>, kNumDatasets> shape;
  hid_t transfer = H5I_INVALID_HID;  // dataset transfer properties: the overflow callback
  uint64_t file_bytes = 0;
  ConversionState conversion;
  // Decoded row blocks, least recently used evicted first (see "Reading rows" in the header).
  struct RowBlock {
    int64_t first_row = 0;
    int64_t rows = 0;
    uint64_t last_use = 0;
    std::array<std::vector<int32_t>, kNumDatasets> data;  // (rows, width of dataset d)
  };
  std::vector<RowBlock> blocks;
  int64_t block_rows = 0;
  size_t max_blocks = 1;
  uint64_t uses = 0;

  Handles() {
    dataset.fill(H5I_INVALID_HID);
    type.fill(H5I_INVALID_HID);
  }
  ~Handles() {
    for (hid_t t : type)
      if (t >= 0) H5Tclose(t);
    for (hid_t d : dataset)
      if (d >= 0) H5Dclose(d);
    if (transfer >= 0) H5Pclose(transfer);
    if (file >= 0) H5Fclose(file);
  }
};

void BertBatch::reset(int s, int p) {
  size = 0;
  seq_len = s;
  max_predictions = p;
  for (auto* v : {&input_ids, &input_mask, &segment_ids, &masked_positions, &masked_ids,
                  &masked_counts, &next_sentence_labels})
    v->clear();
}

BertSample BertBatch::sample(int64_t b) const {
  COLLAGE_CHECK(b >= 0 && b < size, "BertBatch::sample({}): the batch has {} rows", b, size);
  const auto row = [&](const std::vector<int32_t>& v, int width, int count) {
    return std::vector<int32_t>(v.begin() + b * width, v.begin() + b * width + count);
  };
  BertSample s;
  s.input_ids = row(input_ids, seq_len, seq_len);
  s.input_mask = row(input_mask, seq_len, seq_len);
  s.segment_ids = row(segment_ids, seq_len, seq_len);
  s.masked_positions = row(masked_positions, max_predictions, masked_counts[b]);
  s.masked_ids = row(masked_ids, max_predictions, masked_counts[b]);
  s.next_sentence_label = next_sentence_labels[b];
  return s;
}

BertHdf5File::BertHdf5File(std::string path, int64_t vocab_size, int64_t cache_bytes,
                           Hdf5Probe probe)
    : path_(std::move(path)), vocab_size_(vocab_size), h_(new Handles) {
  try {
    silence_hdf5_errors();
    COLLAGE_CHECK(vocab_size_ >= 1 && vocab_size_ <= kUnknownVocab,
                  "{}: vocab_size {} must be in [1, {}]", path_, vocab_size_, kUnknownVocab);
    std::error_code ec;
    if (!std::filesystem::exists(path_, ec)) fail("{}: no such file", path_);
    if (std::filesystem::is_directory(path_, ec))
      fail("{}: is a directory, not a BERT HDF5 file", path_);
    h_->file_bytes = std::filesystem::file_size(path_, ec);
    if (probe == Hdf5Probe::kRun) probe_bert_hdf5_files({path_});
    h_->file = H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (h_->file < 0) fail("{}: cannot open as an HDF5 file ({})", path_, hdf5_error_text());

    for (int d = 0; d < kNumDatasets; ++d) {
      const char* name = kDatasetNames[d];
      const htri_t exists = H5Lexists(h_->file, name, H5P_DEFAULT);
      if (exists < 0)  // a damaged root group, not a missing dataset
        fail("{}: cannot look up dataset '{}' ({})", path_, name, hdf5_error_text());
      if (exists == 0)
        fail(
            "{}: dataset '{}' is missing (a BERT pretraining file holds input_ids, input_mask, "
            "segment_ids, masked_lm_positions, masked_lm_ids and next_sentence_labels)",
            path_, name);
      h_->dataset[d] = H5Dopen2(h_->file, name, H5P_DEFAULT);
      if (h_->dataset[d] < 0)
        fail("{}: '{}' is not a readable dataset ({})", path_, name, hdf5_error_text());
      h_->type[d] = H5Dget_type(h_->dataset[d]);
      if (H5Tget_class(h_->type[d]) != H5T_INTEGER)
        fail("{}: dataset '{}' holds {} values; expected integers", path_, name,
             type_description(h_->type[d]));
      // HDF5 lets an integer have any byte size; libhdf5 would convert a 1.4 GB "integer"
      // (one found by fuzzing) through a buffer of that size.
      if (const size_t bytes = H5Tget_size(h_->type[d]);
          bytes != 1 && bytes != 2 && bytes != 4 && bytes != 8)
        fail("{}: dataset '{}' holds {}-byte integers; expected 1, 2, 4 or 8 bytes", path_, name,
             bytes);

      const hid_t space = H5Dget_space(h_->dataset[d]);
      const int rank = H5Sget_simple_extent_ndims(space);
      std::vector<hsize_t> dims(std::max(rank, 0));
      if (rank > 0) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
      H5Sclose(space);
      if (rank != kExpectedRank[d])
        fail("{}: dataset '{}' has rank {}; expected {} ({})", path_, name, rank, kExpectedRank[d],
             kExpectedRank[d] == 1 ? "[N]" : "[N, S] or [N, P]");
      h_->shape[d].assign(dims.begin(), dims.end());

      // A compression filter this libhdf5 lacks (h5py's lzf, a blosc plugin) would fail every
      // read with a vague message: say so now.
      const hid_t create = H5Dget_create_plist(h_->dataset[d]);
      for (int f = 0, n = H5Pget_nfilters(create); f < n; ++f) {
        unsigned flags = 0, cd[8];
        size_t cd_count = 8;
        char filter_name[64] = "";
        const H5Z_filter_t id = H5Pget_filter2(create, static_cast<unsigned>(f), &flags, &cd_count,
                                               cd, sizeof filter_name, filter_name, nullptr);
        if (H5Zfilter_avail(id) <= 0) {
          H5Pclose(create);
          fail("{}: dataset '{}' is compressed with {}, which this libhdf5 cannot decode", path_,
               name, filter_description(id, cd, cd_count, filter_name));
        }
        if (!is_sizable_filter(id)) {
          H5Pclose(create);
          fail(
              "{}: dataset '{}' is filtered with {}; collage reads chunks filtered by gzip, "
              "shuffle and fletcher32 only (h5py's)",
              path_, name, filter_description(id, cd, cd_count, filter_name));
        }
      }
      if (const std::string damage = check_storage_size(h_->dataset[d], h_->file_bytes);
          !damage.empty()) {
        H5Pclose(create);
        fail("{}: dataset '{}': {} (a damaged file)", path_, name, damage);
      }
      hsize_t chunk[2] = {1, 1};
      if (H5Pget_layout(create) == H5D_CHUNKED && H5Pget_chunk(create, 2, chunk) >= 1) {
        const double chunk_bytes =
            double(chunk[0]) * double(chunk[1]) * double(H5Tget_size(h_->type[d]));
        if (chunk_bytes > double(kMaxChunkBytes)) {
          H5Pclose(create);
          fail(
              "{}: dataset '{}' is stored in chunks of {:.0f} bytes; collage reads chunks of "
              "at most {}",
              path_, name, chunk_bytes, kMaxChunkBytes);
        }
      }
      H5Pclose(create);
    }

    const auto& ids = h_->shape[kInputIds];
    for (int d : {kInputMask, kSegmentIds})
      if (h_->shape[d][1] != ids[1])
        fail(
            "{}: dataset '{}' has shape {} but input_ids has {}: input_ids, input_mask and "
            "segment_ids must have the same sequence length S",
            path_, kDatasetNames[d], shape_text(h_->shape[d]), shape_text(ids));
    const auto& positions = h_->shape[kMaskedPositions];
    if (h_->shape[kMaskedIds][1] != positions[1])
      fail(
          "{}: dataset 'masked_lm_ids' has shape {} but masked_lm_positions has {}: both must "
          "have the same max_predictions P",
          path_, shape_text(h_->shape[kMaskedIds]), shape_text(positions));
    for (int d = 1; d < kNumDatasets; ++d)
      if (h_->shape[d][0] != ids[0])
        fail("{}: dataset '{}' has shape {} but input_ids has {}: all six need the same N rows",
             path_, kDatasetNames[d], shape_text(h_->shape[d]), shape_text(ids));
    if (ids[0] < 0)  // a dimension beyond 2^63 read as int64
      fail("{}: dataset 'input_ids' has shape {}: too many rows", path_, shape_text(ids));
    if (positions[1] < 1 || positions[1] > ids[1] || ids[1] > kMaxSeqLen)
      fail("{}: sequence length S = {} and max_predictions P = {}: need 1 <= P <= S <= {}", path_,
           ids[1], positions[1], kMaxSeqLen);
    num_rows_ = ids[0];
    seq_len_ = static_cast<int>(ids[1]);
    max_predictions_ = static_cast<int>(positions[1]);

    plan_row_blocks(cache_bytes);
    h_->transfer = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_type_conv_cb(h_->transfer, on_conversion_exception, &h_->conversion);
  } catch (...) {
    delete h_;
    throw;
  }
}

// Row blocks span the largest chunk's rows (h5py's [3125, 4] / [6250, 8] / [12500] chunks of a
// seq-128 shard give 12500-row blocks of 21 MB), so a block's read decompresses each chunk of
// its row band once; at least 256 rows, at most 65536, and no more than kMaxBlockBytes.
void BertHdf5File::plan_row_blocks(int64_t cache_bytes) {
  COLLAGE_CHECK(cache_bytes >= 0, "{}: row cache of {} bytes", path_, cache_bytes);
  int64_t rows = 256;
  for (int d = 0; d < kNumDatasets; ++d) {
    const hid_t create = H5Dget_create_plist(h_->dataset[d]);
    hsize_t chunk[2] = {0, 0};
    if (H5Pget_layout(create) == H5D_CHUNKED && H5Pget_chunk(create, 2, chunk) >= 1)
      rows = std::max(rows, static_cast<int64_t>(chunk[0]));
    H5Pclose(create);
  }
  const int64_t row_bytes = row_width() * int64_t(sizeof(int32_t));
  h_->block_rows =
      std::max<int64_t>(1, std::min({rows, int64_t{65536}, kMaxBlockBytes / row_bytes}));
  const int64_t block_bytes = h_->block_rows * row_bytes;
  h_->max_blocks = static_cast<size_t>(std::max<int64_t>(1, cache_bytes / block_bytes));
}

int64_t BertHdf5File::row_width() const { return 3 * int64_t{seq_len_} + 2 * max_predictions_ + 1; }

BertHdf5File::~BertHdf5File() { delete h_; }

BertHdf5File::BertHdf5File(BertHdf5File&& other) noexcept
    : path_(std::move(other.path_)),
      vocab_size_(other.vocab_size_),
      num_rows_(other.num_rows_),
      seq_len_(other.seq_len_),
      max_predictions_(other.max_predictions_),
      h_(other.h_) {
  other.h_ = nullptr;
}

BertHdf5File& BertHdf5File::operator=(BertHdf5File&& other) noexcept {
  if (this != &other) {
    delete h_;
    path_ = std::move(other.path_);
    vocab_size_ = other.vocab_size_;
    num_rows_ = other.num_rows_;
    seq_len_ = other.seq_len_;
    max_predictions_ = other.max_predictions_;
    h_ = other.h_;
    other.h_ = nullptr;
  }
  return *this;
}

std::vector<BertHdf5DatasetInfo> BertHdf5File::datasets() const {
  COLLAGE_CHECK(h_ != nullptr, "{}: datasets() of a moved-from BertHdf5File", path_);
  std::vector<BertHdf5DatasetInfo> out;
  for (int d = 0; d < kNumDatasets; ++d) {
    BertHdf5DatasetInfo info{kDatasetNames[d], h_->shape[d], type_description(h_->type[d]), ""};
    const hid_t create = H5Dget_create_plist(h_->dataset[d]);
    switch (H5Pget_layout(create)) {
      case H5D_CONTIGUOUS:
        info.storage = "contiguous";
        break;
      case H5D_COMPACT:
        info.storage = "compact";
        break;
      case H5D_CHUNKED: {
        hsize_t chunk[2] = {0, 0};
        const int rank = H5Pget_chunk(create, 2, chunk);
        info.storage = fmt::format(
            "chunked {}", shape_text(std::vector<int64_t>(chunk, chunk + std::max(rank, 0))));
        break;
      }
      default:
        info.storage = "other layout";
    }
    for (int f = 0, n = H5Pget_nfilters(create); f < n; ++f) {
      unsigned flags = 0, cd[8];
      size_t cd_count = 8;
      char name[64] = "";
      const H5Z_filter_t id = H5Pget_filter2(create, static_cast<unsigned>(f), &flags, &cd_count,
                                             cd, sizeof name, name, nullptr);
      info.storage += " " + filter_description(id, cd, cd_count, name);
    }
    H5Pclose(create);
    out.push_back(std::move(info));
  }
  return out;
}

BertSample BertHdf5File::get(int64_t row) {
  BertBatch batch;
  batch.reset(seq_len_, max_predictions_);
  append_rows(std::span<const int64_t>(&row, 1), batch);
  return batch.sample(0);
}

// Reads rows [first, first + count) of every dataset, converted to int32: one contiguous
// hyperslab per dataset.
void BertHdf5File::read_block(int64_t first, int64_t count,
                              std::array<std::vector<int32_t>, 6>& out) {
  silence_hdf5_errors();
  for (int d = 0; d < kNumDatasets; ++d) {
    const hsize_t width = static_cast<hsize_t>(dataset_width(d));
    out[d].resize(static_cast<size_t>(count) * width);
    const hid_t file_space = H5Dget_space(h_->dataset[d]);
    const hsize_t start[2] = {static_cast<hsize_t>(first), 0};
    const hsize_t dims[2] = {static_cast<hsize_t>(count), width};
    H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, nullptr, dims, nullptr);
    const hid_t memory_space = H5Screate_simple(kExpectedRank[d], dims, nullptr);
    ConversionState& conversion = h_->conversion;
    conversion = ConversionState{H5Tget_size(h_->type[d]), H5Tget_sign(h_->type[d]) != H5T_SGN_NONE,
                                 false, ""};
    if (const std::string damage =
            check_chunk_lengths(h_->dataset[d], uint64_t(first), uint64_t(count), h_->file_bytes);
        !damage.empty()) {
      H5Sclose(memory_space);
      H5Sclose(file_space);
      fail("{}: dataset '{}': {} (a damaged file)", path_, kDatasetNames[d], damage);
    }
    const herr_t status = H5Dread(h_->dataset[d], H5T_NATIVE_INT32, memory_space, file_space,
                                  h_->transfer, out[d].data());
    H5Sclose(memory_space);
    H5Sclose(file_space);
    if (status < 0)
      fail("{}: dataset '{}': reading rows {} .. {} failed ({})", path_, kDatasetNames[d], first,
           first + count - 1, hdf5_error_text());
    if (conversion.overflow)
      fail("{}: dataset '{}': value {} ({}) in rows {} .. {} does not fit int32", path_,
           kDatasetNames[d], conversion.value, type_description(h_->type[d]), first,
           first + count - 1);
  }
}

int BertHdf5File::dataset_width(int d) const {
  if (d == kNextSentenceLabels) return 1;
  return d == kMaskedPositions || d == kMaskedIds ? max_predictions_ : seq_len_;
}

void BertHdf5File::check_row(int64_t row, const int32_t* const (&values)[6]) const {
  const auto bad = [&](int d, int column, const std::string& why) {
    if (d == kNextSentenceLabels)
      fail("{}: dataset '{}': row {}: {}", path_, kDatasetNames[d], row, why);
    fail("{}: dataset '{}': row {}, column {}: {}", path_, kDatasetNames[d], row, column, why);
  };
  const auto check_ids = [&](int d) {
    for (int c = 0; c < dataset_width(d); ++c) {
      const int32_t x = values[d][c];
      if (x < 0 || x >= vocab_size_)
        bad(d, c,
            vocab_size_ == kUnknownVocab
                ? fmt::format("id {} is negative", x)
                : fmt::format("id {} is outside the vocabulary [0, {})", x, vocab_size_));
    }
  };
  const auto check_bits = [&](int d, const char* what) {
    for (int c = 0; c < dataset_width(d); ++c)
      if (values[d][c] != 0 && values[d][c] != 1)
        bad(d, c, fmt::format("{} {} is not 0 or 1", what, values[d][c]));
  };
  check_ids(kInputIds);
  check_bits(kInputMask, "value");
  check_bits(kSegmentIds, "value");
  for (int c = 0; c < max_predictions_; ++c) {
    const int32_t x = values[kMaskedPositions][c];
    if (x < 0 || x >= seq_len_)
      bad(kMaskedPositions, c, fmt::format("position {} is outside [0, {}) (S)", x, seq_len_));
  }
  check_ids(kMaskedIds);
  check_bits(kNextSentenceLabels, "label");
}

void BertHdf5File::append_rows(std::span<const int64_t> rows, BertBatch& batch) {
  COLLAGE_CHECK(h_ != nullptr, "{}: read from a moved-from BertHdf5File", path_);
  COLLAGE_CHECK(batch.seq_len == seq_len_ && batch.max_predictions == max_predictions_,
                "{}: rows of S = {}, P = {} cannot go into a batch of S = {}, P = {}", path_,
                seq_len_, max_predictions_, batch.seq_len, batch.max_predictions);
  for (int64_t r : rows)
    if (r < 0 || r >= num_rows_) fail("{}: row {} is outside [0, {})", path_, r, num_rows_);
  const size_t s = seq_len_, p = max_predictions_;
  for (int64_t r : rows) {
    // The block holding row r: cached, or read into the least recently used slot.
    auto& blocks = h_->blocks;
    const int64_t first = r - r % h_->block_rows;
    auto it = std::find_if(blocks.begin(), blocks.end(),
                           [&](const Handles::RowBlock& b) { return b.first_row == first; });
    if (it == blocks.end()) {
      if (blocks.size() < h_->max_blocks) {
        it = blocks.emplace(blocks.end());
      } else {
        it = std::min_element(blocks.begin(), blocks.end(),
                              [](const auto& a, const auto& b) { return a.last_use < b.last_use; });
      }
      it->first_row = -1;  // until the read below succeeds
      const int64_t count = std::min(h_->block_rows, num_rows_ - first);
      read_block(first, count, it->data);
      it->first_row = first;
      it->rows = count;
    }
    it->last_use = ++h_->uses;

    const size_t i = static_cast<size_t>(r - first);
    const int32_t* const values[6] = {
        it->data[kInputIds].data() + i * s,   it->data[kInputMask].data() + i * s,
        it->data[kSegmentIds].data() + i * s, it->data[kMaskedPositions].data() + i * p,
        it->data[kMaskedIds].data() + i * p,  it->data[kNextSentenceLabels].data() + i};
    check_row(r, values);
    batch.input_ids.insert(batch.input_ids.end(), values[kInputIds], values[kInputIds] + s);
    batch.input_mask.insert(batch.input_mask.end(), values[kInputMask], values[kInputMask] + s);
    batch.segment_ids.insert(batch.segment_ids.end(), values[kSegmentIds], values[kSegmentIds] + s);
    // Labels end at the first position equal to 0 ([CLS] is never masked); the rest is zeroed.
    const int32_t* pos = values[kMaskedPositions];
    const int32_t* ids = values[kMaskedIds];
    const auto count = static_cast<size_t>(std::find(pos, pos + p, 0) - pos);
    for (size_t c = 0; c < p; ++c) {
      batch.masked_positions.push_back(c < count ? pos[c] : 0);
      batch.masked_ids.push_back(c < count ? ids[c] : 0);
    }
    batch.masked_counts.push_back(static_cast<int32_t>(count));
    batch.next_sentence_labels.push_back(values[kNextSentenceLabels][0]);
    ++batch.size;
  }
}

void BertHdf5File::check_all_rows(int64_t rows_per_read) {
  COLLAGE_CHECK(rows_per_read >= 1, "check_all_rows: rows_per_read {} < 1", rows_per_read);
  BertBatch batch;
  std::vector<int64_t> rows;
  for (int64_t begin = 0; begin < num_rows_; begin += rows_per_read) {
    rows.resize(std::min(rows_per_read, num_rows_ - begin));
    std::iota(rows.begin(), rows.end(), begin);
    batch.reset(seq_len_, max_predictions_);
    append_rows(rows, batch);
  }
}

bool has_hdf5_extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext == ".hdf5" || ext == ".h5";
}

}  // namespace collage
