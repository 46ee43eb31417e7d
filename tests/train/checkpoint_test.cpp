// Checkpoint files: round trip, the on-disk layout read back by an independent parser and
// checksum, every corruption and truncation rejected with the file named, crash safety of
// saving (a child process killed mid-save), pruning, and resume resolution.
#include "checkpoint/checkpoint.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "../error_of.h"
#include "checkpoint/training_checkpoint.h"
#include "core/error.h"
#include "dist/comm.h"
#include "dist/parallel_run.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

// CRC-32C straight from its definition: reflected polynomial 0x82F63B78, bit by bit.
uint32_t crc32c_bitwise(const uint8_t* p, size_t n) {
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < n; i++) {
    crc ^= p[i];
    for (int k = 0; k < 8; k++) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  return ~crc;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

CheckpointTensor random_tensor(std::mt19937& gen, std::string name, std::string dtype,
                               std::vector<int64_t> shape) {
  CheckpointTensor t{std::move(name), std::move(dtype), std::move(shape), {}};
  t.bytes.resize(size_t(t.numel()) * checkpoint_dtype_size(t.dtype));
  for (uint8_t& b : t.bytes) b = uint8_t(gen());
  return t;
}

// A checkpoint with every dtype, a scalar, an empty tensor and trainer-like metadata.
Checkpoint sample(int64_t step, uint32_t seed = 1, int64_t big_elements = 40) {
  std::mt19937 gen(seed);
  Checkpoint c;
  c.step = step;
  std::ostringstream rng_state;
  rng_state << gen;  // an RNG state as a string, the way the trainer stores them
  c.meta = {{"consumed_samples", step * 16},
            {"data_position", {{"epoch", 1}, {"index", 12345678901234LL}}},
            {"rng", rng_state.str()},
            {"config", "model:\n  n_layer: 2\n"},
            {"strategy", "fp32-master"},
            {"note", "ünïcödé"}};
  c.tensors.push_back(random_tensor(gen, "wte", "bf16", {5, 7}));
  c.tensors.push_back(random_tensor(gen, "optimizer.master", "f32", {big_elements}));
  c.tensors.push_back(random_tensor(gen, "positions", "i32", {2, 3, 1}));
  c.tensors.push_back(random_tensor(gen, "rng.bytes", "u8", {13}));
  c.tensors.push_back(random_tensor(gen, "scalar", "f32", {}));
  c.tensors.push_back(random_tensor(gen, "empty", "bf16", {0, 4}));
  return c;
}

void expect_same(const Checkpoint& a, const Checkpoint& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.meta, b.meta);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); i++) {
    EXPECT_EQ(a.tensors[i].name, b.tensors[i].name);
    EXPECT_EQ(a.tensors[i].dtype, b.tensors[i].dtype);
    EXPECT_EQ(a.tensors[i].shape, b.tensors[i].shape);
    EXPECT_EQ(a.tensors[i].bytes, b.tensors[i].bytes) << a.tensors[i].name;
  }
}

using test::error_of;

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() /
            ("collage_ckpt_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(int64_t step) const {
    return (fs::path(dir_) / checkpoint_file_name(step)).string();
  }
  std::string latest() const {
    std::ifstream in(fs::path(dir_) / "latest");
    std::string name;
    in >> name;
    return name;
  }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  std::string dir_;
};

TEST(Crc32c, MatchesTheDefinition) {
  const char* check = "123456789";
  EXPECT_EQ(crc32c(check, 9), 0xE3069283u);  // the CRC-32C catalogue's check value
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
  std::mt19937 gen(3);
  std::vector<uint8_t> buffer(300);
  for (uint8_t& b : buffer) b = uint8_t(gen());
  for (size_t start = 0; start < 9; start++)
    for (size_t n = 0; n + start <= buffer.size(); n += 7) {
      const uint8_t* p = buffer.data() + start;
      ASSERT_EQ(crc32c(p, n), crc32c_bitwise(p, n)) << start << " " << n;
      ASSERT_EQ(crc32c(p + n / 3, n - n / 3, crc32c(p, n / 3)), crc32c_bitwise(p, n));
    }
}

