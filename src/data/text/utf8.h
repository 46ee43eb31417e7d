#pragma once
// UTF-8 well-formedness for text that the GPT-2 tokenizer hands to PCRE2 (which needs
// valid UTF-8). Ill-formed input is not an error: like Python's
// bytes.decode("utf-8", errors="replace") and JavaScript's TextDecoder, each maximal
// ill-formed subpart becomes one U+FFFD (Unicode 15, section 3.9 "best practice").
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace collage {

// Length of the longest prefix of `bytes` that is well-formed UTF-8 (== bytes.size() when
// all of it is).
size_t utf8_valid_prefix(std::string_view bytes);

// `bytes` with every maximal ill-formed subpart replaced by U+FFFD ("\xEF\xBF\xBD").
// *replacements (if given) receives the number of U+FFFD inserted.
std::string utf8_replace_invalid(std::string_view bytes, int64_t* replacements = nullptr);

}  // namespace collage
