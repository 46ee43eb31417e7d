// prepare_bert (src/data/bert/prepare_bert.h): the random distributions pinned to std::mt19937_64,
// truncation, masking (count, positions, labels, the 80/10/10 split), instance building on a
// synthetic corpus whose ids say where each token came from (A and B contiguous, B after A for
// label 0, the document tiled in order, NSP near 1/2), independence of the thread count, and
// the whole command on text: shards read back with collage's reader (bert_hdf5.h), every row's
// labels restoring tokens of the tokenizer's own ids, byte-identical reruns.
#include "data/bert/prepare_bert.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/bert/bert_hdf5.h"
#include "data/bert/bert_hdf5_writer.h"
#include "data/text/wordpiece_tokenizer.h"
#include "reference_fixture.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

using testing::error_of;
using testing::kBertVocab;
using testing::kNoBertVocab;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("prepare_bert_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// ---------------------------------------------------------------------------------------
// Random numbers.

TEST(BertRandom, DistributionsAreFixedFunctionsOfTheMt19937_64Stream) {
  // uniform() is the top 53 bits of one draw; randint over a power-of-two range is the draw
  // modulo the range (the rejection zone is the top 2^-61 of the range: never hit here).
  std::mt19937_64 engine(4242);
  BertRandom rng(4242);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(rng.uniform(), static_cast<double>(engine() >> 11) * 0x1.0p-53);
    EXPECT_EQ(rng.randint(-3, 4), -3 + static_cast<int64_t>(engine() % 8));
  }
}

TEST(BertRandom, RandintCoversItsRangeUniformly) {
  BertRandom rng(1);
  std::vector<int> counts(7, 0);
  const int draws = 70000;
  for (int i = 0; i < draws; ++i) {
    const int64_t v = rng.randint(10, 16);
    ASSERT_GE(v, 10);
    ASSERT_LE(v, 16);
    ++counts[v - 10];
  }
  for (int c : counts) EXPECT_NEAR(c, draws / 7.0, 400);  // ~4.5 standard deviations
  EXPECT_EQ(rng.randint(5, 5), 5);
  EXPECT_NE(error_of([&] { rng.randint(2, 1); }).find("empty range"), std::string::npos);
}

TEST(BertRandom, ShuffleIsAUniformPermutation) {
  BertRandom rng(2);
  std::map<std::vector<int>, int> seen;
  for (int i = 0; i < 24000; ++i) {
    std::vector<int> v = {0, 1, 2, 3};
    rng.shuffle(std::span<int>(v));
    ++seen[v];
  }
  EXPECT_EQ(seen.size(), 24u);  // every permutation of 4
  for (const auto& [perm, count] : seen) EXPECT_NEAR(count, 1000, 150) << perm[0] << perm[1];
}

TEST(BertRandom, StreamSeedsDifferPerVisitAndDocument) {
  std::set<uint64_t> seeds;
  for (uint64_t v = 0; v < 10; ++v)
    for (uint64_t d = 0; d < 100; ++d) seeds.insert(bert_stream_seed(12345, v, d));
  EXPECT_EQ(seeds.size(), 1000u);
  EXPECT_NE(bert_stream_seed(1, 0, 0), bert_stream_seed(2, 0, 0));
  EXPECT_NE(bert_stream_seed(1, 0, 1), bert_stream_seed(1, 1, 0));
}

// ---------------------------------------------------------------------------------------
// Truncation and masking.

