// GPT-2 pre-split with PCRE2 (see gpt2_pretokenizer.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/text/gpt2_pretokenizer.h"

#include <pcre2.h>

#include <string>

#include "core/error.h"

namespace collage {
namespace {

// GPT-2's pattern with `\s` spelled out as the Unicode White_Space property (TAB..CR,
// U+0085 and the Z categories: Zs spaces, U+2028, U+2029). That is what Python's `regex`
// module, which encoder.py uses, matches for \s (checked over all code points). PCRE2's
// own \s in UCP mode also matches U+180E (through \h), a format character since Unicode
// 6.3, so it is not used.
constexpr const char* kPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\t-\r\x{85}\p{Z}\p{L}\p{N}]+)"
    R"(|[\t-\r\x{85}\p{Z}]+(?![^\t-\r\x{85}\p{Z}])|[\t-\r\x{85}\p{Z}]+)";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// Per-thread match data (PCRE2 writes the match offsets there, so threads cannot share it).
struct ThreadMatchData {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  ThreadMatchData() {
    if (!data) fail("GPT-2 pre-tokenizer: out of memory for PCRE2 match data");
  }
  ~ThreadMatchData() { pcre2_match_data_free(data); }
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
  thread_local ThreadMatchData match;
  auto* code = static_cast<pcre2_code*>(code_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  // The JIT's default 32 KiB stack is plenty here (runs of 20 MB of spaces or letters match
  // fine: the repeats backtrack without stacking frames), but should some input exhaust it,
  // the interpreter (heap-backed) gives the same match.
  int rc = PCRE2_ERROR_JIT_STACKLIMIT;
  if (jit_) rc = pcre2_jit_match(code, subject, text.size(), offset, 0, match.data, nullptr);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
    rc = pcre2_match(code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                     match.data, nullptr);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    fail("GPT-2 pre-tokenizer: PCRE2 match failed at byte {}: {}", offset, pcre2_message(rc));
  }
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.data);
  *start = ovector[0];
  *end = ovector[1];
  return true;
}

}  // namespace collage
