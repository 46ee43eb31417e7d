// `collage prepare-bert` end to end: runs the real binary on text written here, then checks the
// shards with h5py (tests/cli/check_prepare_bert.py, independent of collage's reader) against
// the WordPiece ids of the same text; reruns must give the same bytes whatever --threads.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "data/text/wordpiece_tokenizer.h"
#include "run_collage.h"

namespace {

namespace fs = std::filesystem;

const std::string kVocab = COLLAGE_SOURCE_DIR "/data/assets/bert-uncased/vocab.txt";
const std::string kChecker = COLLAGE_SOURCE_DIR "/tests/cli/check_prepare_bert.py";

bool has_h5py() { return std::system("/usr/bin/python3 -c 'import h5py' 2>/dev/null") == 0; }

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

CommandResult run_shell(const std::string& command) {
  CommandResult run;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return run;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) run.output.append(buffer, n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// Documents of 20 to 60 sentences of common words and punctuation, a blank line after each;
// each sentence starts with its number, so spans of tokens are rarely ambiguous.
void write_text(const fs::path& path, int documents, uint64_t seed, int& number) {
  static const char* words[] = {"the",     "house",  "river", "walked",  "slowly", "bright",
                                "morning", "and",    "she",   "he",      "said",   "little",
                                "garden",  "window", "under", "over",    "green",  "old",
                                "friend",  "letter", "quiet", "Ünïcödé", "don't",  "(again)"};
  std::mt19937_64 g(seed);
  std::ofstream out(path);
  for (int d = 0; d < documents; ++d) {
    for (int k = 0, n = 20 + static_cast<int>(g() % 41); k < n; ++k) {
      out << number++;
      for (int w = 0, m = 3 + static_cast<int>(g() % 14); w < m; ++w)
        out << ' ' << words[g() % (sizeof words / sizeof *words)];
      out << (g() % 3 == 0 ? " !\n" : ".\n");
    }
    out << "\n";
  }
}

class PrepareBertCli : public testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kVocab))
      GTEST_SKIP() << "BERT vocabulary missing: run scripts/install-deps.sh --assets";
    // One directory per test: ctest runs the tests of this file at the same time.
    dir_ = fs::path(testing::TempDir()) /
           (std::string("prepare_bert_cli_") +
            testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  fs::path dir_;
};

TEST_F(PrepareBertCli, HelpTeachesTheFormatAndTheRealData) {
  const CommandResult run = run_collage("prepare-bert --help");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (const char* needle :
       {"NVIDIA DeepLearningExamples", "bert_pretrain_wikicorpus_tokenized_hdf5_seqlen128",
        "the same reader reads those and these", "input_ids i4", "next_sentence_labels i1",
        "--max-seq-length INT=128", "--max-predictions-per-seq INT=20",
        "--masked-lm-prob FLOAT=0.15", "--dupe-factor INT=5", "--short-seq-prob FLOAT=0.1",
        "--shard-size INT=100000", "--seed UINT=12345", "byte-identical",
        "data/assets/bert-uncased/vocab.txt"})
    EXPECT_NE(run.output.find(needle), std::string::npos) << needle;
  EXPECT_NE(run_collage("--help").output.find("prepare-bert"), std::string::npos);
}