TEST(TruncateSeqPair, CutsTheLongerSideFromBothEnds) {
  int fronts = 0, backs = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    BertRandom rng(seed);
    int64_t a0 = 0, a1 = 10, b0 = 0, b1 = 3;
    truncate_seq_pair(a0, a1, b0, b1, 8, rng);
    EXPECT_EQ(a1 - a0, 5);  // only A is longer until it is down to 5 + 3 = 8
    EXPECT_EQ(b0, 0);
    EXPECT_EQ(b1, 3);
    fronts += static_cast<int>(a0);
    backs += static_cast<int>(10 - a1);
  }
  EXPECT_NEAR(fronts, 500, 80);  // 5 cuts a run, half at the front
  EXPECT_NEAR(backs, 500, 80);
  // On a tie B is cut; both sides end at most one apart.
  BertRandom rng(7);
  int64_t a0 = 0, a1 = 4, b0 = 0, b1 = 4;
  truncate_seq_pair(a0, a1, b0, b1, 7, rng);
  EXPECT_EQ(a1 - a0, 4);
  EXPECT_EQ(b1 - b0, 3);
  a0 = 0, a1 = 50, b0 = 0, b1 = 50;
  truncate_seq_pair(a0, a1, b0, b1, 9, rng);
  EXPECT_EQ((a1 - a0) + (b1 - b0), 9);
  EXPECT_LE(std::abs((a1 - a0) - (b1 - b0)), 1);
}

const BertSpecialIds kSpecial{101, 102, 103, 30522};

// [CLS] 1000.. (a) [SEP] 2000.. (b) [SEP]
std::vector<int32_t> pair_tokens(int a, int b) {
  std::vector<int32_t> t = {kSpecial.cls};
  for (int i = 0; i < a; ++i) t.push_back(1000 + i);
  t.push_back(kSpecial.sep);
  for (int i = 0; i < b; ++i) t.push_back(2000 + i);
  t.push_back(kSpecial.sep);
  return t;
}

TEST(MaskedLm, CountIsRoundedFractionCappedByMaxPredictions) {
  // round() ties to even as Python's: 10 * 0.15 = 1.5 -> 2, 30 * 0.15 = 4.5 -> 4.
  const std::pair<std::pair<int, int>, size_t> cases[] = {
      {{1, 2}, 1},       // L 6: 0.9 -> 1
      {{2, 1}, 1},       // L 6, at least 1 in any case
      {{4, 4}, 2},       // L 10: 1.5 -> 2
      {{13, 14}, 4},     // L 30: 4.5 -> 4
      {{60, 60}, 18},    // L 123: 18.45 -> 18
      {{100, 100}, 20},  // L 203: 30.45 -> 30, capped at 20
  };
  for (const auto& [sizes, want] : cases) {
    auto tokens = pair_tokens(sizes.first, sizes.second);
    std::vector<int32_t> positions, labels;
    BertRandom rng(3);
    create_masked_lm_predictions(tokens, 0.15, 20, kSpecial, rng, positions, labels);
    EXPECT_EQ(positions.size(), want) << "L " << tokens.size();
    EXPECT_EQ(labels.size(), want);
  }
}

TEST(MaskedLm, PositionsSortedLabelsOriginalAndSplit80_10_10) {
  const auto original = pair_tokens(60, 62);  // L 125: 19 masked
  int64_t masked = 0, to_mask = 0, kept = 0, random = 0;
  std::vector<int64_t> per_position(original.size(), 0);
  for (uint64_t seed = 0; seed < 3000; ++seed) {
    auto tokens = original;
    std::vector<int32_t> positions, labels;
    BertRandom rng(seed);
    create_masked_lm_predictions(tokens, 0.15, 20, kSpecial, rng, positions, labels);
    ASSERT_EQ(positions.size(), 19u);
    for (size_t k = 0; k < positions.size(); ++k) {
      const int32_t at = positions[k];
      if (k > 0) ASSERT_LT(positions[k - 1], at);  // sorted, unique
      ASSERT_NE(original[at], kSpecial.cls);
      ASSERT_NE(original[at], kSpecial.sep);
      ASSERT_EQ(labels[k], original[at]);
      ++per_position[at];
      ++masked;
      if (tokens[at] == kSpecial.mask)
        ++to_mask;
      else if (tokens[at] == original[at])
        ++kept;
      else
        ++random;
    }
    // Every other position is untouched.
    for (size_t i = 0; i < tokens.size(); ++i)
      if (!std::binary_search(positions.begin(), positions.end(), static_cast<int32_t>(i)))
        ASSERT_EQ(tokens[i], original[i]);
  }
  EXPECT_NEAR(double(to_mask) / masked, 0.8, 0.01);
  EXPECT_NEAR(double(kept) / masked, 0.1, 0.008);
  EXPECT_NEAR(double(random) / masked, 0.1, 0.008);
  // Every maskable position is chosen equally often (19/122 of the time).
  const double expect = 3000.0 * 19 / 122;
  for (size_t i = 0; i < original.size(); ++i) {
    if (original[i] == kSpecial.cls || original[i] == kSpecial.sep)
      EXPECT_EQ(per_position[i], 0);
    else
      EXPECT_NEAR(per_position[i], expect, 5 * std::sqrt(expect));
  }
}

