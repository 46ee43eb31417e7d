// The probe process BERT HDF5 files are opened in first (src/data/bert/hdf5_probe.h): files on
// which libhdf5 crashes, allocates gigabytes or never returns are refused with an Error naming the
// file, and this process goes on; one probe serves a whole shard set.
#include "data/bert/hdf5_probe.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "data/bert/bert_hdf5.h"
#include "data/bert/bert_shards.h"
#include "reference_fixture.h"

namespace collage {
namespace {

using testing::TempDir;

const std::string kFixtures = std::string(COLLAGE_FIXTURES) + "/bert_hdf5";
// Inputs of tests/fuzz/fuzz_bert_hdf5 on which libhdf5 1.10.8 misbehaves by itself, inside its
// first lookups of the file's own metadata (tests/fuzz/README.md).
const std::string kFound = std::string(COLLAGE_SOURCE_DIR) + "/tests/fuzz/regressions/bert_hdf5/";

std::string error_opening(const std::string& path) {
  try {
    BertHdf5File file(path, BertHdf5File::kUnknownVocab);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << path << " opened";
  return "";
}

TEST(Hdf5Probe, ACrashInsideLibhdf5IsAnErrorNamingTheFile) {
  // libhdf5 copies into the null buffer a failed malloc of the root group's heap left it.
  const std::string path = kFound + "libhdf5-local-heap-of-impossible-size";
  const std::string e = error_opening(path);
  EXPECT_HAS(e, path + ": libhdf5 ");
  // A release build dies of SIGSEGV; under AddressSanitizer the probe reports the SEGV and
  // exits 1, and its summary line is quoted.
  EXPECT_HAS(e, "SEGV");
  EXPECT_HAS(e, "the file is damaged");
}

TEST(Hdf5Probe, GigabytesOfMetadataAreRefusedWithinTheMemoryLimit) {
  // Each makes libhdf5 ask for 4 to 8 GB (one grows past 7 GB and runs for over 30 s when
  // opened without the probe): every one is refused, naming the file. A 256 MiB limit, so that
  // the one that grows reaches it soon, also under AddressSanitizer.
  set_hdf5_probe_limits({.extra_memory_bytes = int64_t{256} << 20});
  for (const char* name :
       {"libhdf5-local-heap-of-4-gb", "libhdf5-local-heap-that-grows-past-7-gb",
        "libhdf5-superblock-read-that-grows-past-4-gb", "libhdf5-object-header-of-4-gb"}) {
    SCOPED_TRACE(name);
    const std::string e = error_opening(kFound + name);
    EXPECT_HAS(e, kFound + name + ": ");
    // Ended by the memory limit, not by the 60 s per file.
    EXPECT_EQ(e.find("took more than"), std::string::npos) << e;
  }
  set_hdf5_probe_limits({});
}

TEST(Hdf5Probe, AFileThatNeverOpensIsStoppedAfterItsTime) {
  // A named pipe: open(2) waits for a writer that never comes, as on a stalled file system.
  TempDir dir;
  const std::string path = dir.file("pipe.hdf5");
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  set_hdf5_probe_limits({.seconds_per_file = 0.5});
  const std::string e = error_opening(path);
  set_hdf5_probe_limits({});
  EXPECT_HAS(e, path + ": opening it took more than 0.5 s");
}

TEST(Hdf5Probe, RefusalsReadTheSameAsOpeningInProcess) {
  // A file collage itself refuses: the probe's message is the one opening it here gives.
  const std::string path = kFixtures + "/wrong_rank.hdf5";
  const std::string probed = error_opening(path);
  std::string here;
  try {
    BertHdf5File file(path, BertHdf5File::kUnknownVocab, BertHdf5File::kDefaultCacheBytes,
                      Hdf5Probe::kAlreadyRun);
  } catch (const Error& e) {
    here = e.what();
  }
  EXPECT_EQ(probed, here);
  EXPECT_HAS(probed, "dataset 'next_sentence_labels' has rank 2; expected 1");
}

TEST(Hdf5Probe, OneProbeServesAShardSetAndNamesTheBadShard) {
  const int64_t before = hdf5_probes_started();
  const BertShardSet shards(kFixtures + "/shards", BertHdf5File::kUnknownVocab);
  EXPECT_GT(shards.num_files(), 1);
  EXPECT_EQ(hdf5_probes_started() - before, 1);
  // A reader opening a shard of the set: not probed again while the file is unchanged.
  (void)shards.open(0);
  EXPECT_EQ(hdf5_probes_started() - before, 1);
  // A shard replaced since (here: its modification time) is probed again, alone.
  TempDir copy;
  std::filesystem::copy_file(kFixtures + "/valid_int32.hdf5", copy.file("a.hdf5"));
  const BertShardSet one(copy.file("a.hdf5"), BertHdf5File::kUnknownVocab);
  EXPECT_EQ(hdf5_probes_started() - before, 2);
  std::filesystem::last_write_time(
      copy.file("a.hdf5"),
      std::filesystem::last_write_time(copy.file("a.hdf5")) - std::chrono::seconds(10));
  (void)one.open(0);
  EXPECT_EQ(hdf5_probes_started() - before, 3);

  // Shards a and c are sound, b crashes libhdf5: the error names b, and c is not needed.
  TempDir dir;
  std::filesystem::copy_file(kFixtures + "/valid_int32.hdf5", dir.file("a.hdf5"));
  std::filesystem::copy_file(kFound + "libhdf5-local-heap-of-impossible-size", dir.file("b.hdf5"));
  std::filesystem::copy_file(kFixtures + "/valid_int32.hdf5", dir.file("c.hdf5"));
  std::string e;
  try {
    BertShardSet bad(dir.str(), BertHdf5File::kUnknownVocab);
  } catch (const Error& error) {
    e = error.what();
  }
  EXPECT_HAS(e, dir.file("b.hdf5") + ": libhdf5 ");
}

}  // namespace
}  // namespace collage
