// The masked-LM training task (training_task.h) of the encoders, BERT and RoBERTa.
//
// Data. data.hdf5_train (and data.hdf5_valid) are BERT pretraining HDF5 shards
// (src/data/bert/bert_hdf5.h), read as the stream of src/data/bert/bert_shards.h: sample k of the
// run is stream position k, so the position after consumed_samples samples — all a checkpoint needs
// to resume mid-shard — is (consumed / samples_per_epoch, consumed % samples_per_epoch), whatever
// the number of ranks. With data.prepare_from, missing shards are first prepared from text
// (src/data/bert/prepare_bert.h), as the demo does.
//
// Loss. Each micro-batch's loss is the mean MLM loss over its labelled tokens plus (BERT) the
// mean NSP loss over its sequences, as NVIDIA's and Hugging Face's BERT pretraining compute it;
// the step's loss is the mean of that over the step's micro-batches on every data-parallel rank
// (G = micro-batches per rank × dp of them), so each backward is scaled by 1/G. The same
// samples form the same micro-batches at every data-parallel size (bert_shards.h, "Ranks"), so
// the loss does not depend on the layout.
//
// Dropout. The masks of a micro-batch are keyed by (dropout seed, the stream index of its first
// sample): a resumed run, and any layout, draws the same masks for the same samples.
//
// RoBERTa (no next-sentence head, config/architecture.h). No token types and no NSP: the files'
// segment ids and next-sentence labels are ignored, padding ids become model.pad_token_id, and with
// data.dynamic_masking each row's masks are drawn anew from its stream position
// (src/data/bert/dynamic_masking.h), the file's undone.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "config/architecture.h"
#include "core/error.h"
#include "core/splitmix64.h"
#include "data/bert/bert_shards.h"
#include "data/bert/dynamic_masking.h"
#include "data/bert/prepare_bert.h"
#include "model/model_family.h"
#include "plan/memory_plan.h"
#include "train/training_task.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

bool has_shards(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return true;
  if (!fs::is_directory(path, ec)) return false;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const std::string ext = entry.path().extension().string();
    if (entry.is_regular_file() && (ext == ".hdf5" || ext == ".h5")) return true;
  }
  return false;
}

// data.prepare_from (training) and data.prepare_valid_from (validation) become shards in
// data.hdf5_train / data.hdf5_valid once; later runs reuse them.
void prepare_if_missing(const Config& config, const std::vector<std::string>& text,
                        const std::string& output_dir, const char* what) {
  if (text.empty()) return;
  if (has_shards(output_dir)) {
    spdlog::info("data: using the prepared {} shards in {} (delete them to prepare again)", what,
                 output_dir);
    return;
  }
  PrepareBertOptions options;
  options.inputs = expand_bert_inputs(text);
  options.output_dir = output_dir;
  if (!config.data.vocab_file.empty()) options.vocab_file = config.data.vocab_file;
  COLLAGE_CHECK(fs::exists(options.vocab_file),
                "data.vocab_file: {}: no such file (a BERT vocab.txt; bert-base-uncased's is "
                "fetched by scripts/install-deps.sh --assets)",
                options.vocab_file);
  options.max_seq_length = config.data.seq_len;
  options.max_predictions_per_seq = config.data.max_predictions;
  options.seed = config.data.seed;
  options.threads = config.parallel.threads;
  spdlog::info("data: preparing {} shards in {} from {} file(s) with WordPiece (once)", what,
               output_dir, options.inputs.size());
  const PrepareBertStats stats = prepare_bert(options);
  spdlog::info("data: prepared {} instances from {} documents ({} tokens) in {:.1f} s",
               stats.instances, stats.documents, stats.tokens, stats.seconds);
}

// A shard set whose S and P are the config's.
std::shared_ptr<const BertShardSet> open_shards(const Config& config, const std::string& path,
                                                const char* key) {
  auto shards = std::make_shared<const BertShardSet>(path, config.model.vocab_size);
  COLLAGE_CHECK(shards->seq_len() == config.data.seq_len,
                "{}: {} holds sequences of {} tokens, but data.seq_len is {}", key, path,
                shards->seq_len(), config.data.seq_len);
  COLLAGE_CHECK(shards->max_predictions() == config.data.max_predictions,
                "{}: {} holds {} masked positions per sequence, but data.max_predictions is {}",
                key, path, shards->max_predictions(), config.data.max_predictions);
  return shards;
}

std::string describe(const BertShardSet& shards) {
  return fmt::format("{} shard(s) in {}, {} samples", shards.num_files(), shards.path(),
                     shards.num_samples());
}