// ---------------------------------------------------------------------------------------
// Instances on a synthetic corpus: token id = 1000 + position in the whole corpus, so every
// token says where it came from.

struct Origin {
  int64_t document, offset;  // offset within the document's tokens
};

struct SyntheticCorpus {
  BertCorpus corpus;
  std::vector<Origin> origin;  // [id - 1000]
};

SyntheticCorpus synthetic_corpus(int documents, int min_sentences, int max_sentences, int min_len,
                                 int max_len, uint64_t seed) {
  SyntheticCorpus s;
  std::mt19937_64 g(seed);
  int32_t next = 1000;
  for (int d = 0; d < documents; ++d) {
    const int sentences =
        min_sentences + static_cast<int>(g() % (max_sentences - min_sentences + 1));
    int64_t offset = 0;
    for (int k = 0; k < sentences; ++k) {
      const int len = min_len + static_cast<int>(g() % (max_len - min_len + 1));
      std::vector<int32_t> ids;
      for (int i = 0; i < len; ++i) {
        ids.push_back(next++);
        s.origin.push_back({d, offset++});
      }
      s.corpus.add_sentence(ids);
    }
    s.corpus.end_document();
  }
  return s;
}

PrepareBertOptions instance_options(int seq_len, double short_seq_prob) {
  PrepareBertOptions o;
  o.max_seq_length = seq_len;
  o.max_predictions_per_seq = std::max(1, seq_len / 6);
  o.short_seq_prob = short_seq_prob;
  return o;
}

// The instances of visit `visit` to document d, drawn from the document's own stream of the
// run with `seed`, bert_stream_seed(seed, visit, d), as the command draws them.
BertInstances document_instances(const SyntheticCorpus& s, int64_t d,
                                 const PrepareBertOptions& options, uint64_t seed,
                                 uint64_t visit = 0) {
  BertInstances out;
  BertRandom rng(bert_stream_seed(seed, visit, d));
  create_instances_from_document(s.corpus, d, options, kSpecial, rng, out);
  return out;
}

// Instance i's tokens with the masked labels put back.
std::vector<int32_t> restored(const BertInstances& in, int64_t i) {
  const auto t = in.instance_tokens(i);
  std::vector<int32_t> out(t.begin(), t.end());
  const auto positions = in.instance_masked_positions(i);
  const auto ids = in.instance_masked_ids(i);
  for (size_t k = 0; k < positions.size(); ++k) out[positions[k]] = ids[k];
  return out;
}

