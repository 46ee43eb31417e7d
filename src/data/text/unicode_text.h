#pragma once
// The Unicode facts BERT's text normalisation needs (wordpiece_tokenizer.h), taken from ICU
// (Debian's libicu-dev) rather than tables of our own: general categories, canonical
// decomposition (NFD) and full lower-casing. Text is UTF-8 in and out and MUST be well-formed
// (utf8.h repairs ill-formed input first). All functions are thread-safe.
#include <cstddef>
#include <string>
#include <string_view>

namespace collage::unicode {

// The code point of well-formed UTF-8 `text` that starts at byte *at; advances *at past it.
char32_t next_code_point(std::string_view text, size_t* at);
// Appends the UTF-8 bytes of `cp` to `out`.
void append_utf8(char32_t cp, std::string& out);

// General category tests (Unicode Character Database, as of the ICU release linked).
bool is_other(char32_t cp);                  // C*: Cc, Cf, Cn (unassigned), Co, Cs
bool is_space_separator(char32_t cp);        // Zs
bool is_line_or_paragraph_sep(char32_t cp);  // Zl, Zp (U+2028, U+2029)
bool is_punctuation(char32_t cp);            // P*: Pc Pd Ps Pe Pi Pf Po
bool is_nonspacing_mark(char32_t cp);        // Mn

// Full default lower-casing of `text` (root locale), like Python's str.lower(): one- to
// many-character mappings (U+0130 -> "i\u0307") and Final_Sigma (a word-final capital sigma
// becomes U+03C2). Replaces `out`.
void to_lower(std::string_view text, std::string& out);

// Canonical decomposition (Unicode normalization form D) of `text`. Replaces `out`.
void to_nfd(std::string_view text, std::string& out);

}  // namespace collage::unicode
