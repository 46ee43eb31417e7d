// `collage export CHECKPOINT --output DIR [--dtype bfloat16|float32] [--force]`: a trained
// model's weights as safetensors for tools outside collage (src/tools/export.h).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "tools/export.h"

namespace collage {

void add_export_command(CLI::App& root) {
  auto options = std::make_shared<ExportOptions>();
  auto* cmd = root.add_subcommand(
      "export",
      "Write a checkpoint's weights as DIR/model.safetensors (Hugging Face's safetensors\n"
      "format: a JSON header, then the raw tensors), to use the model outside collage.\n"
      "Names: a GPT with learned positions computes what GPT-2 does, so it gets\n"
      "GPT2LMHeadModel's tensor names and layouts (transformer.wte.weight trimmed to\n"
      "model.vocab_size, transformer.h.N.attn.c_attn.weight as Conv1D's (in, out), ...;\n"
      "lm_head.weight only when untied) and a config.json (model_type gpt2, gelu_new), which\n"
      "transformers' GPT2LMHeadModel.from_pretrained(DIR) loads. Anything else (rope\n"
      "positions, BERT, RoBERTa) keeps collage's own parameter names and shapes\n"
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
      "  python3 -c 'from transformers import GPT2LMHeadModel as M; "
      "M.from_pretrained(\"runs/demo/hf\")'\n"
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
  cmd->add_flag("--force", options->force,
                "Write into a non-empty --output: the export's files (model.safetensors, "
                "config.json, vocab.json, merges.txt, vocab.txt, tokenizer_config.json) are "
                "replaced, those of an earlier export this one does not write are removed, "
                "other files are kept");
  cmd->callback([options] {
    // The log on stderr, as the other commands that use a trained model do.
    auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    sink->set_pattern("[%H:%M:%S] %v");
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("collage", sink));
    export_checkpoint(*options);
  });
}

}  // namespace collage
