// check_storage_size and check_chunk_lengths: see hdf5_storage_check.h.
#include "data/bert/hdf5_storage_check.h"

#include <fmt/format.h>
#include <zlib.h>

#include <vector>

namespace collage {

bool is_sizable_filter(H5Z_filter_t id) {
  return id == H5Z_FILTER_DEFLATE || id == H5Z_FILTER_SHUFFLE || id == H5Z_FILTER_FLETCHER32;
}

namespace {

// The length of what a gzip (zlib) stream inflates to, counted up to limit + 1; "" or what is
// wrong with the stream in `problem`.
uint64_t inflated_length(const unsigned char* data, uint64_t bytes, uint64_t limit,
                         std::vector<unsigned char>& scratch, std::string& problem) {
  scratch.resize(limit + 1);
  z_stream z{};
  if (inflateInit(&z) != Z_OK) {
    problem = "zlib could not start";
    return 0;
  }
  z.next_in = const_cast<unsigned char*>(data);
  z.avail_in = static_cast<uInt>(bytes);
  z.next_out = scratch.data();
  z.avail_out = static_cast<uInt>(scratch.size());
  const int status = inflate(&z, Z_FINISH);
  const uint64_t length = z.total_out;
  if (status != Z_STREAM_END && z.avail_out != 0)
    problem = fmt::format("its gzip data is damaged (zlib: {})", z.msg ? z.msg : "truncated");
  inflateEnd(&z);
  return length;
}

}  // namespace

std::string check_storage_size(hid_t dataset, uint64_t file_bytes) {
  const hid_t create = H5Dget_create_plist(dataset);
  const H5D_layout_t layout = H5Pget_layout(create);
  H5Pclose(create);
  if (layout != H5D_COMPACT && layout != H5D_CONTIGUOUS) return "";
  const hid_t type = H5Dget_type(dataset);
  const uint64_t type_bytes = H5Tget_size(type);
  H5Tclose(type);
  const hid_t space = H5Dget_space(dataset);
  const double elements = double(H5Sget_simple_extent_npoints(space));
  H5Sclose(space);
  const double expected = elements * double(type_bytes);
  const uint64_t stored = H5Dget_storage_size(dataset);
  const char* what = layout == H5D_COMPACT ? "compact" : "contiguous";
  if (layout == H5D_CONTIGUOUS) {
    const haddr_t offset = H5Dget_offset(dataset);
    if (offset == HADDR_UNDEF) return "";  // never written: libhdf5 reads the fill value
    if (double(offset) + expected > double(file_bytes))
      return fmt::format(
          "its {:.0f} bytes of contiguous data at offset {} run past the end of "
          "the file ({} bytes)",
          expected, offset, file_bytes);
  }
  if (double(stored) != expected)
    return fmt::format("its {} storage records {} bytes for {:.0f} bytes of values", what, stored,
                       expected);
  return "";
}

std::string check_chunk_lengths(hid_t dataset, uint64_t first_row, uint64_t rows,
                                uint64_t file_bytes) {
  const hid_t create = H5Dget_create_plist(dataset);
  std::vector<H5Z_filter_t> filters;
  hsize_t chunk[2] = {1, 1};
  int rank = 0;
  if (H5Pget_layout(create) == H5D_CHUNKED) {
    rank = H5Pget_chunk(create, 2, chunk);
    for (int f = 0, n = H5Pget_nfilters(create); f < n; ++f) {
      unsigned flags = 0;
      size_t cd_count = 0;
      filters.push_back(
          H5Pget_filter2(create, unsigned(f), &flags, &cd_count, nullptr, 0, nullptr, nullptr));
    }
  }
  H5Pclose(create);
  if (rank < 1) return "";  // contiguous or compact: libhdf5 sizes those itself
  if (chunk[0] == 0 || (rank == 2 && chunk[1] == 0)) return "its chunks have no rows or columns";

  const hid_t type = H5Dget_type(dataset);
  const uint64_t type_bytes = H5Tget_size(type);
  H5Tclose(type);
  hsize_t dims[2] = {0, 1};
  const hid_t space = H5Dget_space(dataset);
  H5Sget_simple_extent_dims(space, dims, nullptr);
  H5Sclose(space);
  const uint64_t columns = rank == 2 ? dims[1] : 1, column_step = rank == 2 ? chunk[1] : 1;
  const uint64_t chunk_bytes = chunk[0] * (rank == 2 ? chunk[1] : 1) * type_bytes;

  std::vector<unsigned char> stored, inflated;
  for (uint64_t row = first_row / chunk[0] * chunk[0]; row < first_row + rows; row += chunk[0])
    for (uint64_t column = 0; column < columns; column += column_step) {
      hsize_t offset[2] = {row, column};
      const std::string where = rank == 2 ? fmt::format("the chunk at [{}, {}]", row, column)
                                          : fmt::format("the chunk at [{}]", row);
      // Two of libhdf5's ways to find a chunk: a walk over the chunk index (info_by_coord) and
      // the lookup every read uses (storage_size; H5Dread_chunk reads that many bytes). In a
      // damaged file they can disagree: an index that records a chunk twice (found by fuzzing:
      // an 18-byte record walked, a 294-byte one read, into a buffer sized by the first), or
      // an unfiltered chunk recorded short, which the lookup reads at its full size. The
      // buffer below is sized by the lookup, and any disagreement is refused.
      unsigned walked_mask = 0;
      haddr_t address = HADDR_UNDEF;
      hsize_t walked_bytes = 0, bytes = 0;
      if (H5Dget_chunk_info_by_coord(dataset, offset, &walked_mask, &address, &walked_bytes) < 0 ||
          H5Dget_chunk_storage_size(dataset, offset, &bytes) < 0)
        return where + " cannot be located";
      if (address == HADDR_UNDEF && bytes == 0) continue;  // never written: the fill value
      if (bytes != walked_bytes)
        return fmt::format("{} is recorded as {} bytes in the chunk index but read as {}", where,
                           walked_bytes, bytes);
      // A gzip stream is at most a little longer than what it holds: anything longer is damage
      // (and would not fit zlib's 32-bit input count).
      if (bytes > file_bytes || bytes > chunk_bytes + chunk_bytes / 8 + 1024)
        return fmt::format("{} claims {} bytes, for a chunk of {} in a file of {}", where, bytes,
                           chunk_bytes, file_bytes);
      stored.resize(bytes);
      uint32_t mask = 0;  // the filters this chunk skipped, as the read found it
      if (H5Dread_chunk(dataset, H5P_DEFAULT, offset, &mask, stored.data()) < 0)
        return where + " cannot be read";
      // Undo the filters last-applied first, as libhdf5 will, counting the length only.
      const unsigned char* data = stored.data();
      uint64_t length = bytes;
      for (size_t f = filters.size(); f-- > 0;) {
        if (f < 32 && (mask >> f & 1u)) continue;  // this chunk skipped filter f
        if (filters[f] == H5Z_FILTER_FLETCHER32) {
          if (length < 4) return fmt::format("{} is too short for its checksum", where);
          length -= 4;
        } else if (filters[f] == H5Z_FILTER_DEFLATE) {
          std::string problem;
          length = inflated_length(data, length, chunk_bytes, inflated, problem);
          if (!problem.empty()) return where + ": " + problem;
          data = inflated.data();
        }
        // H5Z_FILTER_SHUFFLE keeps the length; other filters were refused at open.
      }
      if (length > chunk_bytes)
        return fmt::format("{} decodes to more than the {} bytes of a chunk", where, chunk_bytes);
      if (length < chunk_bytes)
        return fmt::format("{} decodes to {} bytes, not the {} of a chunk", where, length,
                           chunk_bytes);
    }
  return "";
}

}  // namespace collage
