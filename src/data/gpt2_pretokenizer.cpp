// GPT-2 pre-split with PCRE2 (see gpt2_pretokenizer.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/gpt2_pretokenizer.h"

#include <pcre2.h>

#include <string>

#include "core/error.h"

namespace collage {
namespace {

// GPT-2's pattern with `\s` spelled out as the Unicode White_Space property
// (TAB..CR, U+0085, and the Z categories: Zs spaces, U+2028, U+2029), which is what
// Python's `regex` module matches for \s. PCRE2's own \s in UCP mode also matches
// U+180E (through \h), which is a format character since Unicode 6.3, so it is not used.
constexpr const char* kPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\t-\r\x{85}\p{Z}\p{L}\p{N}]+)"
    R"(|[\t-\r\x{85}\p{Z}]+(?![^\t-\r\x{85}\p{Z}])|[\t-\r\x{85}\p{Z}]+)";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// Per-thread matching state. The JIT stack grows up to 64 MiB (address space, touched
// only as needed): `\s+(?!\S)` backtracks over a whitespace run, so a very long run needs
// a deep stack; beyond that next_match() falls back to the interpreter (heap-backed).
struct ThreadMatchState {
  pcre2_match_data* match_data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadMatchState() {
    if (!match_data || !context) fail("GPT-2 pre-tokenizer: out of memory for PCRE2 match data");
    if (jit_stack) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(match_data);
  }
};

}  // namespace

Gpt2Pretokenizer::Gpt2Pretokenizer() {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
  if (!code) {
    fail("GPT-2 pre-tokenizer: PCRE2 cannot compile the pattern at offset {}: {}", error_offset,
         pcre2_message(error));
  }
  code_ = code;
  // JIT is optional (some builds or platforms lack it); the interpreter gives the same
  // matches, only slower.
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Gpt2Pretokenizer::~Gpt2Pretokenizer() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

bool Gpt2Pretokenizer::next_match(std::string_view text, size_t offset, size_t* start,
                                  size_t* end) const {
  if (offset >= text.size()) return false;
  thread_local ThreadMatchState state;
  auto* code = static_cast<pcre2_code*>(code_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = PCRE2_ERROR_JIT_STACKLIMIT;
  if (jit_ && state.jit_stack) {
    rc = pcre2_jit_match(code, subject, text.size(), offset, 0, state.match_data, state.context);
  }
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
    rc = pcre2_match(code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                     state.match_data, state.context);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    fail("GPT-2 pre-tokenizer: PCRE2 match failed at byte {}: {}", offset, pcre2_message(rc));
  }
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.match_data);
  *start = ovector[0];
  *end = ovector[1];
  return true;
}

}  // namespace collage
