// IndexedDataset / IndexedDatasetWriter against .bin/.idx pairs written by the independent
// numpy writer in scripts/reference/gpt_dataset_reference.py, plus one test per corruption.
#include "data/megatron/indexed_dataset.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "reference_fixture.h"

namespace collage {
namespace {

using testing::fixture_prefix;
using testing::read_bytes;
using testing::reference;
using testing::TempDir;
using testing::write_bytes;

std::vector<std::vector<int32_t>> reference_docs(const char* key) {
  return reference()[key].get<std::vector<std::vector<int32_t>>>();
}

void expect_reads_documents(const IndexedDataset& ds,
                            const std::vector<std::vector<int32_t>>& docs) {
  ASSERT_EQ(ds.num_sequences(), static_cast<int64_t>(docs.size()));
  ASSERT_EQ(ds.num_documents(), static_cast<int64_t>(docs.size()));
  int64_t total = 0;
  for (size_t s = 0; s < docs.size(); ++s) {
    ASSERT_EQ(ds.sequence_lengths()[s], static_cast<int32_t>(docs[s].size()));
    EXPECT_EQ(ds.sequence_pointers()[s], total * ds.itemsize());
    EXPECT_EQ(ds.document_indices()[s], static_cast<int64_t>(s));
    std::vector<int32_t> got(docs[s].size());
    ds.read(static_cast<int64_t>(s), 0, static_cast<int64_t>(got.size()), got.data());
    EXPECT_EQ(got, docs[s]) << "sequence " << s;
    total += static_cast<int64_t>(docs[s].size());
  }
  EXPECT_EQ(ds.document_indices().back(), static_cast<int64_t>(docs.size()));
  EXPECT_EQ(ds.num_tokens(), total);
}

TEST(IndexedDataset, ReadsNumpyWrittenUint16) {
  IndexedDataset ds(fixture_prefix("gpt_dataset_u16"));
  EXPECT_EQ(ds.dtype(), TokenDType::uint16);
  EXPECT_EQ(ds.itemsize(), 2);
  expect_reads_documents(ds, reference_docs("documents_u16"));
}

TEST(IndexedDataset, ReadsNumpyWrittenInt32) {
  IndexedDataset ds(fixture_prefix("gpt_dataset_i32"));
  EXPECT_EQ(ds.dtype(), TokenDType::int32);
  expect_reads_documents(ds, reference_docs("documents_i32"));
}

TEST(IndexedDataset, ReadsAPartOfASequenceAndChecksBounds) {
  IndexedDataset ds(fixture_prefix("gpt_dataset_u16"));
  const auto docs = reference_docs("documents_u16");
  std::vector<int32_t> got(5);
  ds.read(0, 3, 5, got.data());
  EXPECT_EQ(got, std::vector<int32_t>(docs[0].begin() + 3, docs[0].begin() + 8));
  const int64_t len0 = ds.sequence_lengths()[0];
  EXPECT_THROW(ds.read(0, len0 - 2, 3, got.data()), Error);
  EXPECT_THROW(ds.read(0, -1, 1, got.data()), Error);
  EXPECT_THROW(ds.read(40, 0, 0, got.data()), Error);
  EXPECT_THROW(ds.read(-1, 0, 0, got.data()), Error);
}

TEST(IndexedDataset, MaxTokenIdAndVocabularyCheck) {
  const auto docs = reference_docs("documents_u16");
  IndexedDataset ds(fixture_prefix("gpt_dataset_u16"));
  EXPECT_EQ(ds.max_token_id(), reference()["inspect"]["max_token_id"].get<int64_t>());
  EXPECT_NO_THROW(ds.check_token_ids(50257));
  // The first token >= 40000 in file order, found from the python documents.
  const int32_t vocab = 40000;
  size_t bad_seq = 0, bad_pos = 0;
  bool found = false;
  for (size_t s = 0; s < docs.size() && !found; ++s)
    for (size_t p = 0; p < docs[s].size() && !found; ++p)
      if (docs[s][p] >= vocab) bad_seq = s, bad_pos = p, found = true;
  ASSERT_TRUE(found);
  try {
    ds.check_token_ids(vocab);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("gpt_dataset_u16.bin"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fmt::format("position {} of sequence {} ", bad_pos, bad_seq)),
              std::string::npos)
        << msg;
  }
  IndexedDataset ds32(fixture_prefix("gpt_dataset_i32"));
  EXPECT_EQ(ds32.max_token_id(), 2147483647);
}

// ---------------------------------------------------------------------------------------
// Writer

void write_docs(const std::string& prefix, const std::vector<std::vector<int32_t>>& docs,
                TokenDType dtype) {
  IndexedDatasetWriter w(prefix, dtype);
  for (const auto& d : docs) w.add_document(d);
  w.finalize();
}

TEST(IndexedDatasetWriter, ByteIdenticalToNumpyWriter) {
  TempDir dir;
  write_docs(dir.file("u16"), reference_docs("documents_u16"), TokenDType::uint16);
  write_docs(dir.file("i32"), reference_docs("documents_i32"), TokenDType::int32);
  for (const char* name : {"u16", "i32"}) {
    const std::string ref = fixture_prefix(std::string("gpt_dataset_") + name);
    for (const char* ext : {".bin", ".idx"}) {
      const auto ours = read_bytes(dir.file(name) + ext);
      const auto theirs = read_bytes(ref + ext);
      ASSERT_FALSE(theirs.empty());
      EXPECT_TRUE(ours == theirs) << name << ext << " differs from the numpy writer's";
    }
  }
}

TEST(IndexedDatasetWriter, PairAppearsOnlyAtFinalize) {
  TempDir dir;
  const std::string prefix = dir.file("atomic");
  namespace fs = std::filesystem;
  {
    IndexedDatasetWriter w(prefix, TokenDType::uint16);
    w.add_document({1, 2, 3});
    EXPECT_FALSE(fs::exists(prefix + ".bin"));
    EXPECT_FALSE(fs::exists(prefix + ".idx"));
    EXPECT_TRUE(fs::exists(prefix + ".bin.tmp"));
    // Destroyed without finalize: an interrupted run leaves nothing behind.
  }
  EXPECT_FALSE(fs::exists(prefix + ".bin"));
  EXPECT_FALSE(fs::exists(prefix + ".idx"));
  EXPECT_FALSE(fs::exists(prefix + ".bin.tmp"));

  write_docs(prefix, {{1, 2}, {}, {3}}, TokenDType::uint16);
  EXPECT_FALSE(fs::exists(prefix + ".bin.tmp"));
  EXPECT_FALSE(fs::exists(prefix + ".idx.tmp"));
  // Finalize over an existing pair replaces it.
  write_docs(prefix, {{7, 8, 9, 10}}, TokenDType::uint16);
  IndexedDataset ds(prefix);
  EXPECT_EQ(ds.num_sequences(), 1);
  std::vector<int32_t> got(4);
  ds.read(0, 0, 4, got.data());
  EXPECT_EQ(got, (std::vector<int32_t>{7, 8, 9, 10}));
}

TEST(IndexedDatasetWriter, RejectsTokensThatDoNotFitTheDtype) {
  TempDir dir;
  IndexedDatasetWriter w(dir.file("x"), TokenDType::uint16);
  EXPECT_NO_THROW(w.add_document({0, 65535}));
  EXPECT_THROW(w.add_document({1, 65536}), Error);
  EXPECT_THROW(w.add_document({-1}), Error);
  EXPECT_THROW(IndexedDatasetWriter(dir.file("y"), TokenDType::float32), Error);
}

TEST(IndexedDatasetWriter, OtherIntegerDtypesRoundTrip) {
  TempDir dir;
  const std::vector<std::vector<int32_t>> docs = {{1, 2, 127}, {}, {5}};
  for (TokenDType t : {TokenDType::uint8, TokenDType::int8, TokenDType::int16, TokenDType::int64}) {
    const std::string prefix = dir.file(dtype_name(t));
    write_docs(prefix, docs, t);
    IndexedDataset ds(prefix);
    EXPECT_EQ(ds.dtype(), t);
    expect_reads_documents(ds, docs);
  }
}

TEST(IndexedDatasetWriter, BestDtypeFollowsMegatron) {
  EXPECT_EQ(IndexedDatasetWriter::best_dtype(50257), TokenDType::uint16);
  EXPECT_EQ(IndexedDatasetWriter::best_dtype(65499), TokenDType::uint16);
  EXPECT_EQ(IndexedDatasetWriter::best_dtype(65500), TokenDType::int32);
  EXPECT_EQ(IndexedDatasetWriter::best_dtype(100277), TokenDType::int32);
}

// ---------------------------------------------------------------------------------------
// Corrupted files: each must give an Error naming the file and the problem.

class Corrupted : public ::testing::Test {
 protected:
  void SetUp() override {
    prefix_ = dir_.file("c");
    idx_ = read_bytes(fixture_prefix("gpt_dataset_u16") + ".idx");
    bin_ = read_bytes(fixture_prefix("gpt_dataset_u16") + ".bin");
    ASSERT_EQ(idx_.size(), 34u + 12 * kS + 8 * (kS + 1));
  }
  template <typename T>
  void poke(size_t offset, T value) {
    std::memcpy(idx_.data() + offset, &value, sizeof(T));
  }
  // Writes the (modified) pair and expects opening it to fail naming `file` with `what`.
  void expect_error(const std::string& ext, const std::string& what) {
    write_bytes(prefix_ + ".idx", idx_);
    write_bytes(prefix_ + ".bin", bin_);
    expect_open_error(ext, what);
  }
  void expect_open_error(const std::string& ext, const std::string& what) {
    try {
      IndexedDataset ds(prefix_);
      FAIL() << "expected an Error mentioning " << what;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(prefix_ + ext), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
    }
  }
  static constexpr size_t kS = 40;  // sequences in gpt_dataset_u16
  static constexpr size_t kLengths = 34, kPointers = 34 + 4 * kS, kDocs = 34 + 12 * kS;
  TempDir dir_;
  std::string prefix_;
  std::vector<char> idx_, bin_;
};

TEST_F(Corrupted, UnmodifiedCopyOpens) {
  write_bytes(prefix_ + ".idx", idx_);
  write_bytes(prefix_ + ".bin", bin_);
  EXPECT_NO_THROW(IndexedDataset ds(prefix_));
}

TEST_F(Corrupted, MissingIdx) {
  write_bytes(prefix_ + ".bin", bin_);
  expect_open_error(".idx", "cannot open");
}

TEST_F(Corrupted, MissingBin) {
  write_bytes(prefix_ + ".idx", idx_);
  expect_open_error(".bin", "cannot open");
}

TEST_F(Corrupted, WrongMagic) {
  std::memcpy(idx_.data(), "XXIDIDX\0\0", 9);
  expect_error(".idx", "bad magic");
}

TEST_F(Corrupted, LegacyTntidxMagic) {
  std::memcpy(idx_.data(), "TNTIDX\0\0", 8);
  expect_error(".idx", "legacy");
}

TEST_F(Corrupted, RetroMagic) {
  std::memcpy(idx_.data(), "MMIDRET\0\0", 9);
  expect_error(".idx", "RETRO");
  std::memcpy(idx_.data(), "KNNRETM\0\0", 9);
  expect_error(".idx", "RETRO");
}

TEST_F(Corrupted, WrongVersion) {
  poke<uint64_t>(9, 2);
  expect_error(".idx", "version 2");
}

TEST_F(Corrupted, FloatDtype) {
  poke<uint8_t>(17, 7);
  expect_error(".idx", "floating-point");
  poke<uint8_t>(17, 6);
  expect_error(".idx", "floating-point");
}

TEST_F(Corrupted, UnknownDtype) {
  poke<uint8_t>(17, 9);
  expect_error(".idx", "unknown dtype code 9");
}

TEST_F(Corrupted, TruncatedBin) {
  bin_.resize(bin_.size() - 2);
  expect_error(".bin", "truncated .bin");
}

TEST_F(Corrupted, BinWithExtraBytes) {
  bin_.push_back(0);
  bin_.push_back(0);
  expect_error(".bin", "extra bytes");
}

TEST_F(Corrupted, IdxSizeMismatch) {
  idx_.resize(idx_.size() + 3);
  expect_error(".idx", "does not match");
}

TEST_F(Corrupted, IdxWithMultimodalTail) {
  idx_.resize(idx_.size() + kS);
  expect_error(".idx", "multimodal");
}

TEST_F(Corrupted, IdxTooShortForHeader) {
  idx_.resize(20);
  expect_error(".idx", "too short");
}

TEST_F(Corrupted, HeaderCountsLargerThanFile) {
  poke<uint64_t>(18, uint64_t{1} << 61);
  expect_error(".idx", "header claims");
}

TEST_F(Corrupted, NegativeLength) {
  poke<int32_t>(kLengths + 4 * 2, -1);
  expect_error(".idx", "negative length");
}

TEST_F(Corrupted, InconsistentPointer) {
  int64_t p5;
  std::memcpy(&p5, idx_.data() + kPointers + 8 * 5, 8);
  poke<int64_t>(kPointers + 8 * 5, p5 + 2);
  expect_error(".idx", "inconsistent pointers");
}

TEST_F(Corrupted, PointerPastEndOfBin) {
  poke<int64_t>(kPointers + 8 * (kS - 1), int64_t{1} << 40);
  expect_error(".idx", "sequence 39 starts at byte");
}

TEST_F(Corrupted, FirstPointerNotZero) {
  poke<int64_t>(kPointers, 2);
  expect_error(".idx", "sequence 0 starts at byte 2");
}

TEST_F(Corrupted, DocIndexNotStartingAtZero) {
  poke<int64_t>(kDocs, 1);
  expect_error(".idx", "document_indices[0] is 1");
}

TEST_F(Corrupted, DocIndexDecreasing) {
  poke<int64_t>(kDocs + 8 * 10, 3);
  expect_error(".idx", "document_indices decreases");
}

TEST_F(Corrupted, DocIndexNotEndingAtSequenceCount) {
  poke<int64_t>(kDocs + 8 * kS, static_cast<int64_t>(kS) - 1);
  expect_error(".idx", "must equal the sequence count 40");
}

}  // namespace
}  // namespace collage
