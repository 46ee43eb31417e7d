// `collage export CHECKPOINT --output DIR [--dtype bfloat16|float32] [--names hf|collage]
// [--force]`: a trained
// model's weights as safetensors for tools outside collage (src/tools/export.h).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "checkpoint/safetensors_shards.h"
#include "cli/commands.h"
#include "tools/export.h"

namespace collage {

void add_export_command(CLI::App& root) {
  auto options = std::make_shared<ExportOptions>();
  auto* cmd = root.add_subcommand(
      "export",
      "Write a checkpoint's weights as DIR/model.safetensors (Hugging Face's safetensors\n"
      "format: a JSON header, then the raw tensors), to use the model outside collage.\n"
      "Names: each architecture gets the tensor names and layouts of the Hugging Face class\n"
      "that computes exactly what it does, and a config.json that class reads:\n"
      "  gpt, learned positions  GPT2LMHeadModel     (Conv1D weights as (in, out))\n"
      "  gpt, rope               GPTNeoXForCausalLM  (rotary_pct 1, sequential residual)\n"
      "  bert                    BertForPreTraining  (MLM + NSP heads, pooler)\n"
      "  roberta                 RobertaForMaskedLM\n"
      "The vocabulary's padding rows are dropped and a tied head is left out, as\n"
      "save_pretrained does. --names collage keeps collage's own parameter names and shapes\n"
      "(src/model/gpt.h, bert.h). The log says which naming and why. The safetensors\n"
      "metadata records format pt, the collage version, the step, the precision strategy,\n"
      "the naming and the checkpoint's whole config (YAML, under \"collage_config\").\n"
      "Tokenizer: the files the checkpoint's config names (data.vocab_file, data.merges_file)\n"
      "are copied as vocab.json and merges.txt (encoders: vocab.txt) when they exist, so\n"
      "AutoTokenizer.from_pretrained(DIR) works too.\n"
      "Everything is written beside DIR first and renamed into place: a failed export\n"
      "leaves no half model.\n"
      "Example:\n"
      "  collage export runs/demo/checkpoints --output runs/demo/hf\n"
      "  python3 -c 'import transformers as t; t.AutoModelForCausalLM.from_pretrained("
      "\"runs/demo/hf\")'\n"
      "Exit status: 0 done, 1 an error (the message names the file), 2 a command line that\n"
      "does not parse.");
  cmd->add_option("checkpoint", options->checkpoint,
                  "A checkpoint file (step_N.ckpt), a multi-rank set's manifest (any tensor- and "
                  "data-parallel layout), or a checkpoint directory (its newest checkpoint that "
                  "verifies)")
      ->required();
  cmd->add_option("-o,--output", options->output,
                  "The export directory; created, or an empty one. A non-empty one is refused "
                  "unless --force")
      ->required();
  cmd->add_option("--dtype", options->dtype,
                  "bfloat16: the trained bf16 weights exactly (BF16); float32: the same values "
                  "widened exactly (F32, twice the size)")
      ->check(CLI::IsMember({"bfloat16", "float32"}))
      ->capture_default_str();
  auto max_shard = std::make_shared<std::string>("5GB");
  cmd->add_option("--max-shard-size", *max_shard,
                  "Split model.safetensors into model-0000k-of-0000n.safetensors shards of at "
                  "most this size, with model.safetensors.index.json, as save_pretrained does: "
                  "bytes, or KB/MB/GB (powers of 10), KiB/MiB/GiB (powers of 2)")
      ->capture_default_str();
  auto names = std::make_shared<std::string>("hf");
  cmd->add_option("--names", *names,
                  "hf: the Hugging Face class's names and config.json; collage: collage's own "
                  "parameter names and shapes, no config.json")
      ->check(CLI::IsMember({"hf", "collage"}))
      ->capture_default_str();
  cmd->add_flag("--force", options->force,
                "Write into a non-empty --output: the export's files (model.safetensors, "
                "config.json, vocab.json, merges.txt, vocab.txt, tokenizer_config.json) are "
                "replaced, those of an earlier export this one does not write are removed, "
                "other files are kept");
  cmd->callback([options, names, max_shard] {
    options->collage_names = *names == "collage";
    options->max_shard_bytes = parse_max_shard_size(*max_shard);
    // The log on stderr, as the other commands that use a trained model do.
    auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    sink->set_pattern("[%H:%M:%S] %v");
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("collage", sink));
    export_checkpoint(*options);
  });
}

}  // namespace collage