// Checks A and B of instance i against the synthetic corpus; returns (A, B) restored.
std::pair<std::vector<int32_t>, std::vector<int32_t>> check_instance(const SyntheticCorpus& s,
                                                                     const BertInstances& in,
                                                                     int64_t i, int seq_len,
                                                                     int64_t document) {
  const auto t = restored(in, i);
  const int64_t b_start = in.b_starts[i];
  EXPECT_LE(t.size(), static_cast<size_t>(seq_len));
  EXPECT_EQ(t.front(), kSpecial.cls);
  EXPECT_EQ(t[b_start - 1], kSpecial.sep);
  EXPECT_EQ(t.back(), kSpecial.sep);
  std::vector<int32_t> a(t.begin() + 1, t.begin() + b_start - 1);
  std::vector<int32_t> b(t.begin() + b_start, t.end() - 1);
  EXPECT_GE(a.size(), 1u);
  EXPECT_GE(b.size(), 1u);
  const auto contiguous = [&](const std::vector<int32_t>& seg) {
    for (size_t k = 1; k < seg.size(); ++k)
      if (seg[k] != seg[k - 1] + 1 ||
          s.origin[seg[k] - 1000].document != s.origin[seg[0] - 1000].document)
        return false;
    return true;
  };
  EXPECT_TRUE(contiguous(a)) << "instance " << i;
  EXPECT_TRUE(contiguous(b)) << "instance " << i;
  EXPECT_EQ(s.origin[a[0] - 1000].document, document);
  if (in.next_sentence_labels[i] == 0) {
    EXPECT_EQ(s.origin[b[0] - 1000].document, document);
    EXPECT_GT(b[0], a.back());
  }
  return {a, b};
}

TEST(BertInstances, PairsAreContiguousAndFollowTheirLabel) {
  const auto s = synthetic_corpus(40, 1, 30, 1, 40, 5);
  const auto options = instance_options(64, 0.1);
  int64_t instances = 0, random_next_from_other = 0, random_next = 0;
  for (int64_t d = 0; d < s.corpus.num_documents(); ++d) {
    const BertInstances out = document_instances(s, d, options, 9);
    for (int64_t i = 0; i < out.size(); ++i) {
      const auto [a, b] = check_instance(s, out, i, 64, d);
      if (out.next_sentence_labels[i]) {
        ++random_next;
        random_next_from_other += s.origin[b[0] - 1000].document != d;
      }
      ASSERT_LE(out.instance_masked_positions(i).size(), 10u);
    }
    instances += out.size();
  }
  EXPECT_GT(instances, 200);
  EXPECT_EQ(random_next_from_other, random_next);  // 10 tries, 40 documents: never the same
}

TEST(BertInstances, OneTokenSentencesTileTheDocumentInOrder) {
  // With one-token sentences nothing is ever truncated: in one visit, A of a random-next pair
  // and A + B of an actual-next pair, in instance order, are the document exactly; most pairs
  // hold S - 3 tokens (short_seq_prob 0), except where a random B reached its document's end.
  const auto s = synthetic_corpus(200, 50, 400, 1, 1, 6);
  const auto options = instance_options(32, 0.0);
  int64_t labelled = 0, random_next = 0, full = 0;
  for (int64_t d = 0; d < s.corpus.num_documents(); ++d) {
    const BertInstances out = document_instances(s, d, options, 10);
    std::vector<int32_t> tiled;
    for (int64_t i = 0; i < out.size(); ++i) {
      const auto [a, b] = check_instance(s, out, i, 32, d);
      tiled.insert(tiled.end(), a.begin(), a.end());
      if (out.next_sentence_labels[i] == 0) tiled.insert(tiled.end(), b.begin(), b.end());
      EXPECT_LE(out.instance_tokens(i).size(), 32u);
      full += out.instance_tokens(i).size() == 32u;
      random_next += out.next_sentence_labels[i];
      ++labelled;
    }
    const int64_t first = s.corpus.sentence(d, 0)[0];
    std::vector<int32_t> want(s.corpus.document_sentences(d));
    std::iota(want.begin(), want.end(), static_cast<int32_t>(first));
    EXPECT_EQ(tiled, want) << "document " << d;
  }
  // Half the pairs are random next, plus the documents' one-sentence tails.
  EXPECT_NEAR(double(random_next) / labelled, 0.5, 0.04) << labelled << " pairs";
  EXPECT_GT(double(full) / labelled, 0.8);
  std::printf("one-token sentences: %lld pairs, %.3f random next, %.3f full\n",
              static_cast<long long>(labelled), double(random_next) / labelled,
              double(full) / labelled);
}