TEST_F(PrepareBertCli, ShardsPassTheH5pyCheckAndRerunsAreByteIdentical) {
  if (!has_h5py()) GTEST_SKIP() << "/usr/bin/python3 has no h5py";
  int number = 0;
  write_text(dir_ / "a.txt", 25, 1, number);
  write_text(dir_ / "b.txt", 15, 2, number);

  // What the check compares against: the tokenizer's ids of each document, line by line.
  const auto tok = collage::WordpieceTokenizer::load(kVocab);
  nlohmann::json documents = nlohmann::json::array();
  for (const char* name : {"a.txt", "b.txt"}) {
    std::ifstream in(dir_ / name);
    std::vector<int32_t> doc;
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty()) {
        tok.encode_append(line, doc);
      } else if (!doc.empty()) {
        documents.push_back(doc);
        doc.clear();
      }
    }
  }
  ASSERT_EQ(documents.size(), 40u);

  const std::string common =
      " --max-seq-length 64 --max-predictions-per-seq 10 --dupe-factor 4"
      " --shard-size 500 --seed 7 --input '" +
      (dir_ / "*.txt").string() + "'";
  const CommandResult run = run_collage("prepare-bert --threads 2 --output-dir '" +
                                        (dir_ / "out").string() + "'" + common);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("input      2 file(s)"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("40 documents"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("MB/s"), std::string::npos) << run.output;
  const auto at = run.output.find("instances  ");
  ASSERT_NE(at, std::string::npos) << run.output;
  const int64_t instances = std::stoll(run.output.substr(at + 11));
  ASSERT_GT(instances, 1000);

  nlohmann::json expected = {{"seq_len", 64},
                             {"max_predictions", 10},
                             {"masked_lm_prob", 0.15},
                             {"shard_size", 500},
                             {"instances", instances},
                             {"cls", tok.id_of("[CLS]")},
                             {"sep", tok.id_of("[SEP]")},
                             {"mask", tok.id_of("[MASK]")},
                             {"vocab_size", tok.vocab_size()},
                             {"documents", documents}};
  std::ofstream(dir_ / "expected.json") << expected.dump();
  const CommandResult check =
      run_shell("/usr/bin/python3 '" + kChecker + "' '" + (dir_ / "out").string() + "' '" +
                (dir_ / "expected.json").string() + "'");
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_NE(check.output.find("checked"), std::string::npos) << check.output;
  std::printf("%s", check.output.c_str());

  // One thread, same seed: the same files, byte for byte.
  const CommandResult again = run_collage("prepare-bert --threads 1 --output-dir '" +
                                          (dir_ / "again").string() + "'" + common);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  int shards = 0;
  for (const auto& entry : fs::directory_iterator(dir_ / "out")) {
    ++shards;
    const auto twin = dir_ / "again" / entry.path().filename();
    ASSERT_TRUE(fs::exists(twin)) << twin;
    EXPECT_EQ(slurp(entry.path()), slurp(twin)) << entry.path();
  }
  EXPECT_EQ(shards, (instances + 499) / 500);

  // The check sees one wrong label.
  const std::string shard = (dir_ / "again" / "part_00001.hdf5").string();
  ASSERT_EQ(run_shell("/usr/bin/python3 '" + kChecker + "' --tamper '" + shard + "' 7").exit_code,
            0);
  const CommandResult tampered =
      run_shell("/usr/bin/python3 '" + kChecker + "' '" + (dir_ / "again").string() + "' '" +
                (dir_ / "expected.json").string() + "'");
  EXPECT_EQ(tampered.exit_code, 1) << tampered.output;
  EXPECT_NE(tampered.output.find("part_00001.hdf5 row 7"), std::string::npos) << tampered.output;
}

TEST_F(PrepareBertCli, ErrorsNameTheFileOrOption) {
  std::ofstream(dir_ / "t.txt") << "one sentence.\nanother one.\n";
  const std::string out = " --output-dir '" + (dir_ / "out").string() + "'";
  const auto expect_error = [&](const std::string& args, const std::string& needle) {
    const CommandResult run = run_collage("prepare-bert" + args);
    EXPECT_EQ(run.exit_code, 1) << args << "\n" << run.output;
    EXPECT_NE(run.output.find(needle), std::string::npos) << args << "\n" << run.output;
  };
  const std::string input = " --input '" + (dir_ / "t.txt").string() + "'";
  expect_error(input + out + " --vocab-file '" + (dir_ / "none.txt").string() + "'",
               "none.txt: no such file (a BERT vocab.txt");
  expect_error(" --input '" + (dir_ / "nope.txt").string() + "'" + out,
               "nope.txt: no such file (--input)");
  expect_error(input + out + " --max-seq-length 4", "collage: error: --max-seq-length 4");
  expect_error(input + out + " --max-predictions-per-seq 200",
               "--max-predictions-per-seq 200: must be in [1, --max-seq-length = 128]");
  EXPECT_FALSE(fs::exists(dir_ / "out" / "part_00000.hdf5"));
  // The one-document text makes valid shards (B then comes from the same document).
  const CommandResult ok = run_collage("prepare-bert" + input + out);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_TRUE(fs::exists(dir_ / "out" / "part_00000.hdf5"));
}

}  // namespace
