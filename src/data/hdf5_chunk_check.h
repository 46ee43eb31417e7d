#pragma once
// A guard in front of libhdf5's reading of filtered chunks (docs/DATA.md §8).
//
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
// The cost: each chunk is inflated twice, once here and once by libhdf5 (row blocks are
// cached, so a chunk is checked once per block read).
#include <hdf5.h>

#include <cstdint>
#include <string>

namespace collage {

// The filters a BERT file's chunks may pass through: what h5py writes (gzip, shuffle,
// fletcher32), each of which check_chunk_lengths knows how to size.
bool is_sizable_filter(H5Z_filter_t id);

// Checks the chunks of `dataset` that hold rows [first_row, first_row + rows). Returns "" when
// each decodes to exactly its chunk's size (and for contiguous or compact datasets, which have
// no chunks), else what is wrong with the first that does not.
// `file_bytes` bounds what a chunk may claim to store.
std::string check_chunk_lengths(hid_t dataset, uint64_t first_row, uint64_t rows,
                                uint64_t file_bytes);

}  // namespace collage