TEST_F(CheckpointTest, RoundTripsEveryField) {
  Checkpoint saved = sample(42);
  std::string path = save_checkpoint(dir_, saved, 3);
  EXPECT_EQ(path, file(42));
  EXPECT_EQ(fs::path(path).filename(), "step_00000042.ckpt");
  EXPECT_EQ(latest(), "step_00000042.ckpt");
  Checkpoint loaded = load_checkpoint(path);
  expect_same(saved, loaded);
  EXPECT_EQ(loaded.path, path);
  EXPECT_EQ(loaded.tensor("positions").bytes, saved.tensors[2].bytes);
  EXPECT_NO_THROW(verify_checkpoint(path));
  std::string missing = error_of([&] { loaded.tensor("wpe"); });
  EXPECT_EQ(missing, path + ": checkpoint of step 42 has no tensor 'wpe'");
  // Saving the same step again replaces the file.
  Checkpoint again = sample(42, 2);
  save_checkpoint(dir_, again, 3);
  expect_same(again, load_checkpoint(path));
  EXPECT_EQ(checkpoint_file_name(123456789), "step_123456789.ckpt");
}

TEST_F(CheckpointTest, OnDiskLayoutReadsBackIndependently) {
  Checkpoint saved = sample(7);
  std::vector<uint8_t> f = read_bytes(save_checkpoint(dir_, saved, 1));
  ASSERT_GE(f.size(), 36u);
  EXPECT_EQ(std::string(f.begin(), f.begin() + 12), "COLLAGE-CKPT");
  uint32_t version, crc;
  uint64_t meta_bytes, data_bytes;
  std::memcpy(&version, &f[12], 4);
  std::memcpy(&meta_bytes, &f[16], 8);
  std::memcpy(&data_bytes, &f[24], 8);
  EXPECT_EQ(version, 1u);
  const uint64_t data_start = (32 + meta_bytes + 63) / 64 * 64;
  ASSERT_EQ(f.size(), data_start + data_bytes + 4);
  std::memcpy(&crc, &f[f.size() - 4], 4);
  EXPECT_EQ(crc, crc32c_bitwise(f.data(), f.size() - 4));
  auto header = nlohmann::json::parse(f.begin() + 32, f.begin() + 32 + long(meta_bytes));
  EXPECT_EQ(header.at("step"), 7);
  EXPECT_EQ(header.at("meta"), saved.meta);
  ASSERT_EQ(header.at("tensors").size(), saved.tensors.size());
  for (size_t i = 0; i < saved.tensors.size(); i++) {
    const auto& entry = header["tensors"][i];
    const CheckpointTensor& t = saved.tensors[i];
    EXPECT_EQ(entry.at("name"), t.name);
    EXPECT_EQ(entry.at("dtype"), t.dtype);
    EXPECT_EQ(entry.at("shape").get<std::vector<int64_t>>(), t.shape);
    uint64_t offset = entry.at("offset");
    EXPECT_EQ(offset % 64, 0u);
    ASSERT_EQ(entry.at("bytes").get<uint64_t>(), t.bytes.size());
    auto begin = f.begin() + long(data_start + offset);
    EXPECT_EQ(std::vector<uint8_t>(begin, begin + long(t.bytes.size())), t.bytes) << t.name;
  }
}

// Overwrite one byte in place (no truncate-and-rewrite: ext4 flushes those on close).
void poke(const std::string& path, size_t offset, uint8_t value) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(std::streamoff(offset));
  f.put(char(value));
  ASSERT_TRUE(f.good()) << path;
}

TEST_F(CheckpointTest, EveryFlippedByteAndEveryTruncationIsAnErrorNamingTheFile) {
  const std::string path = save_checkpoint(dir_, sample(5), 1);
  const std::vector<uint8_t> good = read_bytes(path);
  for (size_t i = 0; i < good.size(); i++) {
    poke(path, i, good[i] ^ uint8_t(1u << (i % 8)));
    ASSERT_TRUE(starts_with(error_of([&] { load_checkpoint(path); }), path + ": ")) << "byte " << i;
    ASSERT_TRUE(starts_with(error_of([&] { verify_checkpoint(path); }), path + ": ")) << i;
    poke(path, i, good[i]);
  }
  EXPECT_NO_THROW(load_checkpoint(path));
  { std::ofstream(path, std::ios::binary | std::ios::app).put(0); }
  EXPECT_NE(error_of([&] { load_checkpoint(path); }).find("size mismatch"), std::string::npos);
  for (size_t n = good.size(); n-- > 0;) {
    fs::resize_file(path, n);
    std::string message = error_of([&] { load_checkpoint(path); });
    ASSERT_TRUE(starts_with(message, path + ": ")) << n << ": " << message;
  }
}

