// The training loop end to end on a tiny GPT and a synthetic Megatron dataset: loss falls,
// a resumed run continues bit for bit, and bad input stops the run with a clear message
// and without damaging checkpoints.
#include "train/trainer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <thread>

#include "backend/cpu/onednn_gemm.h"
#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "plan/model_flops.h"
#include "tiny_run.h"
#include "train/run_directory.h"

namespace collage {
namespace {

TEST_F(TrainerTest, LossFallsAndValidationIsLogged) {
  // log_interval thins the console only: metrics.jsonl gets every step.
  Config config = tiny_config(
      "run", {"training.max_steps=30", "optimizer.decay_steps=30", "training.eval_interval=10",
              "checkpoint.interval=0", "training.log_interval=7"});
  TrainResult result = train(config, {});
  auto records = metrics("run");
  ASSERT_EQ(records.size(), 31u);  // step 0 (validation only), then one record per step
  EXPECT_EQ(records[0]["step"], 0);
  EXPECT_NEAR(records[0]["val_loss"].get<double>(), std::log(64.0), 0.5);
  EXPECT_FALSE(records[0].contains("loss"));
  EXPECT_EQ(records[0]["precision"], "fp32-master");
  EXPECT_EQ(records[0]["bytes_per_parameter"].get<double>(), 16.0);
  const double flops_per_token = model_flops(config).per_token();
  EXPECT_EQ(records[0]["model_flops_per_token"].get<double>(), flops_per_token);
  EXPECT_GT(records[0]["peak_tflops"].get<double>(), 0.0);  // the cpu GEMM engine's measured rate
  records.erase(records.begin());
  const double first = records.front()["loss"], last = records.back()["loss"];
  EXPECT_NEAR(first, std::log(64.0), 0.5);  // near uniform over the vocab at init
  EXPECT_LT(last, first - 1.0) << "training loss did not fall";
  EXPECT_TRUE(records[9].contains("val_loss"));
  EXPECT_FALSE(records[10].contains("val_loss"));
  EXPECT_LT(result.last_val_loss, first - 1.0);
  for (const char* key :
       {"step", "loss", "lr", "grad_norm", "tokens_per_s", "ms_per_step", "model_tflops", "mfu"}) {
    EXPECT_TRUE(records[5].contains(key)) << key;
  }
  // Throughput in model FLOPs (model_flops.h): the rate is the count per token times the
  // tokens/s the same record gives, and MFU that rate over the GEMM engine's measured peak.
  EXPECT_NEAR(records[5]["model_tflops"].get<double>(),
              flops_per_token * records[5]["tokens_per_s"].get<double>() / 1e12,
              1e-9 * records[5]["model_tflops"].get<double>());
  const double mfu = records[5]["mfu"];
  EXPECT_GT(mfu, 0.0);
  EXPECT_LT(mfu, 1.0);  // a tiny model cannot beat its GEMM engine on 1024-cubed products
  EXPECT_TRUE(fs::exists(dir_ / "run" / "config.yaml"));
  EXPECT_TRUE(fs::exists(dir_ / "run" / "train.log"));
}

// A step that outruns the GEMM peak measured at start-up (here made a millionth of itself, as a
// measurement in a disturbed moment) has the peak measured again: the log says so, the step's
// record carries the new peak, and MFU is below 100% from that step on.
TEST_F(TrainerTest, APeakTheStepsOutranIsMeasuredAgain) {
  Config config = tiny_config(
      "outrun", {"training.max_steps=4", "training.eval_interval=0", "checkpoint.interval=0"});
  setenv("COLLAGE_TEST_PEAK_SCALE", "1e-6", 1);
  train(config, {});
  unsetenv("COLLAGE_TEST_PEAK_SCALE");
  const auto records = metrics("outrun");
  ASSERT_EQ(records.size(), 5u);
  const double disturbed = records[0]["peak_tflops"];
  ASSERT_TRUE(records[1].contains("peak_tflops")) << records[1].dump();
  EXPECT_GT(records[1]["peak_tflops"].get<double>(), 1e5 * disturbed);
  for (size_t k = 1; k < records.size(); k++) {
    EXPECT_LT(records[k]["mfu"].get<double>(), 1.0) << "step " << k;
    if (k > 1) EXPECT_FALSE(records[k].contains("peak_tflops")) << "measured again at step " << k;
  }
  std::ifstream log(dir_ / "outrun" / "train.log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("step 1 ran at"), std::string::npos) << text;
  EXPECT_NE(text.find("which MFU now uses"), std::string::npos) << text;
}

// Under every precision strategy: stopping at step 3 and resuming gives the same losses,
// EDQ figures (the cumulative ratio too) and final weights and optimizer state, bit for bit.
TEST_F(TrainerTest, ResumeContinuesBitForBitUnderEveryStrategy) {
  for (const char* precision :
       {"fp32-master", "bf16", "collage-light", "collage-plus", "kahan", "stochastic"}) {
    SCOPED_TRACE(precision);
    const std::string p = std::string("optimizer.precision=") + precision;
    const std::string straight = std::string("straight-") + precision;
    const std::string split = std::string("split-") + precision;
    train(tiny_config(straight, {p}), {});
    // The same run stopped at step 3 (its checkpoint), then resumed to step 6.
    train(tiny_config(split, {p, "training.max_steps=3"}), {});
    train(tiny_config(split, {p}), {"latest"});
    auto a = metrics(straight), b = metrics(split);
    ASSERT_EQ(a.size(), 7u);  // step 0 validation + 6 steps
    ASSERT_EQ(b.size(), 7u);
    for (size_t i = 0; i < a.size(); i++) {
      SCOPED_TRACE(i);
      EXPECT_EQ(a[i]["step"], b[i]["step"]);
      for (const char* key : {"loss", "grad_norm", "val_loss", "edq", "edq_ratio", "lost_frac",
                              "edq_ratio_cumulative"}) {
        EXPECT_EQ(a[i].contains(key), b[i].contains(key)) << key;
        if (a[i].contains(key)) EXPECT_EQ(a[i][key].get<double>(), b[i][key].get<double>()) << key;
      }
    }
    // Final weights and every optimizer state component identical too.
    Checkpoint x =
        load_checkpoint(resolve_resume("latest", (dir_ / straight / "checkpoints").string()));
    Checkpoint y =
        load_checkpoint(resolve_resume("latest", (dir_ / split / "checkpoints").string()));
    ASSERT_EQ(x.tensors.size(), y.tensors.size());
    for (size_t i = 0; i < x.tensors.size(); i++) {
      EXPECT_EQ(x.tensors[i].name, y.tensors[i].name);
      EXPECT_EQ(x.tensors[i].bytes, y.tensors[i].bytes) << x.tensors[i].name;
    }
    EXPECT_EQ(x.meta["precision"], precision);
    EXPECT_EQ(x.meta["edq_cumulative"], y.meta["edq_cumulative"]);
    EXPECT_EQ(x.meta["rounding_seed"], y.meta["rounding_seed"]);
  }
}

TEST_F(TrainerTest, CheckpointsCarryEveryStateComponentByName) {
  const std::map<std::string, std::vector<std::string>> components = {
      {"fp32-master", {"master", "m", "v"}},   {"bf16", {"m", "v"}},
      {"collage-light", {"m", "v", "dtheta"}}, {"collage-plus", {"m", "v", "dtheta", "dv"}},
      {"kahan", {"m", "v", "compensation"}},   {"stochastic", {"m", "v"}}};
  for (const auto& [precision, names] : components) {
    SCOPED_TRACE(precision);
    const std::string run = "run-" + precision;
    train(tiny_config(run, {"optimizer.precision=" + precision, "training.max_steps=1",
                            "training.eval_interval=0"}),
          {});
    Checkpoint c = load_checkpoint(resolve_resume("latest", (dir_ / run / "checkpoints").string()));
    std::vector<std::string> saved;
    for (const CheckpointTensor& t : c.tensors)
      if (t.name.rfind("optimizer.", 0) == 0) {
        saved.push_back(t.name.substr(10));
        EXPECT_EQ(t.dtype, precision == "fp32-master" ? "f32" : "bf16") << t.name;
        EXPECT_EQ(t.shape, std::vector<int64_t>{c.meta["num_parameters"].get<int64_t>()});
      }
    EXPECT_EQ(saved, names);
    EXPECT_EQ(c.meta["optimizer_components"].get<std::vector<std::string>>(), names);
    EXPECT_EQ(c.meta["precision"], precision);
    EXPECT_EQ(c.meta["adam_order"], "torch");
    EXPECT_TRUE(c.meta.contains("rounding_seed"));
    EXPECT_TRUE(c.meta["edq_cumulative"].contains("u_squared"));
  }
}

TEST_F(TrainerTest, NonFiniteLossStopsWithoutDamagingCheckpoints) {
  train(tiny_config("run", {"training.max_steps=3"}), {});
  const std::string good = resolve_resume("latest", (dir_ / "run" / "checkpoints").string());
  // An absurd learning rate overflows the weights on resume; the run must stop naming the
  // step, and `latest` must still be the good checkpoint.
  Config config = tiny_config("run", {"optimizer.lr=1.0e+38", "optimizer.min_lr=1.0e+38"});
  try {
    train(config, {"latest"});
    FAIL() << "expected a non-finite loss error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("step"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("without writing a checkpoint"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(resolve_resume("latest", (dir_ / "run" / "checkpoints").string()), good);
  EXPECT_NO_THROW(load_checkpoint(good));
  // The error is in train.log too, dated and at level critical.
  std::ifstream log(dir_ / "run" / "train.log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("[critical] step "), std::string::npos) << text;
  EXPECT_NE(text.find("without writing a checkpoint"), std::string::npos) << text;
}

// --resume auto, for requeued jobs: the first run starts fresh, the next continues; a run that
// is already at max_steps trains nothing and says so.
TEST_F(TrainerTest, ResumeAutoStartsFreshThenContinues) {
  TrainOptions automatic;
  automatic.resume = "auto";
  TrainResult first = train(tiny_config("run", {"training.max_steps=3"}), automatic);
  EXPECT_EQ(first.steps_run, 3);
  TrainResult second = train(tiny_config("run"), automatic);
  EXPECT_EQ(second.steps_run, 3);  // steps 4..6
  EXPECT_EQ(second.last_step, 6);
  EXPECT_EQ(metrics("run").size(), 7u);  // step 0 and 1..6, nothing lost or repeated
  TrainResult third = train(tiny_config("run"), automatic);
  EXPECT_EQ(third.steps_run, 0);
  EXPECT_EQ(third.last_step, 6);
}

TEST_F(TrainerTest, NonFiniteStopWithoutCheckpointsSaysSo) {
  try {
    train(tiny_config("run", {"optimizer.lr=1.0e+38", "optimizer.min_lr=1.0e+38",
                              "optimizer.warmup_steps=0", "checkpoint.interval=0"}),
          {});
    FAIL() << "expected a non-finite error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no checkpoint was written to"), std::string::npos)
        << e.what();
  }
}

// Directories that cannot be written are found before any work, naming the key.
TEST_F(TrainerTest, UnwritableDirectoriesAreRefusedNamingTheKey) {
  std::ofstream(dir_ / "a_file") << "not a directory";
  const std::string file = (dir_ / "a_file").string();
  try {
    train(tiny_config("run", {"checkpoint.dir=" + file + "/checkpoints"}), {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint.dir: cannot create the directory"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ / "run" / "metrics.jsonl"));  // no step was spent
  Config config = tiny_config("run");
  config.logging.dir = file + "/logs";
  try {
    train(config, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("logging.dir: cannot create the directory"),
              std::string::npos)
        << e.what();
  }
}

// Resuming under a config that makes it another run is refused, listing each key with both
// values, unless allowed; a changed learning rate or max_steps is only logged.
TEST_F(TrainerTest, ResumeRefusesConfigChangesThatChangeTheRun) {
  train(tiny_config("run", {"training.max_steps=2"}), {});
  TrainOptions resume;
  resume.resume = "latest";
  try {
    train(tiny_config("run", {"data.seed=7", "training.global_batch_size=8", "model.n_head=4"}),
          resume);
    FAIL() << "expected the resume to be refused";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const char* line : {"\n  model.n_head: 2 -> 4", "\n  data.seed: 1234 -> 7",
                             "\n  training.global_batch_size: 4 -> 8", "--allow-config-change"})
      EXPECT_NE(message.find(line), std::string::npos) << line << " in " << message;
  }
  resume.allow_config_change = true;
  EXPECT_EQ(train(tiny_config("run", {"data.seed=7", "training.max_steps=3"}), resume).last_step,
            3);
  resume.allow_config_change = false;
  EXPECT_EQ(
      train(tiny_config("run", {"data.seed=7", "optimizer.lr=1.0e-3", "training.max_steps=4"}),
            resume)
          .last_step,
      4);  // the checkpoint of step 3 carries data.seed 7: only lr and max_steps changed
}

// One run per directory: a fresh run where an earlier one left checkpoints is refused (resume
// it or --overwrite, which deletes them), and a second run while one holds the directory's lock
// fails naming its pid.
TEST_F(TrainerTest, RunDirectoriesAreNotShared) {
  train(tiny_config("run", {"training.max_steps=2"}), {});
  try {
    train(tiny_config("run", {"training.max_steps=2"}), {});
    FAIL() << "expected a fresh run over checkpoints to be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds checkpoints of an earlier run"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("--overwrite"), std::string::npos) << e.what();
  }
  TrainOptions overwrite;
  overwrite.overwrite = true;
  EXPECT_EQ(train(tiny_config("run", {"training.max_steps=1"}), overwrite).last_step, 1);
  // The step-2 checkpoint of the first run is gone: latest is the new run's step 1.
  EXPECT_EQ(fs::path(resolve_resume("latest", (dir_ / "run" / "checkpoints").string()))
                .filename()
                .string(),
            "step_00000001.ckpt");
  {
    RunDirectoryLock held((dir_ / "run").string(), "logging.dir");  // as a running job would
    try {
      train(tiny_config("run", {"training.max_steps=2"}), {"latest"});
      FAIL() << "expected the locked directory to be refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("is in use by another collage run (pid " +
                                           std::to_string(::getpid()) + ")"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(train(tiny_config("run", {"training.max_steps=2"}), {"latest"}).last_step, 2);
}

// checkpoint.dir is locked as well as logging.dir: a second run with its own logging.dir but the
// first one's checkpoint.dir (reached through a symlink) is refused before --overwrite deletes
// anything, and the first run's checkpoints stay.
TEST_F(TrainerTest, CheckpointDirectoryIsLockedThroughSymlinks) {
  const std::string shared = (dir_ / "shared_checkpoints").string();
  train(tiny_config("first", {"training.max_steps=3", "checkpoint.dir=" + shared}), {});
  fs::create_directory_symlink(shared, dir_ / "alias");
  const std::string alias = (dir_ / "alias").string();
  TrainOptions overwrite;
  overwrite.overwrite = true;
  {
    RunDirectoryLock first_run(shared, "checkpoint.dir");  // the first run, still alive
    try {
      train(tiny_config("second", {"training.max_steps=1", "checkpoint.dir=" + alias}), overwrite);
      FAIL() << "expected the locked checkpoint.dir to be refused";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("checkpoint.dir " + fs::canonical(shared).string() +
                             " is in use by another collage run (pid " +
                             std::to_string(::getpid()) + ")"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("--wait-lock"), std::string::npos) << message;
    }
    EXPECT_EQ(list_checkpoints(shared).size(), 1u) << "the first run's checkpoint was deleted";
  }
  // Once the first run has ended, the same command starts over.
  EXPECT_EQ(
      train(tiny_config("second", {"training.max_steps=1", "checkpoint.dir=" + alias}), overwrite)
          .last_step,
      1);
}

// --wait-lock: a run waits for the holder of its directory to end (a requeued job whose
// previous incarnation is still writing its last checkpoint), and fails naming the wait when
// the holder outlives it.
TEST_F(TrainerTest, WaitLockWaitsForTheHolderToEnd) {
  train(tiny_config("run", {"training.max_steps=2"}), {});
  TrainOptions resume_waiting;
  resume_waiting.resume = "latest";
  resume_waiting.wait_lock_seconds = 0.3;
  auto holder = std::make_unique<RunDirectoryLock>((dir_ / "run").string(), "logging.dir");
  try {
    train(tiny_config("run", {"training.max_steps=3"}), resume_waiting);
    FAIL() << "expected the run to give up after 0.3 s";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("still after waiting 0.3 s"), std::string::npos)
        << e.what();
  }
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    holder.reset();  // the previous run ends
  });
  resume_waiting.wait_lock_seconds = 30;
  EXPECT_EQ(train(tiny_config("run", {"training.max_steps=3"}), resume_waiting).last_step, 3);
  release.join();
}

// The run directory and the resume are settled before any data is read: with a dataset that
// does not exist, each refusal is still the run-directory one, not the missing file.
TEST_F(TrainerTest, RunDirectoryAndResumeAreCheckedBeforeTheData) {
  train(tiny_config("run", {"training.max_steps=2"}), {});
  const std::string missing = "data.datasets=[\"" + (dir_ / "nope").string() + "\"]";
  auto refusal = [&](std::vector<std::string> overrides, const TrainOptions& options) {
    try {
      train(tiny_config("run", overrides), options);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(refusal({missing}, {}).find("holds checkpoints of an earlier run"), std::string::npos);
  TrainOptions resume;
  resume.resume = "latest";
  const std::string changed = refusal({missing, "data.seed=7"}, resume);
  EXPECT_NE(changed.find("\n  data.seed: 1234 -> 7"), std::string::npos) << changed;
  EXPECT_EQ(changed.find("nope.idx"), std::string::npos) << changed;
  const std::string precision = refusal({"optimizer.precision=bf16"}, resume);
  EXPECT_NE(precision.find("--convert-precision"), std::string::npos) << precision;
  TrainOptions both = resume;
  both.init_from = "latest";
  EXPECT_NE(refusal({missing}, both).find("not both"), std::string::npos);
  // Nothing was touched: the run continues from its step-2 checkpoint.
  EXPECT_EQ(train(tiny_config("run", {"training.max_steps=3"}), resume).last_step, 3);
}

// parallel.cpu_gemm: the same run with oneDNN's bf16 matmuls and with OpenBLAS on widened
// tiles. Both accumulate in fp32 and round once, so the matmuls differ only in the order of
// the fp32 sums; attention on oneDNN also rounds its probabilities and dS to bf16 before their
// products (2^-8 relative a term: docs/ARCHITECTURE.md, "cpu attention"). The losses agree to
// bf16 noise. Runs only where oneDNN has a bf16 matmul.
TEST_F(TrainerTest, OnednnGemmsTrainAsOpenblasDoes) {
  const cpu::OnednnSupport& support = cpu::onednn_support();
  if (!support.bf16_matmul)
    GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (its ISA is " << support.isa
                 << "): a run with parallel.cpu_gemm onednn is not possible here";
  train(tiny_config("openblas", {"parallel.cpu_gemm=openblas", "logging.level=info"}), {});
  train(tiny_config("onednn", {"parallel.cpu_gemm=onednn", "logging.level=info"}), {});
  const auto a = metrics("openblas"), b = metrics("onednn");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 1; i < a.size(); i++)
    EXPECT_NEAR(a[i]["loss"].get<double>(), b[i]["loss"].get<double>(), 0.02) << "step " << i;
  auto log = [&](const char* run) {
    std::ifstream file(dir_ / run / "train.log");
    return std::string{std::istreambuf_iterator<char>(file), {}};
  };
  // Each run's MFU is against the peak of the engine that multiplied (model_flops.h).
  const std::string onednn = log("onednn"), openblas = log("openblas");
  EXPECT_NE(onednn.find("GEMMs: oneDNN bf16 matmul"), std::string::npos);
  EXPECT_NE(onednn.find("MFU against cpu: oneDNN bf16 matmul measured at "), std::string::npos)
      << onednn;
  EXPECT_NE(openblas.find("GEMMs: OpenBLAS sgemm"), std::string::npos);
  EXPECT_NE(openblas.find("MFU against cpu: OpenBLAS fp32 sgemm measured at "), std::string::npos)
      << openblas;
}

TEST_F(TrainerTest, TokenIdAtOrAboveVocabIsRejectedNamingTheFile) {
  write_dataset((dir_ / "bad").string(), 20, /*bad_token=*/64);
  Config config = tiny_config("run", {"data.datasets=[\"" + (dir_ / "bad").string() + "\"]"});
  try {
    train(config, {});
    FAIL() << "expected an out-of-vocab error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.bin"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("64"), std::string::npos) << e.what();
  }
}

TEST_F(TrainerTest, MissingDatasetIsAClearError) {
  Config config = tiny_config("run", {"data.datasets=[\"" + (dir_ / "nope").string() + "\"]"});
  try {
    train(config, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos) << e.what();
  }
}

// --init-from: a new run starts from another's weights (here under another strategy, which
// needs no conversion: no optimizer state is taken) with a fresh schedule and data position.
TEST_F(TrainerTest, InitFromStartsFreshFromTheWeights) {
  train(tiny_config("first"), {});  // fp32-master, 6 steps, validation at steps 3 and 6
  TrainOptions options;
  options.init_from = (dir_ / "first" / "checkpoints").string();  // its latest: step 6
  train(tiny_config("second", {"optimizer.precision=collage-plus"}), options);
  auto first = metrics("first"), second = metrics("second");
  ASSERT_EQ(second.size(), 7u);
  // The same weights on the same validation batches: the same validation loss, bit for bit.
  EXPECT_EQ(second[0]["val_loss"].get<double>(), first[6]["val_loss"].get<double>());
  EXPECT_EQ(second[0]["precision"], "collage-plus");
  // Fresh schedule and data: step 1 has step 1's learning rate and reads the first samples.
  EXPECT_EQ(second[1]["lr"].get<double>(), first[1]["lr"].get<double>());
  EXPECT_EQ(second[1]["consumed_samples"], first[1]["consumed_samples"]);
  // On the same first batch, the trained weights do better than the fresh ones (measured 3.78
  // against 4.15 after the first run's 6 steps).
  EXPECT_LT(second[1]["loss"].get<double>(), first[1]["loss"].get<double>() - 0.2)
      << "the second run did not start from the trained weights";
  // --init-from and --resume exclude each other.
  options.resume = "latest";
  EXPECT_THROW(train(tiny_config("third"), options), Error);
}

// One process cannot be two tensor-parallel ranks: refused naming the key and the launch,
// rather than silently trained at tensor-parallel 1.
TEST_F(TrainerTest, TensorParallelWithoutEnoughRanksIsRefused) {
  try {
    train(tiny_config("run", {"parallel.tensor_parallel=2"}), {});
    FAIL() << "tensor_parallel 2 was trained by one process";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.tensor_parallel: 2 does not divide the 1 ranks"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ / "run" / "metrics.jsonl"));
}

}  // namespace
}  // namespace collage
