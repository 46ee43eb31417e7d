// Safetensors written a tensor at a time, split into Hugging Face's shards with their index, and
// read lazily (src/checkpoint/safetensors.h, safetensors_shards.h, safetensors_reader.h): the plans
// against hand-computed Hugging Face plans, --max-shard-size parsing, round trips through one
// file and through many shards, the index, the order the bytes are asked in, and every refusal
// naming its file.
#include "checkpoint/safetensors_shards.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../error_of.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_reader.h"
#include "core/error.h"

namespace collage {
namespace {

namespace fs = std::filesystem;
using test::error_of;

// The message of the Error a call threw (error_of) holds `fragment`.
::testing::AssertionResult contains(const std::string& text, const std::string& fragment) {
  if (text.find(fragment) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not say '" << fragment << "'";
}
#define EXPECT_CONTAINS(text, fragment) EXPECT_TRUE(contains((text), (fragment)))

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void spit(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// n bytes that differ from tensor to tensor (`seed`) and along the tensor.
std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; i++) bytes[i] = uint8_t(seed * 31 + i * 7 + 1);
  return bytes;
}

SafetensorsTensor tensor(const std::string& name, const std::string& dtype,
                         std::vector<int64_t> shape, uint8_t seed) {
  SafetensorsTensor t{name, dtype, std::move(shape), {}};
  t.bytes = pattern(safetensors_tensor_bytes({t.name, t.dtype, t.shape}), seed);
  return t;
}

std::vector<SafetensorsTensorInfo> infos(const std::vector<SafetensorsTensor>& tensors) {
  std::vector<SafetensorsTensorInfo> out;
  for (const SafetensorsTensor& t : tensors) out.push_back({t.name, t.dtype, t.shape});
  return out;
}

// A callback over `tensors` that records which index it was asked for.
SafetensorsBytesFn recording(const std::vector<SafetensorsTensor>& tensors,
                             std::vector<size_t>& asked) {
  return [&tensors, &asked](size_t i) {
    asked.push_back(i);
    return tensors.at(i).bytes;
  };
}

std::vector<size_t> iota(size_t n) {
  std::vector<size_t> v(n);
  for (size_t i = 0; i < n; i++) v[i] = i;
  return v;
}

// Tensors of several dtypes and shapes (a scalar, an empty one), 2 to 48 bytes each.
std::vector<SafetensorsTensor> model_tensors() {
  return {tensor("wte.weight", "BF16", {4, 3}, 1),
          tensor("h.0.ln_1.weight", "F32", {3}, 2),
          tensor("h.0.attn.bias", "F32", {2, 6}, 3),
          tensor("step", "I64", {}, 4),
          tensor("empty", "F32", {0, 5}, 5),
          tensor("h.0.mlp.fc", "F16", {5}, 6),
          tensor("mask", "U8", {2}, 7)};
}

const std::map<std::string, std::string> kMetadata = {{"format", "pt"}, {"step", "12"}};

class SafetensorsFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("collage_shards_" + std::to_string(::getpid()) + "_" +
                                        info->test_suite_name() + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A new directory under the test's.
  fs::path subdir(const std::string& name) {
    fs::create_directories(dir_ / name);
    return dir_ / name;
  }

  fs::path dir_;
};

// The reader's tensor `name` equals `expected` in everything and bytes.
void expect_read(const SafetensorsReader& reader, const SafetensorsTensor& expected) {
  ASSERT_TRUE(reader.contains(expected.name)) << expected.name;
  const SafetensorsStoredTensor& t = reader.tensor(expected.name);
  EXPECT_EQ(t.dtype, expected.dtype) << expected.name;
  EXPECT_EQ(t.shape, expected.shape) << expected.name;
  EXPECT_EQ(t.bytes, expected.bytes.size()) << expected.name;
  EXPECT_EQ(reader.read(expected.name), expected.bytes) << expected.name;
}

// --- the streamed single-file writer ---------------------------------------------------------

using SafetensorsStreamed = SafetensorsFiles;

TEST_F(SafetensorsStreamed, AsksForEachTensorOnceInOrderAndWritesWhatTheWholeWriterWrites) {
  const std::vector<SafetensorsTensor> tensors = model_tensors();
  std::vector<size_t> asked;
  const fs::path streamed = dir_ / "streamed.safetensors", whole = dir_ / "whole.safetensors";
  const uint64_t bytes =
      write_safetensors_streamed(streamed, infos(tensors), kMetadata, recording(tensors, asked));
  EXPECT_EQ(asked, iota(tensors.size()));
  EXPECT_EQ(write_safetensors(whole, tensors, kMetadata), bytes);
  EXPECT_EQ(fs::file_size(streamed), bytes);
  EXPECT_EQ(slurp(streamed), slurp(whole));
}

TEST_F(SafetensorsStreamed, RefusesABadCallbackNamingTheTensorAndTheFile) {
  const std::vector<SafetensorsTensor> tensors = model_tensors();
  const std::string path = (dir_ / "m.safetensors").string();
  const std::string message = error_of([&] {
    write_safetensors_streamed(path, infos(tensors), {}, [&](size_t i) {
      return i == 2 ? std::vector<uint8_t>(40) : tensors[i].bytes;
    });
  });
  EXPECT_CONTAINS(message,
                  std::string(path + ": tensor 'h.0.attn.bias' has 40 bytes, but shape [2, 6] "
                                     "of F32 needs 48"));
  // Entries are checked before the file exists.
  const std::string other = (dir_ / "other.safetensors").string();
  EXPECT_CONTAINS(error_of([&] {
                    write_safetensors_streamed(other, {{"a", "F32", {1}}, {"a", "F32", {1}}}, {},
                                               [](size_t) { return std::vector<uint8_t>(4); });
                  }),
                  std::string(other + ": tensor name 'a' is empty, reserved or repeated"));
  EXPECT_CONTAINS(error_of([&] {
                    write_safetensors_streamed(other, {{"a", "F32", {-1}}}, {},
                                               [](size_t) { return std::vector<uint8_t>(); });
                  }),
                  std::string(other + ": tensor 'a': shape [-1] of F32 has a negative dimension"));
  EXPECT_FALSE(fs::exists(other));
}

// --- the shard plan, names and sizes ----------------------------------------------------------

using Shards = std::vector<std::vector<size_t>>;

Shards plan(const std::vector<uint64_t>& bytes, uint64_t max) {
  const SafetensorsShardPlan p = plan_safetensors_shards(bytes, max);
  EXPECT_EQ(p.shard_of.size(), bytes.size());
  for (size_t s = 0; s < p.shards.size(); s++)
    for (size_t i : p.shards[s]) EXPECT_EQ(p.shard_of[i], s) << "tensor " << i;
  return p.shards;
}

TEST(SafetensorsShardPlan, MatchesHuggingFacesPlans) {
  // Worked by hand through huggingface_hub's split_state_dict_into_shards_factory.
  // 4+4 = 8; +4 > 10 closes it; 4+10 > 10 closes [4]; 10+3 > 10 closes [10]; 12 > 10 is its own
  // shard, listed before the open [3], which then takes the 5.
  EXPECT_EQ(plan({4, 4, 4, 10, 3, 12, 5}, 10), (Shards{{0, 1}, {2}, {3}, {5}, {4, 6}}));
  EXPECT_EQ(plan({6, 6, 2, 6, 2, 2}, 10), (Shards{{0}, {1, 2}, {3, 4, 5}}));
  // A shard may hold exactly the max; one byte more starts a new one.
  EXPECT_EQ(plan({3, 7}, 10), (Shards{{0, 1}}));
  EXPECT_EQ(plan({3, 8}, 10), (Shards{{0}, {1}}));
  EXPECT_EQ(plan({10, 10}, 10), (Shards{{0}, {1}}));
  // Bigger than the max: alone, and in the list when it is met.
  EXPECT_EQ(plan({11, 1}, 10), (Shards{{0}, {1}}));
  EXPECT_EQ(plan({1, 11}, 10), (Shards{{1}, {0}}));
  EXPECT_EQ(plan({1, 11, 2, 30, 3}, 10), (Shards{{1}, {3}, {0, 2, 4}}));
  // A max of 1 byte: every tensor of more is its own shard; empty tensors gather in the open one.
  EXPECT_EQ(plan({4, 4, 4}, 1), (Shards{{0}, {1}, {2}}));
  EXPECT_EQ(plan({6, 0, 8, 0}, 1), (Shards{{0}, {2}, {1, 3}}));
  // Everything fits: one shard; no tensors: one empty shard.
  EXPECT_EQ(plan({1, 2, 3}, kDefaultMaxShardBytes), (Shards{{0, 1, 2}}));
  EXPECT_EQ(plan({}, 10), (Shards{{}}));
  EXPECT_EQ(plan_safetensors_shards({4, 4, 4, 10, 3, 12, 5}, 10).total_size, 42u);
  // Sizes near 2^64 do not wrap.
  EXPECT_EQ(plan({UINT64_MAX - 1, 1, 1}, UINT64_MAX - 1), (Shards{{0}, {1, 2}}));
}

TEST(SafetensorsShardPlan, NamesFilesAsHuggingFaceDoes) {
  EXPECT_EQ(safetensors_shard_file(0, 1), "model.safetensors");
  EXPECT_EQ(safetensors_shard_file(0, 3), "model-00001-of-00003.safetensors");
  EXPECT_EQ(safetensors_shard_file(2, 3), "model-00003-of-00003.safetensors");
  EXPECT_EQ(safetensors_shard_file(11, 12), "model-00012-of-00012.safetensors");
}

TEST(SafetensorsShardSize, ParsesHuggingFacesSizes) {
  EXPECT_EQ(parse_max_shard_size("5GB"), 5'000'000'000u);
  EXPECT_EQ(parse_max_shard_size("5gb"), 5'000'000'000u);
  EXPECT_EQ(parse_max_shard_size(" 10 GB "), 10'000'000'000u);
  EXPECT_EQ(parse_max_shard_size("123456"), 123456u);
  EXPECT_EQ(parse_max_shard_size("1KB"), 1000u);
  EXPECT_EQ(parse_max_shard_size("200MB"), 200'000'000u);
  EXPECT_EQ(parse_max_shard_size("2TB"), 2'000'000'000'000u);
  EXPECT_EQ(parse_max_shard_size("1KiB"), 1024u);
  EXPECT_EQ(parse_max_shard_size("3mib"), 3u << 20);
  EXPECT_EQ(parse_max_shard_size("2GiB"), uint64_t{2} << 30);
  EXPECT_EQ(parse_max_shard_size("1TIB"), uint64_t{1} << 40);
  EXPECT_EQ(parse_max_shard_size("1.5GB"), 1'500'000'000u);
  EXPECT_EQ(parse_max_shard_size("0.5KiB"), 512u);
  EXPECT_EQ(parse_max_shard_size("4.35KB"), 4350u);  // exact, where 4.35 * 1000 in doubles is less
  EXPECT_EQ(parse_max_shard_size("1.0001KB"), 1000u);  // rounded down to whole bytes
  EXPECT_EQ(parse_max_shard_size("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(kDefaultMaxShardBytes, parse_max_shard_size("5GB"));
}

TEST(SafetensorsShardSize, RefusesOtherTextNamingIt) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "no number"},
      {"GB", "no number"},
      {"5XB", "unknown unit 'XB'"},
      {"5 G B", "unknown unit 'G B'"},
      {"5B", "unknown unit 'B'"},
      {"-1", "no number"},
      {"1e9", "unknown unit 'e9'"},
      {"1.5", "a fraction of a byte"},
      {"0", "a shard needs at least 1 byte"},
      {"0.0001KB", "a shard needs at least 1 byte"},
      {"18446744073709551616", "past 2^64 - 1 bytes"},
      {"20000000TB", "past 2^64 - 1 bytes"},
      {"1.0000000000000000001GB", "more than 18 decimals"}};
  for (const auto& [text, reason] : bad) {
    const std::string message = error_of([&] { parse_max_shard_size(text); });
    EXPECT_CONTAINS(message, std::string("max shard size '" + text + "': " + reason)) << text;
    EXPECT_CONTAINS(message, std::string("KiB")) << text;
  }
}

// --- writing a directory ----------------------------------------------------------------------

using SafetensorsShards = SafetensorsFiles;

TEST_F(SafetensorsShards, OneFileAndManyShardsReadBackTheSameTensors) {
  const std::vector<SafetensorsTensor> tensors = model_tensors();
  uint64_t total = 0;
  for (const SafetensorsTensor& t : tensors) total += t.bytes.size();

  // The default max: one model.safetensors, no index, the same bytes as write_safetensors.
  std::vector<size_t> asked;
  const fs::path one = subdir("one");
  EXPECT_EQ(write_safetensors_shards(one, infos(tensors), kMetadata, kDefaultMaxShardBytes,
                                     recording(tensors, asked)),
            std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(asked, iota(tensors.size()));
  EXPECT_FALSE(fs::exists(one / "model.safetensors.index.json"));
  write_safetensors(dir_ / "whole.safetensors", tensors, kMetadata);
  EXPECT_EQ(slurp(one / "model.safetensors"), slurp(dir_ / "whole.safetensors"));

  // A max of 1 byte: every tensor its own shard, the empty one in the last.
  asked.clear();
  const fs::path many = subdir("many");
  const std::vector<std::string> files =
      write_safetensors_shards(many, infos(tensors), kMetadata, 1, recording(tensors, asked));
  EXPECT_EQ(asked, iota(tensors.size()));
  ASSERT_EQ(files.size(), tensors.size() + 1);
  for (size_t s = 0; s + 1 < files.size(); s++)
    EXPECT_EQ(files[s], fmt::format("model-{:05d}-of-00007.safetensors", s + 1));
  EXPECT_EQ(files.back(), "model.safetensors.index.json");
  EXPECT_FALSE(fs::exists(many / "model.safetensors"));
  const std::vector<std::string> names_in_order = {
      "wte.weight", "h.0.ln_1.weight", "h.0.attn.bias", "step", "h.0.mlp.fc", "mask", "empty"};

  // A max of 24 bytes: 24 | 48 alone | 12 + 8 + 0 | 10 + 2.
  const fs::path some = subdir("some");
  EXPECT_EQ(write_safetensors_shards(some, infos(tensors), kMetadata, 24,
                                     [&](size_t i) { return tensors[i].bytes; }),
            (std::vector<std::string>{
                "model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors",
                "model.safetensors.index.json"}));
  for (const fs::path& dir : {many, some})
    EXPECT_EQ(nlohmann::json::parse(slurp(dir / "model.safetensors.index.json"))
                  .at("metadata")
                  .at("total_size"),
              total);

  for (const fs::path& dir : {one, many, some}) {
    const SafetensorsReader reader(dir.string());
    EXPECT_EQ(reader.metadata(), kMetadata) << dir;
    ASSERT_EQ(reader.tensors().size(), tensors.size()) << dir;
    for (const SafetensorsTensor& t : tensors) expect_read(reader, t);
  }
  {
    const SafetensorsReader reader(one.string());
    EXPECT_EQ(reader.index(), "");
    EXPECT_EQ(reader.files(), std::vector<std::string>{(one / "model.safetensors").string()});
    for (size_t i = 0; i < tensors.size(); i++)
      EXPECT_EQ(reader.tensors()[i].name, tensors[i].name);
  }
  const SafetensorsReader reader(many.string());
  EXPECT_EQ(reader.index(), (many / "model.safetensors.index.json").string());
  ASSERT_EQ(reader.files().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); i++) {
    EXPECT_EQ(reader.tensors()[i].name, names_in_order[i]);
    EXPECT_EQ(reader.tensors()[i].file, (many / files[i]).string());
  }
  // Each shard is a whole safetensors file that the single-file reader reads as it is, with the
  // same metadata.
  for (size_t s = 0; s < tensors.size(); s++) {
    const SafetensorsFile shard = read_safetensors((many / files[s]).string());
    EXPECT_EQ(shard.metadata, kMetadata);
    ASSERT_EQ(shard.tensors.size(), 1u);
    const SafetensorsTensor& t = shard.tensors[0];
    EXPECT_EQ(t.name, names_in_order[s]);
    EXPECT_EQ(t.bytes, reader.read(t.name));
    EXPECT_EQ(t.shape, reader.tensor(t.name).shape);
  }
  // The index, by name and as a path; a single file by its path.
  EXPECT_EQ(SafetensorsReader((many / "model.safetensors.index.json").string()).tensors().size(),
            tensors.size());
  const SafetensorsReader file((dir_ / "whole.safetensors").string());
  for (const SafetensorsTensor& t : tensors) expect_read(file, t);
  EXPECT_CONTAINS(error_of([&] { file.read("nope"); }),
                  std::string((dir_ / "whole.safetensors").string() + ": no tensor 'nope'"));
}

TEST_F(SafetensorsShards, WritesTheIndexAsTransformersDoes) {
  // Names out of order, one tensor over the max: shards [big], [z, a.weight], [m].
  const std::vector<SafetensorsTensor> tensors = {
      tensor("z", "F32", {2}, 1), tensor("big", "F32", {8}, 2), tensor("a.weight", "BF16", {3}, 3),
      tensor("m", "U8", {12}, 4)};
  const fs::path dir = subdir("out");
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  EXPECT_EQ(write_safetensors_shards(dir, infos(tensors), metadata, 16,
                                     [&](size_t i) { return tensors[i].bytes; }),
            (std::vector<std::string>{
                "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                "model-00003-of-00003.safetensors", "model.safetensors.index.json"}));
  // 8 + 6 = 14 fits 16 around the 32-byte tensor; + 12 does not.
  EXPECT_EQ(slurp(dir / "model.safetensors.index.json"),
            R"({
  "metadata": {
    "total_size": 58
  },
  "weight_map": {
    "a.weight": "model-00002-of-00003.safetensors",
    "big": "model-00001-of-00003.safetensors",
    "m": "model-00003-of-00003.safetensors",
    "z": "model-00002-of-00003.safetensors"
  }
}
)");
  const nlohmann::json index = nlohmann::json::parse(slurp(dir / "model.safetensors.index.json"));
  EXPECT_EQ(index.at("metadata").at("total_size"), 58);
  for (const char* file : {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                           "model-00003-of-00003.safetensors"})
    EXPECT_EQ(read_safetensors((dir / file).string()).metadata, metadata) << file;
  const SafetensorsFile second = read_safetensors((dir / "model-00002-of-00003.safetensors"));
  ASSERT_EQ(second.tensors.size(), 2u);
  EXPECT_EQ(second.tensors[0].name, "z");
  EXPECT_EQ(second.tensors[1].name, "a.weight");
  // Non-ASCII names are escaped as Python's json.dumps escapes them.
  EXPECT_CONTAINS(
      safetensors_index_json({{"caf\xc3\xa9", "U8", {1}}}, plan_safetensors_shards({1}, 10)),
      std::string(R"("caf\u00e9": "model.safetensors")"));
}

TEST_F(SafetensorsShards, AsksInOrderWhenABigTensorGetsItsOwnShardFirst) {
  // Shard 1 is the 48-byte tensor (index 1), shard 2 the two small ones around it: still asked
  // 0, 1, 2, each once, with shard 2's file open while shard 1 is written.
  const std::vector<SafetensorsTensor> tensors = {
      tensor("a", "F32", {1}, 1), tensor("b", "F32", {12}, 2), tensor("c", "F32", {2}, 3)};
  std::vector<size_t> asked;
  const fs::path dir = subdir("out");
  write_safetensors_shards(dir, infos(tensors), {}, 16, recording(tensors, asked));
  EXPECT_EQ(asked, iota(3));
  const SafetensorsFile first = read_safetensors((dir / "model-00001-of-00002.safetensors"));
  const SafetensorsFile second = read_safetensors((dir / "model-00002-of-00002.safetensors"));
  ASSERT_EQ(first.tensors.size(), 1u);
  EXPECT_EQ(first.tensors[0].bytes, tensors[1].bytes);
  ASSERT_EQ(second.tensors.size(), 2u);
  EXPECT_EQ(second.tensors[0].bytes, tensors[0].bytes);
  EXPECT_EQ(second.tensors[1].bytes, tensors[2].bytes);
}

TEST_F(SafetensorsShards, RefusesBadTensorsNamingTheFileOrDirectory) {
  const std::vector<SafetensorsTensor> tensors = model_tensors();
  const fs::path dir = subdir("out");
  const std::string message = error_of([&] {
    write_safetensors_shards(dir, infos(tensors), {}, 1, [&](size_t i) {
      return i == 3 ? std::vector<uint8_t>(7) : tensors[i].bytes;
    });
  });
  EXPECT_CONTAINS(message, std::string((dir / "model-00004-of-00007.safetensors").string() +
                                       ": tensor 'step' has 7 bytes, but shape [] of I64 needs 8"));
  // Names are unique across the shards, checked before any file is written.
  const fs::path other = subdir("other");
  EXPECT_CONTAINS(
      error_of([&] {
        write_safetensors_shards(other, {{"a", "F32", {4}}, {"a", "F32", {4}}}, {}, 1,
                                 [](size_t) { return std::vector<uint8_t>(16); });
      }),
      std::string(other.string() + ": safetensors: tensor name 'a' is empty, reserved or "
                                   "repeated"));
  EXPECT_TRUE(fs::is_empty(other));
  EXPECT_CONTAINS(
      error_of([&] {
        write_safetensors_shards((dir_ / "missing").string(), {{"a", "F32", {4}}}, {}, 1,
                                 [](size_t) { return std::vector<uint8_t>(16); });
      }),
      std::string((dir_ / "missing" / "model.safetensors").string() + ": cannot create"));
}

// --- the lazy reader's refusals ---------------------------------------------------------------

using SafetensorsReaderChecks = SafetensorsFiles;

// A safetensors file with header `json` and `data` bytes of data.
std::string with_header(std::string json, size_t data) {
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(file.data(), &n, 8);
  return file + json + std::string(data, '\0');
}

TEST_F(SafetensorsReaderChecks, RefusesBadIndexesAndShardsNamingTheFile) {
  const std::vector<SafetensorsTensor> tensors = {
      tensor("a", "F32", {2}, 1), tensor("b", "F32", {2}, 2), tensor("c", "F32", {2}, 3)};
  // A fresh three-shard directory (one tensor a shard) for each case.
  int copies = 0;
  auto fresh = [&] {
    const fs::path dir = subdir("case" + std::to_string(copies++));
    write_safetensors_shards(dir, infos(tensors), {{"format", "pt"}}, 8,
                             [&](size_t i) { return tensors[i].bytes; });
    return dir;
  };
  const std::string first = "model-00001-of-00003.safetensors";
  const std::string second = "model-00002-of-00003.safetensors";
  auto refusal = [](const fs::path& path) {
    return error_of([&] { SafetensorsReader reader(path.string()); });
  };

  fs::path dir = fresh();
  const std::string good_index = slurp(dir / kSafetensorsIndexFile);
  const std::string index = (dir / kSafetensorsIndexFile).string();
  ASSERT_EQ(SafetensorsReader(dir.string()).tensors().size(), 3u);

  spit(index, "{\"weight_map\": {");
  EXPECT_CONTAINS(refusal(dir), std::string(index + ": not a safetensors index (not JSON)"));
  spit(index, R"({"metadata": {"total_size": 24}})");
  EXPECT_CONTAINS(refusal(dir),
                  std::string(index + ": not a safetensors index (no \"weight_map\""));
  spit(index, R"({"weight_map": []})");
  EXPECT_CONTAINS(refusal(dir),
                  std::string(index + ": not a safetensors index (no \"weight_map\""));
  spit(index, R"({"weight_map": {"a": 1}})");
  EXPECT_CONTAINS(refusal(dir), std::string(index + ": weight_map value of 'a' is not a string"));
  spit(index, R"({"weight_map": {"a": "../model-00001-of-00003.safetensors"}})");
  EXPECT_CONTAINS(refusal(dir),
                  std::string(index + ": weight_map maps 'a' to "
                                      "'../model-00001-of-00003.safetensors', not a file "
                                      "name beside the index"));
  // A file that does not exist.
  nlohmann::json edited = nlohmann::json::parse(good_index);
  edited["weight_map"]["c"] = "model-00004-of-00003.safetensors";
  spit(index, edited.dump());
  EXPECT_CONTAINS(refusal(dir), std::string(index + ": weight_map maps 'c' to " +
                                            (dir / "model-00004-of-00003.safetensors").string() +
                                            ", which does not exist"));
  // A tensor mapped to a shard whose header lacks it (c is in the third).
  edited = nlohmann::json::parse(good_index);
  edited["weight_map"]["c"] = first;
  spit(index, edited.dump());
  EXPECT_CONTAINS(refusal(dir), std::string(index + ": tensor 'c' is mapped to " +
                                            (dir / first).string() + ", whose header lacks it"));
  // A tensor in the index that no shard holds.
  edited = nlohmann::json::parse(good_index);
  edited["weight_map"]["d"] = second;
  spit(index, edited.dump());
  EXPECT_CONTAINS(refusal(dir), std::string(index + ": tensor 'd' is mapped to " +
                                            (dir / second).string() + ", whose header lacks it"));
  // A shard's tensor the index does not name.
  spit(index, good_index);
  write_safetensors((dir / second).string(), {tensors[1], tensor("d", "U8", {1}, 4)}, {});
  EXPECT_CONTAINS(refusal(dir),
                  (dir / second).string() + ": tensor 'd' is not in the index " + index);

  // A tensor in two shards: the second shard rewritten to hold a and b.
  dir = fresh();
  write_safetensors((dir / second).string(), {tensors[0], tensors[1]}, {});
  EXPECT_CONTAINS(refusal(dir), std::string((dir / first).string() + " and " +
                                            (dir / second).string() + " both hold tensor 'a'"));

  // A truncated shard: refused from its size, before any data is read.
  dir = fresh();
  std::string shard = slurp(dir / second);
  spit(dir / second, shard.substr(0, shard.size() - 1));
  EXPECT_CONTAINS(refusal(dir), std::string((dir / second).string() +
                                            ": bad safetensors header: tensor 'b': data_offsets "
                                            "outside the 7 bytes of data"));
  // Bad header JSON, an unknown dtype, a shape that does not fit the offsets, trailing bytes.
  const std::vector<std::pair<std::string, std::string>> headers = {
      {R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", "bad safetensors header"},
      {R"({"b":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})",
       "bad safetensors header: tensor 'b': unknown safetensors dtype 'F33'"},
      {R"({"b":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
       "bad safetensors header: tensor 'b': shape [3] of F32 needs 12 bytes, data_offsets span "
       "8"},
      {R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
       "the tensors cover 4 of the 8 data bytes"}};
  for (const auto& [json, reason] : headers) {
    spit(dir / second, with_header(json, 8));
    EXPECT_CONTAINS(refusal(dir), std::string((dir / second).string() + ": " + reason)) << json;
  }
  // The shard itself, as a file, is refused the same way.
  EXPECT_CONTAINS(refusal(dir / second), std::string((dir / second).string() +
                                                     ": the tensors cover 4 of the 8 data bytes"));
}

TEST_F(SafetensorsReaderChecks, RefusesADirectoryWithoutOneModelNamingBothFiles) {
  const fs::path empty = subdir("empty");
  EXPECT_CONTAINS(
      error_of([&] { SafetensorsReader reader(empty.string()); }),
      std::string(empty.string() +
                  ": neither model.safetensors.index.json nor model.safetensors is there"));
  const fs::path both = subdir("both");
  write_safetensors((both / "model.safetensors").string(), {tensor("a", "U8", {2}, 1)}, {});
  spit(both / "model.safetensors.index.json", R"({"weight_map": {"a": "model.safetensors"}})");
  EXPECT_CONTAINS(error_of([&] { SafetensorsReader reader(both.string()); }),
                  std::string(both.string() + ": holds both model.safetensors and "
                                              "model.safetensors.index.json"));
  EXPECT_CONTAINS(error_of([&] { SafetensorsReader reader((dir_ / "nope.safetensors").string()); }),
                  std::string((dir_ / "nope.safetensors").string() + ": cannot open"));
}

}  // namespace
}  // namespace collage
