#include "train/training_data.h"

#include <glob.h>
#include <spdlog/spdlog.h>

#include <filesystem>

#include "core/error.h"
#include "data/megatron/blended_dataset.h"
#include "data/megatron/indexed_dataset.h"
#include "data/megatron/prepare_gpt.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

// Shell-style expansion of data.prepare_from entries; a pattern matching nothing is an error.
std::vector<std::string> expand_inputs(const std::vector<std::string>& patterns) {
  std::vector<std::string> files;
  for (const std::string& pattern : patterns) {
    glob_t matches{};
    int status = ::glob(pattern.c_str(), 0, nullptr, &matches);
    if (status == 0) {
      for (size_t i = 0; i < matches.gl_pathc; i++) files.emplace_back(matches.gl_pathv[i]);
    }
    globfree(&matches);
    COLLAGE_CHECK(status == 0, "data.prepare_from: '{}' matches no file{}", pattern,
                  pattern.find("data/assets") != std::string::npos
                      ? " (run scripts/install-deps.sh --assets to fetch the demo corpus)"
                      : "");
  }
  return files;
}

// The demo's corpus is tokenised once into datasets[0].prefix and reused afterwards.
void prepare_if_missing(const DataConfig& data) {
  if (data.prepare_from.empty()) return;
  const std::string& prefix = data.datasets.at(0).prefix;
  if (fs::exists(prefix + ".bin") && fs::exists(prefix + ".idx")) {
    spdlog::info("data: using the prepared dataset {} (delete it to prepare again)", prefix);
    return;
  }
  PrepareOptions options;
  options.inputs = expand_inputs(data.prepare_from);
  options.output_prefix = prefix;
  if (!data.vocab_file.empty()) options.vocab_file = data.vocab_file;
  if (!data.merges_file.empty()) options.merges_file = data.merges_file;
  if (fs::path(prefix).has_parent_path()) fs::create_directories(fs::path(prefix).parent_path());
  spdlog::info("data: preparing {} from {} file(s) with GPT-2 BPE (once; cached afterwards)",
               prefix, options.inputs.size());
  PrepareStats stats = prepare_gpt(options);
  spdlog::info("data: prepared {} documents, {} tokens in {:.1f} s", stats.documents, stats.tokens,
               stats.seconds);
}

SampleSet as_sample_set(std::shared_ptr<const GptSamples> samples) {
  SampleSet set;
  set.size = samples->size();
  set.get = [samples](int64_t i, int32_t* window) { samples->get(i, window); };
  return set;
}

}  // namespace

TrainingData load_training_data(const Config& config, int64_t train_samples,
                                int64_t valid_samples) {
  const DataConfig& data = config.data;
  prepare_if_missing(data);
  std::vector<WeightedPrefix> prefixes;
  int64_t total_tokens = 0;
  for (const DatasetSource& source : data.datasets) {
    IndexedDataset dataset(source.prefix);  // validates both files, names them on failure
    dataset.check_token_ids(config.model.vocab_size);
    total_tokens += dataset.num_tokens();
    prefixes.push_back({source.weight, source.prefix});
  }
  auto train = build_gpt_samples(prefixes, data.split, "train", train_samples, data.seq_len,
                                 static_cast<int64_t>(data.seed));
  auto valid = build_gpt_samples(prefixes, data.split, "valid", valid_samples, data.seq_len,
                                 static_cast<int64_t>(data.seed));
  TrainingData result;
  result.train = as_sample_set(train);
  result.valid = as_sample_set(valid);
  result.summary = fmt::format(
      "{} dataset(s), {:.2f} M tokens, split {}: {} train samples, {} valid samples of {}+1 "
      "tokens",
      prefixes.size(), total_tokens / 1e6, data.split, train->size(), valid->size(), data.seq_len);
  return result;
}

}  // namespace collage
