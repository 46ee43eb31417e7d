#pragma once
// The encoder trainer tests' fixture: BERT pretraining HDF5 shards of a learnable synthetic
// language, written with the project's DLE-layout writer, and tiny BERT / RoBERTa configs.
//
// The language: 5 topics of 10 words each (ids 104..153). Segment A's words are drawn from one
// topic; segment B's from the same topic (next-sentence label 0) or from another (label 1).
// 15% of the tokens (never [CLS] 101 or [SEP] 102) are masked as BERT's recipe does: [MASK]
// 103 (80%), a random word (10%) or unchanged (10%); the labels are the originals. A masked
// word is one of its topic's 10 (ln 10 = 2.3 nats once the topic is read from the other words,
// against ln 160 = 5.1 for a fresh model), and the label is whether the topics agree: both
// can be learned from a few hundred rows.
#include <random>

#include "data/bert/bert_hdf5_writer.h"
#include "tiny_run.h"

namespace collage {

constexpr int kFirstWord = 104, kTopics = 5, kTopicWords = 10;

// `files` shards of `rows` rows each, S = seq_len, P = max_predictions, named part_*.hdf5.
inline void write_encoder_shards(const fs::path& dir, int files, int rows, int seq_len,
                                 int max_predictions, uint32_t seed) {
  fs::create_directories(dir);
  std::mt19937 gen(seed);
  auto uniform = [&](int n) { return int(gen() % uint32_t(n)); };
  for (int f = 0; f < files; f++) {
    BertInstances instances;
    for (int r = 0; r < rows; r++) {
      const int length = seq_len - uniform(seq_len / 4);  // some rows padded
      const int a_length = 1 + uniform(length - 4);
      const int b_length = length - 3 - a_length;
      const int topic = uniform(kTopics);
      const bool random_next = uniform(2) == 1;
      const int b_topic = random_next ? (topic + 1 + uniform(kTopics - 1)) % kTopics : topic;
      auto word = [&](int t) { return kFirstWord + t * kTopicWords + uniform(kTopicWords); };
      std::vector<int32_t> tokens = {101};
      for (int i = 0; i < a_length; i++) tokens.push_back(word(topic));
      tokens.push_back(102);
      const int32_t b_begin = int32_t(tokens.size());
      for (int i = 0; i < b_length; i++) tokens.push_back(word(b_topic));
      tokens.push_back(102);
      std::vector<int32_t> positions, labels;
      for (int32_t p = 1; p < int32_t(tokens.size()); p++) {
        if (tokens[p] == 102 || int(positions.size()) == max_predictions) continue;
        if (uniform(100) >= 15) continue;
        positions.push_back(p);
        labels.push_back(tokens[p]);
        const int choice = uniform(10);
        if (choice < 8)
          tokens[p] = 103;
        else if (choice == 8)
          tokens[p] = kFirstWord + uniform(kTopics * kTopicWords);
      }
      if (positions.empty()) {  // at least one label per row
        positions.push_back(1);
        labels.push_back(tokens[1]);
        tokens[1] = 103;
      }
      instances.tokens.insert(instances.tokens.end(), tokens.begin(), tokens.end());
      instances.token_starts.push_back(int64_t(instances.tokens.size()));
      instances.b_starts.push_back(b_begin);
      instances.masked_positions.insert(instances.masked_positions.end(), positions.begin(),
                                        positions.end());
      instances.masked_ids.insert(instances.masked_ids.end(), labels.begin(), labels.end());
      instances.masked_starts.push_back(int64_t(instances.masked_positions.size()));
      instances.next_sentence_labels.push_back(random_next ? 1 : 0);
    }
    std::vector<int64_t> order(rows);
    for (int r = 0; r < rows; r++) order[r] = r;
    write_bert_hdf5((dir / fmt::format("part_{:05d}.hdf5", f)).string(), instances, order, seq_len,
                    max_predictions);
  }
}

class EncoderTrainerTest : public TrainerTest {
 protected:
  void SetUp() override {
    TrainerTest::SetUp();
    // Enough rows that the model learns the language rather than memorising the rows.
    write_encoder_shards(dir_ / "train", 3, 100, 32, 5, 1);
    // 3 shards of 13 rows: micro-batches of 4 cross shard boundaries, and a 6-step run of 8
    // sequences a step (48 samples) crosses into the second epoch.
    write_encoder_shards(dir_ / "small", 3, 13, 32, 5, 3);
    write_encoder_shards(dir_ / "valid", 1, 32, 32, 5, 2);
  }

  // A tiny encoder of `arch` (bert | roberta) on the shards above.
  Config encoder_config(const std::string& arch, const std::string& run_name,
                        std::vector<std::string> overrides = {}) {
    const bool roberta = arch == "roberta";
    const std::string yaml = fmt::format(R"(
model: {{arch: {}, n_layer: 2, hidden_size: 32, n_head: 2, vocab_size: 160,
        max_position_embeddings: {}, type_vocab_size: {}, pad_token_id: {}, layernorm_eps: 1.0e-12,
        hidden_dropout: 0.1, attention_dropout: 0.1}}
data: {{hdf5_train: "{}", hdf5_valid: "{}", seq_len: 32, max_predictions: 5,
       dynamic_masking: {}, mask_token_id: 103, special_token_ids: [0, 101, 102, 103]}}
training: {{micro_batch_size: 4, global_batch_size: 8, max_steps: 6, eval_interval: 3,
           eval_iters: 2, log_interval: 1}}
optimizer: {{precision: collage-plus, adam_order: hf, lr: 2.0e-3, min_lr: 0, weight_decay: 0.01,
            beta2: 0.999, eps: 1.0e-6, schedule: linear, warmup_steps: 2, decay_steps: 6}}
parallel: {{threads: 2}}
logging: {{dir: "{}", progress: "off", level: "warn"}}
checkpoint: {{interval: 3, keep: 5}}
)",
                                         arch, roberta ? 40 : 32, roberta ? 1 : 2, roberta ? 1 : 0,
                                         (dir_ / "train").string(), (dir_ / "valid").string(),
                                         roberta ? "true" : "false", (dir_ / run_name).string());
    return parse_config(yaml, "encoder.yaml", overrides);
  }
};

}  // namespace collage