TEST(BertInstances, ShortSeqProbShortensTheTargetOfAVisit) {
  // With one-token sentences an actual-next pair holds exactly the visit's target + 3 tokens
  // (a chunk stops growing at the target). The target is S - 3 = 125, or with probability
  // short_seq_prob uniform in [2, 125].
  const auto s = synthetic_corpus(40, 1000, 1000, 1, 1, 7);
  const auto options = instance_options(128, 0.3);
  int visits = 0, shorter = 0;
  double shorter_target_sum = 0;
  for (uint64_t visit = 0; visit < 50; ++visit) {
    for (int64_t d = 0; d < s.corpus.num_documents(); ++d) {
      const BertInstances out = document_instances(s, d, options, 11, visit);
      std::set<size_t> lengths;  // of the actual-next pairs but the document's last
      for (int64_t i = 0; i + 1 < out.size(); ++i)
        if (out.next_sentence_labels[i] == 0) lengths.insert(out.instance_tokens(i).size());
      ASSERT_LE(lengths.size(), 1u) << "visit " << visit << " document " << d;
      if (lengths.empty()) continue;  // every pair random next (1 visit in ~1000 at S - 3)
      const int64_t target = static_cast<int64_t>(*lengths.begin()) - 3;
      ASSERT_GE(target, 2);
      ASSERT_LE(target, 125);
      ++visits;
      if (target < 125) {
        ++shorter;
        shorter_target_sum += target;
      }
    }
  }
  // 2000 visits: 0.3 * 123/124 of them shorter (sd 0.010), their mean target 63 (sd 0.8).
  EXPECT_NEAR(double(shorter) / visits, 0.3 * 123 / 124, 0.035);
  EXPECT_NEAR(shorter_target_sum / shorter, 63, 3.5);
}

TEST(BertInstances, DoNotDependOnTheThreadCount) {
  const auto s = synthetic_corpus(300, 1, 20, 1, 30, 8);
  auto options = instance_options(48, 0.1);
  options.dupe_factor = 3;
  const BertInstances one = create_bert_instances(s.corpus, options, kSpecial, 1);
  const BertInstances three = create_bert_instances(s.corpus, options, kSpecial, 3);
  EXPECT_EQ(one.tokens, three.tokens);
  EXPECT_EQ(one.token_starts, three.token_starts);
  EXPECT_EQ(one.b_starts, three.b_starts);
  EXPECT_EQ(one.masked_positions, three.masked_positions);
  EXPECT_EQ(one.masked_ids, three.masked_ids);
  EXPECT_EQ(one.next_sentence_labels, three.next_sentence_labels);
  // Each visit masks differently.
  EXPECT_GT(one.size(), 3 * 300 - 1);
  options.seed += 1;
  EXPECT_NE(create_bert_instances(s.corpus, options, kSpecial, 2).masked_positions,
            one.masked_positions);
}

// ---------------------------------------------------------------------------------------
// The writer, read back with collage's reader.