class MaskedLmTask : public TrainingTask {
 public:
  MaskedLmTask(const Config& config, Backend& backend, ParallelRun& parallel)
      : config_(config),
        parallel_(parallel),
        layout_(parallel.layout()),
        next_sentence_(architecture(config.model).next_sentence) {
    const DataConfig& data = config.data;
    const TrainingConfig& tc = config.training;
    COLLAGE_CHECK(tc.eval_interval == 0 || !data.hdf5_valid.empty(),
                  "training.eval_interval: {} asks for validation, but data.hdf5_valid is empty "
                  "(give the validation shards, or set training.eval_interval: 0)",
                  tc.eval_interval);
    parallel.lead_rank_first([&] {
      prepare_if_missing(config, data.prepare_from, data.hdf5_train, "training");
      prepare_if_missing(config, data.prepare_valid_from, data.hdf5_valid, "validation");
      train_ = open_shards(config, data.hdf5_train, "data.hdf5_train");
      if (!data.hdf5_valid.empty())
        valid_ = open_shards(config, data.hdf5_valid, "data.hdf5_valid");
    });
    masking_.mask_token = data.mask_token_id;
    masking_.vocab_size = config.model.vocab_size;
    masking_.special = data.special_token_ids;
    masking_.seed = splitmix64(data.seed ^ 0x6d61736b /* "mask" */);
    dropout_seed_ = splitmix64(tc.seed ^ 0x64726f70 /* "drop" */);
    model_ = make_masked_lm(config.model, backend, model_shape(config),
                            {ParallelLayout{layout_.tp, layout_.tp_rank}, &parallel.tp(),
                             zero_memory_multiple(layout_.dp, layout_.zero)});
  }

  TrainableModel& model() override { return *model_; }

  std::string data_summary() const override {
    return fmt::format("training {}{}; validation {}; {} tokens, {} masked positions per sequence",
                       describe(*train_), config_.data.dynamic_masking ? ", dynamic masking" : "",
                       valid_ ? describe(*valid_) : "none", config_.data.seq_len,
                       config_.data.max_predictions);
  }

  double tokens_per_step() const override {
    return double(config_.training.global_batch_size) * config_.data.seq_len;
  }

  TaskFigures train_step(int64_t consumed_samples) override {
    const int B = config_.training.micro_batch_size;
    const int micro_batches = config_.training.global_batch_size / (B * layout_.dp);
    const double G = double(micro_batches) * layout_.dp;  // micro-batches in the step
    const int64_t per_epoch = train_->num_samples();
    const BertDataPosition start{consumed_samples / per_epoch, consumed_samples % per_epoch};
    if (!train_reader_) {
      train_reader_.emplace(train_, config_.data.seed, B, layout_.dp_rank, layout_.dp, start);
    } else if (!(train_reader_->position() == start)) {
      train_reader_->seek(start);
    }
    if (start.epoch > last_epoch_) {
      if (last_epoch_ >= 0)
        spdlog::info("data: epoch {} of the training shards begins", start.epoch);
      last_epoch_ = start.epoch;
    }
    model_->zero_gradients();
    double means[2] = {0, 0};  // Σ over micro-batches of the MLM mean, the NSP mean
    for (int micro = 0; micro < micro_batches; micro++) {
      const int64_t first_sample = consumed_samples + int64_t(layout_.dp_rank) * B;
      consumed_samples += int64_t(B) * layout_.dp;
      read(*train_reader_);
      const MaskedLanguageModel::Loss loss =
          model_->forward(inputs(), B, /*dropout=*/true, dropout_seed_, uint64_t(first_sample));
      // A micro-batch without labelled tokens (possible with dynamic masking of very short
      // rows) adds nothing to the MLM mean.
      const double mlm = loss.mlm_count > 0 ? 1.0 / double(loss.mlm_count) : 0.0;
      const double nsp = loss.nsp_count > 0 ? 1.0 / double(loss.nsp_count) : 0.0;
      means[0] += loss.mlm_sum * mlm;
      means[1] += loss.nsp_sum * nsp;
      model_->backward(float(mlm / G), float(nsp / G));
    }
    parallel_.host_dp().all_reduce_sum(means, 2);
    TaskFigures figures;
    const double mlm_loss = means[0] / G, nsp_loss = means[1] / G;
    figures.loss = mlm_loss + nsp_loss;
    figures.metrics = {{"mlm_loss", mlm_loss}};
    if (next_sentence_) {
      figures.metrics["nsp_loss"] = nsp_loss;
      figures.text = fmt::format(" (mlm {:.4f} nsp {:.4f})", mlm_loss, nsp_loss);
    }
    return figures;
  }