TEST_F(CheckpointTest, WrongMagicAndVersionAreNamed) {
  const std::string path = save_checkpoint(dir_, sample(5), 1);
  std::vector<uint8_t> f = read_bytes(path);
  std::vector<uint8_t> g = f;
  std::memcpy(g.data(), "MMIDIDX\0\0\0\0\0", 12);
  write_bytes(path, g);
  EXPECT_EQ(error_of([&] { load_checkpoint(path); }),
            path + ": not a collage checkpoint (bad magic)");
  g = f;
  g[12] = 2;  // version 2, checksum recomputed: only the version is wrong
  uint32_t crc = crc32c_bitwise(g.data(), g.size() - 4);
  std::memcpy(&g[g.size() - 4], &crc, 4);
  write_bytes(path, g);
  EXPECT_EQ(error_of([&] { load_checkpoint(path); }),
            path + ": unsupported checkpoint format version 2 (this build reads version 1)");
  EXPECT_TRUE(starts_with(error_of([&] { load_checkpoint(path + ".missing"); }),
                          path + ".missing: cannot open"));
}

TEST_F(CheckpointTest, SaveRejectsInconsistentTensors) {
  Checkpoint c = sample(1);
  c.tensors[0].bytes.pop_back();
  EXPECT_NE(error_of([&] { save_checkpoint(dir_, c, 1); }).find("'wte' has 69 bytes"),
            std::string::npos);
  c = sample(1);
  c.tensors[1].name = "wte";
  EXPECT_NE(error_of([&] { save_checkpoint(dir_, c, 1); }).find("repeated"), std::string::npos);
  c = sample(1);
  c.tensors[3].dtype = "f16";
  EXPECT_NE(error_of([&] { save_checkpoint(dir_, c, 1); }).find("unknown checkpoint dtype 'f16'"),
            std::string::npos);
  EXPECT_THROW(save_checkpoint(dir_, sample(-1), 1), Error);
  EXPECT_THROW(save_checkpoint(dir_, sample(1), 0), Error);
}

TEST_F(CheckpointTest, KeepPrunesOlderCheckpointsAndStaleTempFiles) {
  fs::create_directories(dir_);
  write_bytes(file(2) + ".tmp", {1, 2, 3});  // a crash while saving step 2
  write_bytes(file(9) + ".tmp", {1, 2, 3});  // not older than what is saved below: kept
  for (int64_t step = 1; step <= 5; step++) save_checkpoint(dir_, sample(step), 2);
  EXPECT_EQ(listing(), (std::vector<std::string>{"latest", "step_00000004.ckpt",
                                                 "step_00000005.ckpt", "step_00000009.ckpt.tmp"}));
  EXPECT_EQ(latest(), "step_00000005.ckpt");
}

TEST_F(CheckpointTest, ResumeFallsBackPastCorruptCheckpointsAndIgnoresTempFiles) {
  for (int64_t step : {100, 200, 300}) save_checkpoint(dir_, sample(step), 5);
  EXPECT_EQ(resolve_resume("latest", dir_), file(300));
  // A leftover temp file of a later step, even a complete one, is not a checkpoint.
  fs::copy_file(file(300), file(400) + ".tmp");
  EXPECT_EQ(resolve_resume("latest", dir_), file(300));
  auto corrupt = [](const std::string& path) {
    std::vector<uint8_t> f = read_bytes(path);
    f[f.size() / 2] ^= 0x40;
    write_bytes(path, f);
  };
  corrupt(file(300));  // the one `latest` names
  EXPECT_EQ(resolve_resume("latest", dir_), file(200));
  fs::remove(fs::path(dir_) / "latest");
  EXPECT_EQ(resolve_resume("latest", dir_), file(200));
  corrupt(file(200));
  EXPECT_EQ(resolve_resume("latest", dir_), file(100));
  corrupt(file(100));
  EXPECT_EQ(error_of([&] { resolve_resume("latest", dir_); }),
            dir_ + ": none of its 3 checkpoints verifies (see the warnings above)");
}

TEST_F(CheckpointTest, ResumeAfterARollbackFollowsLatest) {
  for (int64_t step : {100, 200, 300}) save_checkpoint(dir_, sample(step), 5);
  // Training resumed from step 100 (say, after a loss spike) and saved step 200 again: the
  // old timeline's step 300 stays on disk but is not where a restart should continue.
  Checkpoint redo = sample(200, 9);
  save_checkpoint(dir_, redo, 5);
  EXPECT_TRUE(fs::exists(file(300)));
  EXPECT_EQ(resolve_resume("latest", dir_), file(200));
  expect_same(load_checkpoint(resolve_resume("latest", dir_)), redo);
}