TEST(BertHdf5Writer, RowsReadBackAsWritten) {
  const auto s = synthetic_corpus(20, 1, 10, 1, 20, 9);
  auto options = instance_options(40, 0.1);
  options.max_predictions_per_seq = 6;
  options.dupe_factor = 2;
  const BertInstances all = create_bert_instances(s.corpus, options, kSpecial, 2);
  std::vector<int64_t> rows(all.size());
  std::iota(rows.rbegin(), rows.rend(), int64_t{0});  // reversed
  const fs::path dir = fresh_dir("writer");
  const std::string path = (dir / "rows.hdf5").string();
  write_bert_hdf5(path, all, rows, 40, 6);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);  // no tmp

  BertHdf5File file(path, 1 << 20);
  ASSERT_EQ(file.size(), all.size());
  EXPECT_EQ(file.seq_len(), 40);
  EXPECT_EQ(file.max_predictions(), 6);
  const std::string dtypes[] = {"int32", "int8", "int8", "int32", "int32", "int8"};
  const auto infos = file.datasets();
  for (int d = 0; d < 6; ++d) {
    EXPECT_EQ(infos[d].dtype, dtypes[d]) << infos[d].name;
    EXPECT_NE(infos[d].storage.find("gzip 4"), std::string::npos) << infos[d].storage;
  }
  for (int64_t r = 0; r < file.size(); ++r) {
    const int64_t i = rows[r];
    const BertSample got = file.get(r);
    const auto t = all.instance_tokens(i);
    std::vector<int32_t> ids(t.begin(), t.end()), mask(t.size(), 1), segments(t.size(), 0);
    std::fill(segments.begin() + all.b_starts[i], segments.end(), 1);
    ids.resize(40, 0), mask.resize(40, 0), segments.resize(40, 0);
    ASSERT_EQ(got.input_ids, ids) << "row " << r;
    ASSERT_EQ(got.input_mask, mask);
    ASSERT_EQ(got.segment_ids, segments);
    const auto p = all.instance_masked_positions(i), m = all.instance_masked_ids(i);
    ASSERT_EQ(got.masked_positions, std::vector<int32_t>(p.begin(), p.end()));
    ASSERT_EQ(got.masked_ids, std::vector<int32_t>(m.begin(), m.end()));
    ASSERT_EQ(got.next_sentence_label, all.next_sentence_labels[i]);
  }
  // Rewriting the same rows gives the same bytes (no timestamps in the file).
  const std::string again = (dir / "again.hdf5").string();
  write_bert_hdf5(again, all, rows, 40, 6);
  EXPECT_EQ(slurp(path), slurp(again));
  EXPECT_NE(error_of([&] {
              write_bert_hdf5((dir / "x.hdf5").string(), all, rows, 10, 6);
            }).find("tokens"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "x.hdf5"));
}

// ---------------------------------------------------------------------------------------
// The whole command on text.

// Documents of sentences of common words; sentence k of the whole text starts with its
// number, so spans of tokens are rarely ambiguous.
void write_text(const fs::path& path, int documents, uint64_t seed, int64_t& sentence_number) {
  static const char* words[] = {"the",   "house", "river", "walked", "slowly", "bright", "morning",
                                "and",   "she",   "he",    "said",   "little", "garden", "window",
                                "under", "over",  "green", "old",    "friend", "letter", "quiet"};
  std::mt19937_64 g(seed);
  std::ofstream out(path);
  for (int d = 0; d < documents; ++d) {
    const int sentences = 1 + static_cast<int>(g() % 25);
    for (int k = 0; k < sentences; ++k) {
      out << sentence_number++;
      for (int w = 0, n = 3 + static_cast<int>(g() % 14); w < n; ++w)
        out << ' ' << words[g() % (sizeof words / sizeof *words)];
      out << (g() % 3 == 0 ? " !\n" : ".\n");
    }
    out << "\n";
  }
}

// Each document's token ids back to back, as the tokenizer makes them line by line.
std::vector<std::vector<int32_t>> document_tokens(const WordpieceTokenizer& tok,
                                                  const std::vector<fs::path>& files) {
  std::vector<std::vector<int32_t>> docs(1);
  for (const auto& file : files) {
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) {
        if (!docs.back().empty()) docs.emplace_back();
      } else {
        tok.encode_append(line, docs.back());
      }
    }
    if (!docs.back().empty()) docs.emplace_back();
  }
  docs.pop_back();
  return docs;
}

