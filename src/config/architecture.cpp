// The registry of architectures (architecture.h). A new architecture is one row here plus its
// model family in src/model (CONTRIBUTING.md, "Adding an architecture").
#include "config/architecture.h"

#include <array>

#include "config/config.h"
#include "core/error.h"

namespace collage {
namespace {

constexpr std::array kArchitectures = {
    Architecture{.name = "gpt",
                 .title = "GPT",
                 .family = ModelFamily::gpt,
                 .objective = Objective::next_token,
                 .tokenizer = TokenizerKind::gpt2_bpe,
                 .rotary_positions = true,
                 .kernel_cost_model = true,
                 .heads = ""},
    Architecture{.name = "bert",
                 .title = "BERT",
                 .family = ModelFamily::bert,
                 .objective = Objective::masked_lm,
                 .tokenizer = TokenizerKind::wordpiece,
                 .next_sentence = true,
                 .encoder_keys = true,
                 .heads = "masked LM + NSP"},
    Architecture{.name = "roberta",
                 .title = "RoBERTa",
                 .family = ModelFamily::bert,
                 .objective = Objective::masked_lm,
                 .tokenizer = TokenizerKind::wordpiece,
                 .positions_past_padding = true,
                 .encoder_keys = true,
                 .heads = "masked LM"},
};

}  // namespace

const Architecture* find_architecture(std::string_view name) {
  for (const Architecture& a : kArchitectures)
    if (a.name == name) return &a;
  return nullptr;
}

const Architecture& architecture(const ModelConfig& config) {
  const Architecture* a = find_architecture(config.arch);
  COLLAGE_CHECK(a != nullptr, "model.arch: expected one of {}, got '{}'", architecture_names(),
                config.arch);
  return *a;
}

std::string architecture_names() {
  std::string names;
  for (const Architecture& a : kArchitectures)
    names += (names.empty() ? "" : "|") + std::string(a.name);
  return names;
}

}  // namespace collage
