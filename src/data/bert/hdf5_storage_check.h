#pragma once
// Guards in front of libhdf5's reading of a dataset's storage (docs/DATA.md §8): libhdf5 1.10
// trusts the sizes a file records for it, and copies past them when they are short.
//
// Compact and contiguous storage: the size recorded must be the dataset's (N rows of its type),
// and contiguous data must lie within the file; checked once, at open. Found by
// tests/fuzz/fuzz_bert_hdf5: a compact dataset of 5 int64 recording 0 bytes, from whose null
// buffer libhdf5 copied.
//
// Chunks:
// libhdf5 1.10 (Debian 12's) reads a chunk's stored bytes, decodes them through its filters and
// then copies a whole chunk out of the result without checking the length: a damaged chunk that
// is stored or decodes short makes it read past its buffer (two findings of
// tests/fuzz/fuzz_bert_hdf5: a gzip chunk inflating to 128 of its 640 bytes, an unfiltered
// chunk recorded as 23 of its 24). So before BertHdf5File reads rows, every stored chunk the
// read touches is decoded here just far enough to know its length, the way libhdf5 will decode
// it: the stored bytes, without fletcher32's 4-byte checksum, inflated by zlib for gzip,
// unchanged by shuffle, skipping each filter the chunk's filter mask skips. Any other filter
// is refused when the file is opened.
//
// The buffer for a chunk's stored bytes is sized by the same lookup libhdf5's read uses, and a
// chunk whose size the chunk index's walk and that lookup disagree on is refused (a finding: a
// heap overflow when the buffer was sized by the walk's record of a chunk recorded twice).
//
// The cost: each chunk is inflated twice, once here and once by libhdf5 (row blocks are
// cached, so a chunk is checked once per block read). Measured on a 200,000-row seq-128 h5py
// gzip shard: `collage inspect --check` 1.6-1.9 s of CPU with the check, 1.0-1.2 s without.
#include <hdf5.h>

#include <cstdint>
#include <string>

namespace collage {

// The filters a BERT file's chunks may pass through: what h5py writes (gzip, shuffle,
// fletcher32), each of which check_chunk_lengths knows how to size.
bool is_sizable_filter(H5Z_filter_t id);

// Checks the compact or contiguous storage of `dataset` against its size (nothing for chunked
// datasets). Returns "" or what is wrong.
std::string check_storage_size(hid_t dataset, uint64_t file_bytes);

// Checks the chunks of `dataset` that hold rows [first_row, first_row + rows). Returns "" when
// each decodes to exactly its chunk's size (and for contiguous or compact datasets, which have
// no chunks), else what is wrong with the first that does not.
// `file_bytes` bounds what a chunk may claim to store.
std::string check_chunk_lengths(hid_t dataset, uint64_t first_row, uint64_t rows,
                                uint64_t file_bytes);

}  // namespace collage
