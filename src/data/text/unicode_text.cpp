// Unicode categories, lower-casing and NFD through ICU (see unicode_text.h).
#include "data/text/unicode_text.h"

#include <unicode/bytestream.h>
#include <unicode/casemap.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>

#include <climits>

#include "core/error.h"

namespace collage::unicode {
namespace {

uint32_t category_mask(char32_t cp) { return U_GET_GC_MASK(static_cast<UChar32>(cp)); }

// ICU's UTF-8 functions take int32_t lengths.
icu::StringPiece piece(std::string_view text) {
  COLLAGE_CHECK(text.size() <= INT32_MAX, "ICU: {} bytes of text in one call, at most {} allowed",
                text.size(), INT32_MAX);
  return icu::StringPiece(text.data(), static_cast<int32_t>(text.size()));
}

const icu::Normalizer2& nfd() {
  // ICU owns the instance; it is immutable and safe to share between threads.
  static const icu::Normalizer2* instance = [] {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* n = icu::Normalizer2::getNFDInstance(status);
    if (U_FAILURE(status)) fail("ICU: cannot load the NFD normalizer: {}", u_errorName(status));
    return n;
  }();
  return *instance;
}

}  // namespace

char32_t next_code_point(std::string_view text, size_t* at) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data()) + *at;
  const unsigned char lead = s[0];
  if (lead < 0x80) {
    *at += 1;
    return lead;
  }
  if (lead < 0xE0) {
    *at += 2;
    return (char32_t(lead & 0x1F) << 6) | (s[1] & 0x3F);
  }
  if (lead < 0xF0) {
    *at += 3;
    return (char32_t(lead & 0x0F) << 12) | (char32_t(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
  }
  *at += 4;
  return (char32_t(lead & 0x07) << 18) | (char32_t(s[1] & 0x3F) << 12) |
         (char32_t(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_other(char32_t cp) { return (category_mask(cp) & U_GC_C_MASK) != 0; }
bool is_space_separator(char32_t cp) { return (category_mask(cp) & U_GC_ZS_MASK) != 0; }
bool is_line_or_paragraph_sep(char32_t cp) {
  return (category_mask(cp) & (U_GC_ZL_MASK | U_GC_ZP_MASK)) != 0;
}
bool is_punctuation(char32_t cp) { return (category_mask(cp) & U_GC_P_MASK) != 0; }
bool is_nonspacing_mark(char32_t cp) { return (category_mask(cp) & U_GC_MN_MASK) != 0; }

void to_lower(std::string_view text, std::string& out) {
  out.clear();
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
  UErrorCode status = U_ZERO_ERROR;
  // "" is the root locale: the default mappings, without Turkish or Lithuanian rules.
  icu::CaseMap::utf8ToLower("", 0, piece(text), sink, nullptr, status);
  if (U_FAILURE(status))
    fail("ICU: lower-casing {} bytes failed: {}", text.size(), u_errorName(status));
}

void to_nfd(std::string_view text, std::string& out) {
  out.clear();
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
  UErrorCode status = U_ZERO_ERROR;
  nfd().normalizeUTF8(0, piece(text), sink, nullptr, status);
  if (U_FAILURE(status)) fail("ICU: NFD of {} bytes failed: {}", text.size(), u_errorName(status));
}

}  // namespace collage::unicode
