// write_bert_hdf5(): the layout is described in bert_hdf5_writer.h.
#include "data/bert/bert_hdf5_writer.h"

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"

namespace collage {
namespace {

constexpr unsigned kGzipLevel = 4;                 // h5py's compression='gzip' default
constexpr int64_t kChunkBytes = int64_t{1} << 20;  // of input_ids per chunk

// The innermost description on the HDF5 error stack (libhdf5's own printing is turned off).
std::string hdf5_reason() {
  std::string reason;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned, const H5E_error2_t* e, void* out) -> herr_t {
        auto& r = *static_cast<std::string*>(out);
        if (r.empty() && e->desc && *e->desc) r = e->desc;
        return 0;
      },
      &reason);
  H5Eclear2(H5E_DEFAULT);
  return reason.empty() ? "libhdf5 gave no reason" : reason;
}

// Closes an HDF5 id with its matching close function when it goes out of scope.
class Hid {
 public:
  using Closer = herr_t (*)(hid_t);
  Hid(hid_t id, Closer close) : id_(id), close_(close) {}
  ~Hid() {
    if (id_ >= 0) close_(id_);
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  hid_t get() const { return id_; }
  // Closes now, reporting failure (a file's close flushes it).
  bool close() {
    const herr_t status = id_ >= 0 ? close_(id_) : 0;
    id_ = H5I_INVALID_HID;
    return status >= 0;
  }

 private:
  hid_t id_;
  Closer close_;
};

// One dataset, [rows] or [rows, width], gzip-compressed in chunks of chunk_rows whole rows.
void write_dataset(hid_t file, const std::string& path, const char* name, hid_t file_type,
                   hid_t memory_type, const void* data, int64_t rows, int width,
                   int64_t chunk_rows) {
  const int rank = width > 0 ? 2 : 1;
  const hsize_t dims[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(width)};
  const hsize_t chunk[2] = {static_cast<hsize_t>(chunk_rows), static_cast<hsize_t>(width)};
  Hid space(H5Screate_simple(rank, dims, nullptr), H5Sclose);
  Hid create(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (space.get() < 0 || create.get() < 0 || H5Pset_chunk(create.get(), rank, chunk) < 0 ||
      H5Pset_deflate(create.get(), kGzipLevel) < 0 ||
      H5Pset_obj_track_times(create.get(), false) < 0)
    fail("{}: cannot set up dataset '{}' ({})", path, name, hdf5_reason());
  Hid dataset(
      H5Dcreate2(file, name, file_type, space.get(), H5P_DEFAULT, create.get(), H5P_DEFAULT),
      H5Dclose);
  if (dataset.get() < 0) fail("{}: cannot create dataset '{}' ({})", path, name, hdf5_reason());
  if (H5Dwrite(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    fail("{}: cannot write dataset '{}' ({})", path, name, hdf5_reason());
  if (!dataset.close()) fail("{}: cannot close dataset '{}' ({})", path, name, hdf5_reason());
}

// Removes the temporary file unless disarmed.
struct TemporaryFile {
  std::string path;
  bool keep = false;
  ~TemporaryFile() {
    if (!keep) std::remove(path.c_str());
  }
};

}  // namespace

void write_bert_hdf5(const std::string& path, const BertInstances& instances,
                     std::span<const int64_t> rows, int seq_len, int max_predictions) {
  const auto n = static_cast<int64_t>(rows.size());
  COLLAGE_CHECK(n > 0, "{}: no rows to write", path);
  COLLAGE_CHECK(seq_len >= 1 && max_predictions >= 1 && max_predictions <= seq_len,
                "{}: seq_len {} and max_predictions {}: need 1 <= max_predictions <= seq_len", path,
                seq_len, max_predictions);
  const int64_t s = seq_len, p = max_predictions;

  // (N, S), (N, P), (N): zero-filled, so the padding is already in place.
  std::vector<int32_t> input_ids(n * s, 0), positions(n * p, 0), ids(n * p, 0);
  std::vector<int8_t> input_mask(n * s, 0), segment_ids(n * s, 0), labels(n, 0);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t i = rows[r];
    COLLAGE_CHECK(i >= 0 && i < instances.size(), "{}: row {} names instance {} of {}", path, r, i,
                  instances.size());
    const auto tokens = instances.instance_tokens(i);
    const auto masked_positions = instances.instance_masked_positions(i);
    const auto masked_ids = instances.instance_masked_ids(i);
    const auto length = static_cast<int64_t>(tokens.size());
    COLLAGE_CHECK(length <= s && static_cast<int64_t>(masked_positions.size()) <= p,
                  "{}: instance {} has {} tokens and {} masked positions; the file holds {} and {}",
                  path, i, length, masked_positions.size(), s, p);
    std::copy(tokens.begin(), tokens.end(), input_ids.begin() + r * s);
    std::fill_n(input_mask.begin() + r * s, length, 1);
    const int64_t b_start = instances.b_starts[i];
    std::fill(segment_ids.begin() + r * s + b_start, segment_ids.begin() + r * s + length, 1);
    std::copy(masked_positions.begin(), masked_positions.end(), positions.begin() + r * p);
    std::copy(masked_ids.begin(), masked_ids.end(), ids.begin() + r * p);
    labels[r] = static_cast<int8_t>(instances.next_sentence_labels[i]);
  }

  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors are reported with hdf5_reason()
  COLLAGE_CHECK(H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0,
                "{}: this libhdf5 has no gzip (deflate) filter", path);

  const std::filesystem::path target(path);
  TemporaryFile temporary{
      (target.parent_path() / fmt::format(".{}.tmp-{}", target.filename().string(), getpid()))
          .string()};
  {
    Hid file(H5Fcreate(temporary.path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    if (file.get() < 0) fail("{}: cannot create ({})", temporary.path, hdf5_reason());
    const int64_t chunk_rows = std::clamp<int64_t>(kChunkBytes / (4 * s), 1, n);
    const hid_t f = file.get();
    const std::string& where = temporary.path;
    write_dataset(f, where, "input_ids", H5T_STD_I32LE, H5T_NATIVE_INT32, input_ids.data(), n,
                  seq_len, chunk_rows);
    write_dataset(f, where, "input_mask", H5T_STD_I8LE, H5T_NATIVE_INT8, input_mask.data(), n,
                  seq_len, chunk_rows);
    write_dataset(f, where, "segment_ids", H5T_STD_I8LE, H5T_NATIVE_INT8, segment_ids.data(), n,
                  seq_len, chunk_rows);
    write_dataset(f, where, "masked_lm_positions", H5T_STD_I32LE, H5T_NATIVE_INT32,
                  positions.data(), n, max_predictions, chunk_rows);
    write_dataset(f, where, "masked_lm_ids", H5T_STD_I32LE, H5T_NATIVE_INT32, ids.data(), n,
                  max_predictions, chunk_rows);
    write_dataset(f, where, "next_sentence_labels", H5T_STD_I8LE, H5T_NATIVE_INT8, labels.data(), n,
                  0, chunk_rows);
    if (!file.close()) fail("{}: cannot finish writing ({})", temporary.path, hdf5_reason());
  }
  if (std::rename(temporary.path.c_str(), path.c_str()) != 0)
    fail("{}: cannot rename {} to it ({})", path, temporary.path, std::strerror(errno));
  temporary.keep = true;
}

}  // namespace collage