TEST_F(CheckpointTest, ResumeArguments) {
  EXPECT_EQ(error_of([&] { resolve_resume("latest", dir_); }),
            dir_ + ": no checkpoint to resume from (no step_*.ckpt files)");
  save_checkpoint(dir_, sample(3), 2);
  EXPECT_EQ(resolve_resume(file(3), "/elsewhere"), file(3));
  EXPECT_EQ(resolve_resume(dir_, "/elsewhere"), file(3));
  EXPECT_EQ(error_of([&] { resolve_resume(file(4), dir_); }),
            file(4) + ": no such checkpoint file");
}

// A checkpoint set is one save (checkpoint.h): the manifest and every shard carry the save's
// id, so files of two saves never verify together. Two ways to mix them, from a user's report:
// a resumed run rewrites step 60 and its rank-0 process is killed after another rank replaced
// its shard but before the manifest was rewritten (here: the old manifest put back after the
// rewrite); and step 55's shard copied over step 60's. Either way step 60 must not verify,
// naming the shard, and `--resume latest` must fall back to step 55.
TEST_F(CheckpointTest, ASetMixingSavesNeverVerifies) {
  const std::unique_ptr<Comm> world = make_single_comm();
  const RankLayout layout;
  for (int64_t step : {55, 60}) {
    Checkpoint part = sample(step);
    save_checkpoint_set(dir_, part, layout, *world, 5);
  }
  const std::string shard = (fs::path(dir_) / "step_00000060.shards" / "rank_00000.ckpt").string();
  const nlohmann::json id = read_checkpoint_header(file(60)).meta.at("save_id");
  EXPECT_EQ(read_checkpoint_header(shard).meta.at("save_id"), id);
  EXPECT_EQ(resolve_resume("latest", dir_), file(60));

  // 1. Step 60 rewritten by another save: a new id, and a mixed set once the old manifest is back.
  const std::vector<uint8_t> old_manifest = read_bytes(file(60));
  Checkpoint rewrite = sample(60, 9);
  save_checkpoint_set(dir_, rewrite, layout, *world, 5);
  EXPECT_NE(read_checkpoint_header(file(60)).meta.at("save_id"), id);
  EXPECT_NO_THROW(verify_checkpoint(file(60)));
  write_bytes(file(60), old_manifest);
  const std::string mixed = error_of([&] { verify_checkpoint(file(60)); });
  EXPECT_NE(mixed.find(shard + ": written by another save"), std::string::npos) << mixed;
  EXPECT_EQ(resolve_resume("latest", dir_), file(55));

  // 2. Step 55's shard in step 60's set (under a manifest of its own save again).
  Checkpoint again = sample(60);
  save_checkpoint_set(dir_, again, layout, *world, 5);
  EXPECT_EQ(resolve_resume("latest", dir_), file(60));
  fs::copy_file(fs::path(dir_) / "step_00000055.shards" / "rank_00000.ckpt", shard,
                fs::copy_options::overwrite_existing);
  const std::string copied = error_of([&] { verify_checkpoint(file(60)); });
  EXPECT_NE(copied.find(shard + ": a shard of step 55"), std::string::npos) << copied;
  EXPECT_EQ(resolve_resume("latest", dir_), file(55));
}

// Crash safety: a child process saves checkpoints in a loop and is killed at a random
// moment. Whatever the moment, `latest` names a checkpoint that verifies, every file with a
// checkpoint name verifies, and resume picks what `latest` names.
TEST_F(CheckpointTest, KillingASaveMidwayNeverLeavesABrokenCheckpoint) {
  std::mt19937 gen(11);
  for (int round = 0; round < 10; round++) {
    const int64_t first_step = round * 1000 + 1;
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      try {
        for (int64_t step = first_step;; step++)
          save_checkpoint(dir_, sample(step, uint32_t(step), 1 << 18), 2);  // 1 MiB a file
      } catch (...) {
        ::_exit(3);
      }
    }
    // Wait for the child's first save of this round, then kill it at a random moment.
    for (int waited = 0; latest() < checkpoint_file_name(first_step); waited++) {
      ASSERT_LT(waited, 60000) << "the child saved nothing in 60 s";
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(gen() % 30000));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the saving child failed on its own";
    const std::string named = (fs::path(dir_) / latest()).string();
    ASSERT_NO_THROW(verify_checkpoint(named)) << named;
    for (const std::string& name : listing())
      if (name.size() > 5 && name.compare(name.size() - 5, 5, ".ckpt") == 0)
        ASSERT_NO_THROW(verify_checkpoint((fs::path(dir_) / name).string())) << name;
    EXPECT_EQ(resolve_resume("latest", dir_), named);
  }
}

}  // namespace
}  // namespace collage
