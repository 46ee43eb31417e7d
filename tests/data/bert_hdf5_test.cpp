// BertHdf5File, BertShardSet, BertSampleOrder and BertShardReader against the files h5py wrote
// in scripts/reference/make_bert_hdf5_fixtures.py (tests/fixtures/bert_hdf5/): every sample,
// every integer width, one test per broken file, the shard order the script computed with
// numpy, and the reader's rank split, determinism and resume.
#include "data/bert/bert_hdf5.h"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/bert/bert_shards.h"
#include "reference_fixture.h"

namespace collage {
namespace {

using testing::error_of;
using testing::TempDir;

const std::string kDir = std::string(COLLAGE_FIXTURES) + "/bert_hdf5";

const nlohmann::json& bert_reference() {
  static const nlohmann::json j = [] {
    std::ifstream in(kDir + "/reference.json");
    if (!in) throw std::runtime_error("missing tests/fixtures/bert_hdf5/reference.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

int64_t vocab_size() { return bert_reference()["vocab_size"].get<int64_t>(); }

void expect_sample(const BertSample& got, const nlohmann::json& want, const std::string& where) {
  SCOPED_TRACE(where);
  EXPECT_EQ(got.input_ids, want["input_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(got.input_mask, want["input_mask"].get<std::vector<int32_t>>());
  EXPECT_EQ(got.segment_ids, want["segment_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(got.masked_positions, want["masked_positions"].get<std::vector<int32_t>>());
  EXPECT_EQ(got.masked_ids, want["masked_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(got.next_sentence_label, want["next_sentence_label"].get<int32_t>());
}

// ---------------------------------------------------------------------------------------
// One file

TEST(BertHdf5File, ReadsEverySampleOfH5pyFiles) {
  for (const auto& [name, want] : bert_reference()["files"].items()) {
    SCOPED_TRACE(name);
    BertHdf5File file(kDir + "/" + name, vocab_size());
    const auto& samples = want["samples"];
    ASSERT_EQ(file.size(), static_cast<int64_t>(samples.size()));
    EXPECT_EQ(file.seq_len(), want["seq_len"].get<int>());
    EXPECT_EQ(file.max_predictions(), want["max_predictions"].get<int>());
    const auto info = file.datasets();
    ASSERT_EQ(info.size(), 6u);
    for (int d = 0; d < 6; ++d) {
      EXPECT_EQ(info[d].name, BertHdf5File::kDatasetNames[d]);
      EXPECT_EQ(info[d].dtype, want["dtypes"][d].get<std::string>());
      EXPECT_EQ(info[d].shape[0], file.size());
      if (d < 3) EXPECT_EQ(info[d].shape, (std::vector<int64_t>{file.size(), file.seq_len()}));
      if (d == 3 || d == 4)
        EXPECT_EQ(info[d].shape, (std::vector<int64_t>{file.size(), file.max_predictions()}));
      if (d == 5) EXPECT_EQ(info[d].shape, (std::vector<int64_t>{file.size()}));
      EXPECT_HAS(info[d].storage, want["storage"].get<std::string>());
    }
    for (int64_t i = 0; i < file.size(); ++i)
      expect_sample(file.get(i), samples[i], name + " row " + std::to_string(i));
  }
}

TEST(BertHdf5File, DescribesChunksAndCompression) {
  BertHdf5File file(kDir + "/valid_int32.hdf5", vocab_size());
  EXPECT_EQ(file.datasets()[0].storage, "chunked [2, 16] gzip 4");
  EXPECT_EQ(file.datasets()[5].storage, "chunked [2] gzip 4");
}

// Row 5 of valid_int32 holds positions [p, 0, 9]: the labels end at the 0, the 9 is ignored
// and the batch's padding is zeroed; rows 2 uses all P = 3 slots (no 0 at all).
TEST(BertHdf5File, LabelsEndAtTheFirstZeroPosition) {
  BertHdf5File file(kDir + "/valid_int32.hdf5", vocab_size());
  BertBatch batch;
  batch.reset(file.seq_len(), file.max_predictions());
  const std::vector<int64_t> rows = {5, 2, 0};
  file.append_rows(rows, batch);
  EXPECT_EQ(batch.masked_counts, (std::vector<int32_t>{1, 3, 1}));
  const auto& samples = bert_reference()["files"]["valid_int32.hdf5"]["samples"];
  const int32_t p5 = samples[5]["masked_positions"][0].get<int32_t>();
  EXPECT_EQ(
      std::vector<int32_t>(batch.masked_positions.begin(), batch.masked_positions.begin() + 3),
      (std::vector<int32_t>{p5, 0, 0}));
  EXPECT_EQ(std::vector<int32_t>(batch.masked_ids.begin() + 1, batch.masked_ids.begin() + 3),
            (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(
      std::vector<int32_t>(batch.masked_positions.begin() + 3, batch.masked_positions.begin() + 6),
      samples[2]["masked_positions"].get<std::vector<int32_t>>());
}

// Rows come back in the order asked, repeats included, across chunk boundaries.
TEST(BertHdf5File, AppendsRowsInTheOrderAsked) {
  BertHdf5File file(kDir + "/valid_int32.hdf5", vocab_size());
  const auto& samples = bert_reference()["files"]["valid_int32.hdf5"]["samples"];
  BertBatch batch;
  batch.reset(file.seq_len(), file.max_predictions());
  const std::vector<int64_t> rows = {6, 0, 3, 3, 1};
  file.append_rows(rows, batch);
  const std::vector<int64_t> more = {4};
  file.append_rows(more, batch);  // appends
  ASSERT_EQ(batch.size, 6);
  EXPECT_EQ(batch.input_ids.size(), 6u * file.seq_len());
  EXPECT_EQ(batch.masked_positions.size(), 6u * file.max_predictions());
  for (int b = 0; b < 5; ++b)
    expect_sample(batch.sample(b), samples[rows[b]], "batch row " + std::to_string(b));
  expect_sample(batch.sample(5), samples[4], "appended row");

  BertBatch wrong;
  wrong.reset(file.seq_len() + 1, file.max_predictions());
  EXPECT_HAS(error_of([&] { file.append_rows(rows, wrong); }), "S = 17");
  const std::vector<int64_t> outside = {7};
  EXPECT_HAS(error_of([&] { file.append_rows(outside, batch); }), "row 7 is outside [0, 7)");
  EXPECT_HAS(error_of([&] { file.get(-1); }), "row -1 is outside");
}

TEST(BertHdf5File, ChecksIdsAgainstTheVocabularyGiven) {
  // The largest id in valid_int32, from the script's samples.
  int32_t max_id = 0;
  for (const auto& s : bert_reference()["files"]["valid_int32.hdf5"]["samples"]) {
    for (int32_t id : s["input_ids"].get<std::vector<int32_t>>()) max_id = std::max(max_id, id);
    for (int32_t id : s["masked_ids"].get<std::vector<int32_t>>()) max_id = std::max(max_id, id);
  }
  BertHdf5File exact(kDir + "/valid_int32.hdf5", max_id + 1);
  EXPECT_NO_THROW(exact.check_all_rows(3));
  BertHdf5File small(kDir + "/valid_int32.hdf5", max_id);
  const std::string e = error_of([&] { small.check_all_rows(); });
  EXPECT_HAS(e, "valid_int32.hdf5: dataset '");
  EXPECT_HAS(e, "id " + std::to_string(max_id) + " is outside the vocabulary [0, " +
                    std::to_string(max_id) + ")");
  BertHdf5File unknown(kDir + "/valid_int32.hdf5", BertHdf5File::kUnknownVocab);
  EXPECT_NO_THROW(unknown.check_all_rows());
  EXPECT_THROW(BertHdf5File(kDir + "/valid_int32.hdf5", 0), Error);
}

TEST(BertHdf5File, MovesKeepTheOpenFile) {
  BertHdf5File a(kDir + "/widths.hdf5", vocab_size());
  BertHdf5File b(std::move(a));
  EXPECT_EQ(b.size(), 5);
  expect_sample(b.get(4), bert_reference()["files"]["widths.hdf5"]["samples"][4], "moved");
  BertHdf5File c(kDir + "/valid_int32.hdf5", vocab_size());
  c = std::move(b);
  EXPECT_EQ(c.seq_len(), 12);
  EXPECT_THROW(a.get(0), Error);  // moved-from
}

// 600 rows are three row blocks of 256: every row, read in a shuffled order with room for one
// block only (so blocks are evicted and re-read) and with the default bound, matches h5py's.
TEST(BertHdf5File, ReadsAcrossRowBlocksWithinTheCacheBound) {
  const auto& want = bert_reference()["many_rows"];
  const std::string path = kDir + "/" + want["file"].get<std::string>();
  const auto sums = want["input_id_sums"].get<std::vector<int64_t>>();
  std::vector<int64_t> rows(sums.size());
  std::iota(rows.begin(), rows.end(), 0);
  std::shuffle(rows.begin(), rows.end(), std::mt19937(7));
  for (const int64_t cache_bytes : {int64_t{1}, BertHdf5File::kDefaultCacheBytes}) {
    SCOPED_TRACE("cache_bytes " + std::to_string(cache_bytes));
    BertHdf5File file(path, vocab_size(), cache_bytes);
    ASSERT_EQ(file.size(), static_cast<int64_t>(sums.size()));
    BertBatch batch;
    batch.reset(file.seq_len(), file.max_predictions());
    for (size_t k = 0; k < rows.size(); k += 50)
      file.append_rows(
          std::span<const int64_t>(rows).subspan(k, std::min<size_t>(50, rows.size() - k)), batch);
    ASSERT_EQ(batch.size, static_cast<int64_t>(rows.size()));
    for (size_t b = 0; b < rows.size(); ++b) {
      int64_t sum = 0;
      for (int c = 0; c < file.seq_len(); ++c) sum += batch.input_ids[b * file.seq_len() + c];
      EXPECT_EQ(sum, sums[rows[b]]) << "row " << rows[b];
    }
    const auto picked = want["picked"].get<std::vector<int64_t>>();
    for (size_t k = 0; k < picked.size(); ++k)
      expect_sample(file.get(picked[k]), want["samples"][k], "row " + std::to_string(picked[k]));
  }
}

// Files whose metadata is wrong fail at open, naming the file, the dataset and the shape.
TEST(BertHdf5File, RejectsBrokenMetadataAtOpen) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"missing_dataset.hdf5", {"dataset 'masked_lm_ids' is missing"}},
      {"wrong_rank.hdf5", {"dataset 'next_sentence_labels' has rank 2; expected 1"}},
      {"wrong_seq_len.hdf5",
       {"dataset 'input_mask' has shape [4, 9] but input_ids has [4, 8]", "sequence length S"}},
      {"wrong_predictions.hdf5",
       {"dataset 'masked_lm_ids' has shape [4, 3] but masked_lm_positions has [4, 2]"}},
      {"disagreeing_rows.hdf5",
       {"dataset 'next_sentence_labels' has shape [3] but input_ids has [4, 8]", "N rows"}},
      {"float_dtype.hdf5", {"dataset 'input_mask' holds float32 values; expected integers"}},
      {"not_hdf5.hdf5", {"cannot open as an HDF5 file", "signature"}},
      {"no_such_file.hdf5", {"no such file"}},
  };
  for (const auto& [name, parts] : cases) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(name == "no_such_file.hdf5" || bert_reference()["broken"].contains(name));
    const std::string e = error_of([&] { BertHdf5File(kDir + "/" + name, vocab_size()); });
    EXPECT_HAS(e, kDir + "/" + name + ": ");
    for (const auto& part : parts) EXPECT_HAS(e, part);
  }
  EXPECT_HAS(error_of([&] { BertHdf5File(kDir, vocab_size()); }), "is a directory");
}

// A file of six empty (fill-valued, chunked) datasets of the given shapes and integer width,
// written with libhdf5's C API: shapes h5py would not write, at no disk cost.
void write_empty_shard(const std::string& path, hsize_t rows, hsize_t seq_len,
                       hsize_t max_predictions, size_t integer_bytes, bool gzip = false) {
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  const hid_t type = H5Tcopy(H5T_STD_I32LE);
  H5Tset_size(type, integer_bytes);
  for (int d = 0; d < 6; ++d) {
    const hsize_t width = d == 5 ? 1 : d >= 3 ? max_predictions : seq_len;
    const int rank = d == 5 ? 1 : 2;
    const hsize_t dims[2] = {rows, width}, chunk[2] = {1, std::min<hsize_t>(width, 1024)};
    const hid_t space = H5Screate_simple(rank, dims, nullptr);
    const hid_t create = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(create, rank, chunk);
    if (gzip) H5Pset_deflate(create, 4);
    const hid_t dataset = H5Dcreate2(file, BertHdf5File::kDatasetNames[d], type, space, H5P_DEFAULT,
                                     create, H5P_DEFAULT);
    ASSERT_GE(dataset, 0);
    H5Dclose(dataset);
    H5Pclose(create);
    H5Sclose(space);
  }
  H5Tclose(type);
  H5Fclose(file);
}

// What fuzzing found (tests/fuzz/regressions/bert_hdf5/) and the bounds it led to: integers of
// odd byte sizes and sequence lengths no BERT has are refused at open, before libhdf5 sizes a
// buffer by them; a chunk that decodes short is refused before libhdf5 reads past it.
TEST(BertHdf5File, RejectsWhatFuzzingFound) {
  const std::string found = std::string(COLLAGE_SOURCE_DIR) + "/tests/fuzz/regressions/bert_hdf5/";
  EXPECT_HAS(error_of([&] { BertHdf5File(found + "integer-of-1413611524-bytes", vocab_size()); }),
             "holds 1413611524-byte integers; expected 1, 2, 4 or 8 bytes");
  BertHdf5File short_chunk(found + "chunk-shorter-after-its-filters", vocab_size());
  EXPECT_HAS(error_of([&] { short_chunk.get(0); }),
             "dataset 'input_ids': the chunk at [0, 0] is recorded as 59 bytes in the chunk index "
             "but read as 34 (a damaged file)");
  EXPECT_HAS(error_of([&] { BertHdf5File(found + "compact-data-of-zero-bytes", vocab_size()); }),
             "dataset 'next_sentence_labels': its compact storage records 0 bytes for 40 bytes of "
             "values (a damaged file)");
  BertHdf5File short_stored(found + "unfiltered-chunk-stored-short", vocab_size());
  EXPECT_HAS(error_of([&] { short_stored.get(0); }),
             "dataset 'masked_lm_ids': the chunk at [0, 0] is recorded as 15 bytes in the chunk "
             "index but read as 24");
  BertHdf5File indexed_twice(found + "chunk-recorded-twice-in-its-index", vocab_size());
  EXPECT_HAS(error_of([&] { indexed_twice.get(0); }),
             "dataset 'input_ids': the chunk at [0, 0] cannot be located");

  TempDir dir;
  const std::string path = dir.file("shard.hdf5");
  write_empty_shard(path, 4, 8, 2, 3);
  EXPECT_HAS(error_of([&] { BertHdf5File(path, vocab_size()); }),
             "dataset 'input_ids' holds 3-byte integers");
  const hsize_t too_long = BertHdf5File::kMaxSeqLen + 1;
  write_empty_shard(path, 1, too_long, 2, 4);
  EXPECT_HAS(error_of([&] { BertHdf5File(path, vocab_size()); }),
             "sequence length S = 1048577 and max_predictions P = 2: need 1 <= P <= S <= 1048576");
  // The same kind of file with sane sizes opens, and its rows read (the fill value, 0).
  write_empty_shard(path, 2, 64, 2, 8);
  BertHdf5File file(path, vocab_size());
  EXPECT_EQ(file.get(1).input_ids, std::vector<int32_t>(64, 0));
}

// A gzip chunk whose stored bytes are a valid deflate stream of fewer bytes than a chunk (the
// index agreeing on its size): libhdf5 1.10 would copy a whole chunk out of the short result.
TEST(BertHdf5File, ChunkThatDecodesShortIsRefused) {
  TempDir dir;
  const std::string path = dir.file("shard.hdf5");
  write_empty_shard(path, 2, 8, 2, 4, /*gzip=*/true);
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  const hid_t dataset = H5Dopen2(file, "input_ids", H5P_DEFAULT);
  ASSERT_GE(dataset, 0);
  // Half a row chunk (1, 8) of int32: 16 zero bytes, deflated.
  const std::vector<unsigned char> half(16, 0);
  std::vector<unsigned char> stream(compressBound(half.size()));
  uLongf stream_bytes = stream.size();
  ASSERT_EQ(compress(stream.data(), &stream_bytes, half.data(), half.size()), Z_OK);
  const hsize_t offset[2] = {0, 0};
  ASSERT_GE(H5Dwrite_chunk(dataset, H5P_DEFAULT, 0, offset, stream_bytes, stream.data()), 0);
  H5Dclose(dataset);
  H5Fclose(file);

  BertHdf5File short_chunk(path, vocab_size());
  EXPECT_HAS(error_of([&] { short_chunk.get(0); }),
             "dataset 'input_ids': the chunk at [0, 0] decodes to 16 bytes, not the 32 of a chunk "
             "(a damaged file)");
}

// Files whose values are wrong open (only metadata is read at open); reading the bad row
// fails naming dataset, row, column and value, other rows read, and check_all_rows finds it.
TEST(BertHdf5File, RejectsBadValuesWhenTheRowIsRead) {
  const std::map<std::string, std::string> reason = {
      {"position_out_of_range.hdf5", "position 8 is outside [0, 8) (S)"},
      {"negative_position.hdf5", "position -3 is outside [0, 8) (S)"},
      {"id_out_of_vocab.hdf5", "id " + std::to_string(vocab_size()) + " is outside the vocabulary"},
      {"masked_id_out_of_vocab.hdf5",
       "id " + std::to_string(vocab_size() + 5) + " is outside the vocabulary"},
      {"bad_mask_value.hdf5", "value 2 is not 0 or 1"},
      {"bad_segment_value.hdf5", "value -1 is not 0 or 1"},
      {"bad_nsp_label.hdf5", "label 3 is not 0 or 1"},
      {"overflow_int64.hdf5", "value 8589934592 (int64) in rows"},
  };
  int checked = 0;
  for (const auto& [name, where] : bert_reference()["broken"].items()) {
    if (!where.contains("row")) continue;
    SCOPED_TRACE(name);
    ASSERT_TRUE(reason.count(name));
    ++checked;
    BertHdf5File file(kDir + "/" + name, vocab_size());
    const int64_t row = where["row"].get<int64_t>();
    const std::string dataset = where["dataset"].get<std::string>();
    std::string at = kDir + "/" + name + ": dataset '" + dataset + "': ";
    if (name != "overflow_int64.hdf5")
      at += where["column"].is_null() ? "row " + std::to_string(row) + ": "
                                      : "row " + std::to_string(row) + ", column " +
                                            std::to_string(where["column"].get<int>()) + ": ";
    const std::string e = error_of([&] { file.get(row); });
    EXPECT_HAS(e, at + reason.at(name));
    // Other rows read fine, except after an overflow, which fails the read of the whole
    // block (all 4 rows here).
    if (name != "overflow_int64.hdf5") EXPECT_NO_THROW(file.get(row == 0 ? 1 : 0));
    EXPECT_HAS(error_of([&] { file.check_all_rows(2); }), at);
  }
  EXPECT_EQ(checked, static_cast<int>(reason.size()));
}

// ---------------------------------------------------------------------------------------
// A directory of shards

std::shared_ptr<const BertShardSet> fixture_shards() {
  return std::make_shared<const BertShardSet>(kDir + "/shards", vocab_size());
}

TEST(BertShardSet, ListsShardsInNameOrder) {
  const auto& want = bert_reference()["shards"];
  const auto set = fixture_shards();
  ASSERT_EQ(set->num_files(), static_cast<int>(want["files"].size()));
  int64_t total = 0;
  for (int f = 0; f < set->num_files(); ++f) {
    EXPECT_EQ(std::filesystem::path(set->file(f)).filename().string(), want["files"][f]);
    EXPECT_EQ(set->file_samples(f), want["sizes"][f].get<int64_t>());
    total += set->file_samples(f);
  }
  EXPECT_EQ(set->num_samples(), total);
  EXPECT_EQ(set->seq_len(), want["seq_len"].get<int>());
  EXPECT_EQ(set->max_predictions(), want["max_predictions"].get<int>());
  EXPECT_EQ(set->locate_in_name_order(0), (std::pair<int, int64_t>{0, 0}));
  EXPECT_EQ(set->locate_in_name_order(5), (std::pair<int, int64_t>{1, 0}));
  EXPECT_EQ(set->locate_in_name_order(total - 1), (std::pair<int, int64_t>{3, 2}));

  const BertShardSet only_h5(kDir + "/shards", vocab_size(), "*.h5");
  ASSERT_EQ(only_h5.num_files(), 1);
  EXPECT_EQ(only_h5.num_samples(), 3);
  const BertShardSet one_file(kDir + "/valid_int32.hdf5", vocab_size());
  EXPECT_EQ(one_file.num_files(), 1);
  EXPECT_EQ(one_file.num_samples(), 7);
}

TEST(BertShardSet, RejectsEmptyMixedAndBrokenDirectories) {
  EXPECT_HAS(error_of([&] { BertShardSet(kDir + "/shards", vocab_size(), "*_test_*.hdf5"); }),
             "no files named '*_test_*.hdf5'");
  EXPECT_HAS(error_of([&] { BertShardSet(kDir + "/nothing_here", vocab_size()); }),
             "no such file or directory");
  TempDir dir;
  EXPECT_HAS(error_of([&] { BertShardSet(dir.str(), vocab_size()); }), "no files named *.hdf5");
  std::filesystem::copy_file(kDir + "/valid_int32.hdf5", dir.file("a.hdf5"));
  std::filesystem::copy_file(kDir + "/widths.hdf5", dir.file("b.hdf5"));
  const std::string e = error_of([&] { BertShardSet(dir.str(), vocab_size()); });
  EXPECT_HAS(
      e, dir.file("b.hdf5") + ": S = 12, P = 4, but " + dir.file("a.hdf5") + " has S = 16, P = 3");
  std::filesystem::remove(dir.file("b.hdf5"));
  std::filesystem::copy_file(kDir + "/wrong_rank.hdf5", dir.file("c.hdf5"));
  EXPECT_HAS(error_of([&] { BertShardSet(dir.str(), vocab_size()); }), dir.file("c.hdf5"));
}

// The order is the one the script computed with numpy, for every (seed, epoch) it wrote.
TEST(BertSampleOrder, MatchesTheNumpyReference) {
  const auto& want = bert_reference()["shards"];
  for (const auto& o : want["orders"]) {
    const uint64_t seed = o["seed"].get<uint64_t>();
    const int64_t epoch = o["epoch"].get<int64_t>();
    SCOPED_TRACE("seed " + std::to_string(seed) + " epoch " + std::to_string(epoch));
    BertSampleOrder order(want["sizes"].get<std::vector<int64_t>>(), seed);
    const auto pairs = o["order"].get<std::vector<std::pair<int, int64_t>>>();
    ASSERT_EQ(order.samples_per_epoch(), static_cast<int64_t>(pairs.size()));
    for (size_t k = 0; k < pairs.size(); ++k) {
      const auto at = order.locate(epoch, static_cast<int64_t>(k));
      EXPECT_EQ(std::make_pair(at.shard, at.row), pairs[k]) << "sample " << k;
    }
  }
}

TEST(BertSampleOrder, EachEpochVisitsEverySampleOnceShardByShard) {
  const std::vector<int64_t> sizes = {5, 0, 7, 4, 3};
  BertSampleOrder order(sizes, 99);
  std::vector<std::vector<std::pair<int, int64_t>>> epochs;
  for (int64_t e = 0; e < 4; ++e) {
    std::vector<std::pair<int, int64_t>> seen;
    std::set<int> finished;
    for (int64_t k = 0; k < order.samples_per_epoch(); ++k) {
      const auto at = order.locate(e, k);
      if (!seen.empty() && seen.back().first != at.shard) finished.insert(seen.back().first);
      EXPECT_EQ(finished.count(at.shard), 0u) << "shard " << at.shard << " visited twice";
      seen.emplace_back(at.shard, at.row);
    }
    std::set<std::pair<int, int64_t>> distinct(seen.begin(), seen.end());
    EXPECT_EQ(distinct.size(), 19u);
    for (const auto& [f, r] : distinct) EXPECT_LT(r, sizes[f]);
    epochs.push_back(seen);
  }
  EXPECT_NE(epochs[0], epochs[1]);  // reshuffled per epoch
  // Looking back at an older epoch gives the same answer (the caches are only caches).
  EXPECT_EQ(order.locate(0, 7).row, epochs[0][7].second);
  EXPECT_THROW(order.locate(0, 19), Error);
  EXPECT_THROW(BertSampleOrder({0, 0}, 1), Error);
}

// ---------------------------------------------------------------------------------------
// The reader

// `steps` micro-batches of one rank, as BertSamples.
std::vector<BertSample> read_steps(BertShardReader& reader, int steps) {
  std::vector<BertSample> out;
  BertBatch batch;
  for (int s = 0; s < steps; ++s) {
    reader.next(batch);
    for (int64_t b = 0; b < batch.size; ++b) out.push_back(batch.sample(b));
  }
  return out;
}

bool same(const BertSample& a, const BertSample& b) {
  return a.input_ids == b.input_ids && a.input_mask == b.input_mask &&
         a.segment_ids == b.segment_ids && a.masked_positions == b.masked_positions &&
         a.masked_ids == b.masked_ids && a.next_sentence_label == b.next_sentence_label;
}

// One process reads the numpy order's samples with the h5py-written values, across epochs.
TEST(BertShardReader, ReadsTheReferenceOrderAndValues) {
  const auto& want = bert_reference()["shards"];
  BertShardReader reader(fixture_shards(), 1234, /*micro_batch_size=*/4, 0, 1);
  const auto got = read_steps(reader, 12);  // 48 samples: epochs 0, 1 and 10 of epoch 2
  std::vector<std::pair<int, int64_t>> order;
  for (const auto& o : want["orders"])
    if (o["seed"] == 1234)
      for (const auto& p : o["order"].get<std::vector<std::pair<int, int64_t>>>())
        order.push_back(p);
  ASSERT_GE(order.size(), got.size());
  for (size_t k = 0; k < got.size(); ++k)
    expect_sample(got[k], want["samples"][order[k].first][order[k].second],
                  "stream sample " + std::to_string(k));
  EXPECT_EQ(reader.position(), (BertDataPosition{2, 10}));
}

// dp ranks each read a disjoint slice of every global micro-batch; together, in rank order,
// they read what one process reads with micro-batches dp times larger.
TEST(BertShardReader, RanksSplitEachGlobalBatch) {
  const auto shards = fixture_shards();
  for (int dp : {2, 3, 5}) {
    SCOPED_TRACE("dp " + std::to_string(dp));
    const int mbs = 2, steps = 9;  // 9 * 2 * dp samples: several epochs of 19
    BertShardReader single(shards, 77, mbs * dp, 0, 1);
    const auto whole = read_steps(single, steps);
    std::vector<BertShardReader> ranks;
    for (int r = 0; r < dp; ++r) ranks.emplace_back(shards, 77, mbs, r, dp);
    BertBatch batch;
    for (int s = 0; s < steps; ++s)
      for (int r = 0; r < dp; ++r) {
        ranks[r].next(batch);
        ASSERT_EQ(batch.size, mbs);
        for (int b = 0; b < mbs; ++b)
          EXPECT_TRUE(same(batch.sample(b), whole[(s * dp + r) * mbs + b]))
              << "step " << s << " rank " << r << " row " << b;
      }
    for (int r = 0; r < dp; ++r) EXPECT_EQ(ranks[r].position(), single.position());
  }
}

TEST(BertShardReader, SameSeedSameOrderOtherSeedOther) {
  const auto shards = fixture_shards();
  BertShardReader a(shards, 5, 3, 0, 1), b(shards, 5, 3, 0, 1), c(shards, 6, 3, 0, 1);
  const auto sa = read_steps(a, 7), sb = read_steps(b, 7), sc = read_steps(c, 7);
  int differ = 0;
  for (size_t k = 0; k < sa.size(); ++k) {
    EXPECT_TRUE(same(sa[k], sb[k])) << k;
    differ += !same(sa[k], sc[k]);
  }
  EXPECT_GT(differ, 10);
}

// Stopping at any step and building a new reader at the saved position continues exactly as
// the uninterrupted reader, including in the middle of a shard and across epochs.
TEST(BertShardReader, ResumesMidShardAsIfUninterrupted) {
  const auto shards = fixture_shards();
  const int dp = 2, mbs = 3, steps = 10;
  BertSampleOrder order({5, 7, 4, 3}, 1234);
  for (int r = 0; r < dp; ++r) {
    BertShardReader whole(shards, 1234, mbs, r, dp);
    const auto all = read_steps(whole, steps);
    int mid_shard = 0;
    for (int stop = 1; stop < steps; ++stop) {
      SCOPED_TRACE("rank " + std::to_string(r) + " stop " + std::to_string(stop));
      BertShardReader first(shards, 1234, mbs, r, dp);
      read_steps(first, stop);
      const BertDataPosition saved = first.position();
      // Mid-shard: the previous sample of the stream is in the same shard as the next.
      if (saved.sample_in_epoch > 0 &&
          order.locate(saved.epoch, saved.sample_in_epoch).shard ==
              order.locate(saved.epoch, saved.sample_in_epoch - 1).shard)
        ++mid_shard;
      BertShardReader resumed(shards, 1234, mbs, r, dp, saved);
      const auto rest = read_steps(resumed, steps - stop);
      ASSERT_EQ(rest.size(), all.size() - stop * mbs);
      for (size_t k = 0; k < rest.size(); ++k)
        EXPECT_TRUE(same(rest[k], all[stop * mbs + k])) << "sample " << k;
      EXPECT_EQ(resumed.position(), whole.position());
    }
    EXPECT_GE(mid_shard, 3);
  }
  EXPECT_THROW(BertShardReader(shards, 1, 2, 0, 1, BertDataPosition{0, 19}), Error);
  EXPECT_THROW(BertShardReader(shards, 1, 2, 2, 2), Error);
  EXPECT_THROW(BertShardReader(shards, 1, 0, 0, 1), Error);
}

// With one sample per step the reader opens each shard once per epoch: never more than one
// shard open, and shards are not reopened within the epoch.
TEST(BertShardReader, OpensOneShardAtATime) {
  BertShardReader reader(fixture_shards(), 1234, 1, 0, 1);
  BertBatch batch;
  std::vector<int> visited;
  for (int k = 0; k < 19; ++k) {
    reader.next(batch);
    if (visited.empty() || visited.back() != reader.open_shard())
      visited.push_back(reader.open_shard());
  }
  EXPECT_EQ(reader.shards_opened(), 4);
  EXPECT_EQ(std::set<int>(visited.begin(), visited.end()).size(), 4u);
  EXPECT_EQ(reader.position(), (BertDataPosition{1, 0}));
}

// The reader checks values as it reads: a shard set containing a bad row fails on the batch
// that reads it, naming the file.
TEST(BertShardReader, FailsOnTheBatchThatReadsABadRow) {
  TempDir dir;
  std::filesystem::copy_file(kDir + "/position_out_of_range.hdf5", dir.file("x.hdf5"));
  BertShardReader reader(std::make_shared<const BertShardSet>(dir.str(), vocab_size()), 3, 4, 0, 1);
  BertBatch batch;
  EXPECT_HAS(error_of([&] { reader.next(batch); }),
             dir.file("x.hdf5") + ": dataset 'masked_lm_positions': row 2, column 0");
}

}  // namespace
}  // namespace collage