  // Validation batch i is samples [i·B, (i+1)·B) of the validation stream (epoch 0 onwards,
  // the same every time); data-parallel rank r evaluates the batches i ≡ r (mod dp): its
  // reader's share of each global micro-batch of dp·B samples.
  TaskFigures validate() override { return validate_batches(config_.training.eval_iters); }

  TaskFigures validate_batches(int batches) override {
    const int B = config_.training.micro_batch_size;
    if (!valid_reader_)
      valid_reader_.emplace(valid_, config_.data.seed, B, layout_.dp_rank, layout_.dp);
    valid_reader_->seek({0, 0});
    // Σ MLM losses, labelled tokens, right MLM predictions; the same for NSP.
    double sums[6] = {0, 0, 0, 0, 0, 0};
    for (int i = layout_.dp_rank; i < batches; i += layout_.dp) {
      read(*valid_reader_);
      const MaskedLanguageModel::Loss loss = model_->forward(inputs(), B, /*dropout=*/false);
      sums[0] += loss.mlm_sum, sums[1] += double(loss.mlm_count);
      sums[2] += double(model_->mlm_correct());
      if (next_sentence_) {
        sums[3] += loss.nsp_sum, sums[4] += double(loss.nsp_count);
        sums[5] += double(model_->nsp_correct());
      }
    }
    parallel_.host_dp().all_reduce_sum(sums, 6);
    TaskFigures figures;
    const double mlm_loss = sums[0] / std::max(sums[1], 1.0);
    const double mlm_accuracy = sums[2] / std::max(sums[1], 1.0);
    figures.loss = mlm_loss;
    figures.metrics = {{"val_mlm_loss", mlm_loss}, {"val_mlm_accuracy", mlm_accuracy}};
    figures.text = fmt::format(" (mlm {:.4f}, accuracy {:.1f}%", mlm_loss, 100 * mlm_accuracy);
    if (next_sentence_) {
      const double nsp_loss = sums[3] / std::max(sums[4], 1.0);
      const double nsp_accuracy = sums[5] / std::max(sums[4], 1.0);
      figures.loss += nsp_loss;
      figures.metrics["val_nsp_loss"] = nsp_loss;
      figures.metrics["val_nsp_accuracy"] = nsp_accuracy;
      figures.text += fmt::format("; nsp {:.4f}, accuracy {:.1f}%", nsp_loss, 100 * nsp_accuracy);
    }
    figures.text += ")";
    return figures;
  }

 private:
  // The reader's next micro-batch of this rank, made ready for the model.
  void read(BertShardReader& reader) {
    reader.next(batch_, &rows_);
    if (next_sentence_) return;
    // Without a next-sentence head (RoBERTa): one token type, padding at pad_token_id as the
    // reference model expects, and the masks drawn anew with data.dynamic_masking.
    std::fill(batch_.segment_ids.begin(), batch_.segment_ids.end(), 0);
    for (size_t i = 0; i < batch_.input_ids.size(); i++)
      if (batch_.input_mask[i] == 0) batch_.input_ids[i] = config_.model.pad_token_id;
    if (config_.data.dynamic_masking)
      for (int64_t b = 0; b < batch_.size; b++)
        remask_row(batch_, b, masking_, rows_[b].epoch, rows_[b].sample_in_epoch);
  }

  Batch inputs() const {
    Batch in;
    in.input_ids = batch_.input_ids.data();
    in.input_mask = batch_.input_mask.data();
    in.segment_ids = batch_.segment_ids.data();
    in.masked_lm_positions = batch_.masked_positions.data();
    in.masked_lm_ids = batch_.masked_ids.data();
    in.next_sentence_labels = next_sentence_ ? batch_.next_sentence_labels.data() : nullptr;
    return in;
  }

  const Config& config_;
  ParallelRun& parallel_;
  const RankLayout& layout_;
  const bool next_sentence_;  // BERT (MLM + NSP) rather than RoBERTa (MLM)
  std::shared_ptr<const BertShardSet> train_, valid_;
  std::optional<BertShardReader> train_reader_, valid_reader_;
  int64_t last_epoch_ = -1;
  DynamicMasking masking_;
  uint64_t dropout_seed_ = 0;
  std::unique_ptr<MaskedLanguageModel> model_;
  BertBatch batch_;
  std::vector<BertDataPosition> rows_;  // the stream position of each row of batch_
};

}  // namespace

std::unique_ptr<TrainingTask> make_masked_lm_task(const Config& config, Backend& backend,
                                                  ParallelRun& parallel) {
  return std::make_unique<MaskedLmTask>(config, backend, parallel);
}

}  // namespace collage