TEST(PrepareBert, ShardsHoldTheTextsTokensAndAreReproducible) {
  if (!fs::exists(kBertVocab)) GTEST_SKIP() << kNoBertVocab;
  const fs::path dir = fresh_dir("text");
  int64_t number = 0;
  const std::vector<fs::path> files = {dir / "a.txt", dir / "b.txt"};
  write_text(files[0], 60, 1, number);
  write_text(files[1], 40, 2, number);
  const auto tok = WordpieceTokenizer::load(kBertVocab);
  const auto docs = document_tokens(tok, files);

  PrepareBertOptions options;
  options.inputs = {(dir / "*.txt").string()};  // a glob, expanded by prepare_bert
  options.output_dir = (dir / "out1").string();
  options.vocab_file = kBertVocab;
  options.max_seq_length = 64;
  options.max_predictions_per_seq = 10;
  options.dupe_factor = 3;
  options.shard_size = 250;
  options.threads = 1;
  const PrepareBertStats stats = prepare_bert(options, {});
  EXPECT_EQ(stats.files, 2);
  EXPECT_EQ(stats.documents, 100);
  EXPECT_EQ(stats.documents, static_cast<int64_t>(docs.size()));
  ASSERT_GT(stats.instances, 500);
  EXPECT_EQ(static_cast<int64_t>(stats.shards.size()), (stats.instances + 249) / 250);

  int64_t rows = 0, random_next = 0;
  std::set<std::vector<int32_t>> distinct;
  for (size_t k = 0; k < stats.shards.size(); ++k) {
    EXPECT_EQ(fs::path(stats.shards[k]).filename(), bert_shard_name(k));
    BertHdf5File file(stats.shards[k], tok.vocab_size());
    EXPECT_EQ(file.size(), k + 1 < stats.shards.size() ? 250 : stats.instances - 250 * k);
    file.check_all_rows();
    for (int64_t r = 0; r < file.size(); ++r, ++rows) {
      BertSample s = file.get(r);
      distinct.insert(s.input_ids);
      std::vector<int32_t> t = s.input_ids;
      for (size_t m = 0; m < s.masked_positions.size(); ++m)
        t[s.masked_positions[m]] = s.masked_ids[m];
      const auto length = std::count(s.input_mask.begin(), s.input_mask.end(), 1);
      t.resize(length);
      const auto sep = std::find(t.begin(), t.end(), 102);
      ASSERT_EQ(t.front(), 101);
      ASSERT_NE(sep, t.end());
      ASSERT_EQ(t.back(), 102);
      const std::vector<int32_t> a(t.begin() + 1, sep), b(sep + 1, t.end() - 1);
      // A lies in some document; for label 0, B lies in the same one after A's start.
      bool found = false;
      for (const auto& doc : docs) {
        const auto at = std::search(doc.begin(), doc.end(), a.begin(), a.end());
        if (at == doc.end()) continue;
        if (s.next_sentence_label == 1 ||
            std::search(at + 1, doc.end(), b.begin(), b.end()) != doc.end()) {
          found = true;
          break;
        }
      }
      ASSERT_TRUE(found) << stats.shards[k] << " row " << r;
      random_next += s.next_sentence_label;
    }
  }
  EXPECT_EQ(rows, stats.instances);
  EXPECT_EQ(random_next, stats.random_next);
  EXPECT_GT(distinct.size(), rows * 99 / 100);  // the visits differ
  // Half the pairs are random next, plus those from one-sentence chunks (always random next):
  // with 1 to 25 sentences a document here, about 0.6.
  EXPECT_GT(double(random_next) / rows, 0.5);
  EXPECT_LT(double(random_next) / rows, 0.68);

  // Two threads, same seed: the same bytes. Another seed: other bytes.
  options.output_dir = (dir / "out2").string();
  options.threads = 2;
  const PrepareBertStats again = prepare_bert(options, {});
  ASSERT_EQ(again.shards.size(), stats.shards.size());
  for (size_t k = 0; k < stats.shards.size(); ++k)
    EXPECT_EQ(slurp(stats.shards[k]), slurp(again.shards[k])) << bert_shard_name(k);
  options.output_dir = (dir / "out3").string();
  options.seed = 1;
  const PrepareBertStats other = prepare_bert(options, {});
  EXPECT_NE(slurp(stats.shards[0]), slurp(other.shards[0]));

  // A rerun with larger shards into the same directory removes the parts it no longer has.
  options.shard_size = 1 << 20;
  const PrepareBertStats one = prepare_bert(options, {});
  EXPECT_EQ(one.shards.size(), 1u);
  EXPECT_EQ(one.removed_stale.size(), other.shards.size() - 1);
  EXPECT_EQ(std::distance(fs::directory_iterator(options.output_dir), fs::directory_iterator()), 1);
}

