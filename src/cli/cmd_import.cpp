// `collage import DIR --output CKPT [--config YAML] [--force]`: a Hugging Face model directory
// as a collage checkpoint (src/tools/import.h).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "tools/import.h"

namespace collage {

void add_import_command(CLI::App& root) {
  auto options = std::make_shared<ImportOptions>();
  auto* cmd = root.add_subcommand(
      "import",
      "Read a Hugging Face model directory (config.json with model.safetensors, or the\n"
      "shards of model.safetensors.index.json) into a collage checkpoint for eval, generate,\n"
      "export, or `train --init-from` (which also takes hf:DIR directly). The classes\n"
      "`collage export` writes are read: GPT2LMHeadModel, GPTNeoXForCausalLM (rotary_pct 1,\n"
      "use_parallel_residual false, gelu_new), BertForPreTraining and RobertaForMaskedLM;\n"
      "a config.json collage does not compute exactly is refused naming each key.\n"
      "BF16 weights are kept as they are; F32 and F16 are rounded to bf16 nearest-even\n"
      "(the log counts the values that changed). The checkpoint holds the weights only:\n"
      "`train --resume` refuses it.\n"
      "Example (the published GPT-2, continued with collage-plus):\n"
      "  collage import ~/hf/gpt2 --output runs/gpt2/imported.ckpt\n"
      "  collage generate runs/gpt2/imported.ckpt --prompt 'Hello'\n"
      "  collage train configs/gpt2/124m.yaml --init-from hf:$HOME/hf/gpt2\n"
      "Exit status: 0 done, 1 an error (the message names the file, tensor or key),\n"
      "2 a command line that does not parse.");
  cmd->add_option("directory", options->source,
                  "The Hugging Face directory (or hf:DIR); also a `collage export` directory")
      ->required();
  cmd->add_option("-o,--output", options->output, "The checkpoint file to write (.ckpt)")
      ->required();
  cmd->add_option("--config", options->config,
                  "A run config (YAML) whose model section the directory must match, recorded "
                  "in the checkpoint. Default: the export's own config, else config.json's model "
                  "with the tokenizer files found in the directory");
  cmd->add_flag("--force", options->force, "Replace an existing --output file");
  cmd->callback([options] {
    auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    sink->set_pattern("[%H:%M:%S] %v");
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("collage", sink));
    import_hf_directory(*options);
  });
}

}  // namespace collage