TEST(PrepareBert, ReportsBadInputAndOptions) {
  if (!fs::exists(kBertVocab)) GTEST_SKIP() << kNoBertVocab;
  const fs::path dir = fresh_dir("errors");
  PrepareBertOptions o;
  o.vocab_file = kBertVocab;
  o.output_dir = (dir / "out").string();
  o.inputs = {(dir / "missing.txt").string()};
  EXPECT_NE(error_of([&] { prepare_bert(o, {}); }).find("missing.txt: no such file"),
            std::string::npos);
  o.inputs = {(dir / "*.nothing").string()};
  EXPECT_NE(error_of([&] { prepare_bert(o, {}); }).find("matches no file"), std::string::npos);
  std::ofstream(dir / "blank.txt") << "\n \n\t\n";
  o.inputs = {(dir / "blank.txt").string()};
  EXPECT_NE(error_of([&] { prepare_bert(o, {}); }).find("no sentence with tokens"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "out" / "part_00000.hdf5"));

  const auto option_error = [&](auto change) {
    PrepareBertOptions bad = o;
    change(bad);
    return error_of([&] { validate_prepare_bert_options(bad); });
  };
  EXPECT_NE(option_error([](auto& b) { b.max_seq_length = 4; }).find("--max-seq-length 4"),
            std::string::npos);
  EXPECT_NE(option_error([](auto& b) {
              b.max_predictions_per_seq = 129;
            }).find("--max-predictions-per-seq 129"),
            std::string::npos);
  EXPECT_NE(option_error([](auto& b) { b.masked_lm_prob = 0; }).find("--masked-lm-prob"),
            std::string::npos);
  EXPECT_NE(option_error([](auto& b) { b.dupe_factor = 0; }).find("--dupe-factor"),
            std::string::npos);
  EXPECT_NE(option_error([](auto& b) { b.short_seq_prob = 1.5; }).find("--short-seq-prob"),
            std::string::npos);
  EXPECT_NE(option_error([](auto& b) { b.shard_size = 0; }).find("--shard-size"),
            std::string::npos);

  // A vocabulary without [MASK] cannot make instances.
  std::ofstream(dir / "vocab.txt") << "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n";
  std::ofstream(dir / "hello.txt") << "hello\nhello\n";
  o.vocab_file = (dir / "vocab.txt").string();
  o.inputs = {(dir / "hello.txt").string()};
  EXPECT_NE(error_of([&] { prepare_bert(o, {}); }).find("no [MASK] token"), std::string::npos);
}

}  // namespace
}  // namespace collage

namespace collage {
namespace {

TEST(PrepareBert, ProgressLinesSayPhaseAmountsAndRates) {
  EXPECT_EQ(format_prepare_bert_progress(
                {PrepareBertProgress::kTokenizing, 45'200'000, 120'000'000, 1234, 0, 2.0}),
            "prepare-bert: tokenizing 45.2/120.0 MB (38%), 22.6 MB/s, 1234 documents");
  EXPECT_EQ(format_prepare_bert_progress(
                {PrepareBertProgress::kInstances, 5000, 20000, 4000, 150000, 3.0}),
            "prepare-bert: instances 5000/20k document visits (25%), 150k instances, 50000 "
            "instances/s");
  EXPECT_EQ(format_prepare_bert_progress({PrepareBertProgress::kWriting, 3, 10, 0, 300000, 1.0}),
            "prepare-bert: writing shard 3/10 (300k instances)");
}

}  // namespace
}  // namespace collage
