// UTF-8 validation and U+FFFD replacement (see utf8.h).
#include "data/text/utf8.h"

#include <cstring>

namespace collage {
namespace {

// The well-formed sequence starting at s[0] has length 1..4: returns it. Otherwise returns
// minus the length of the maximal ill-formed subpart (1..3 bytes), which is replaced by
// one U+FFFD. Byte ranges are Table 3-7 of the Unicode standard: they exclude overlong
// forms (C0, C1, E0 80..9F, F0 80..8F), surrogates (ED A0..BF) and > U+10FFFF (F4 90..).
int sequence_length(const unsigned char* s, size_t n) {
  const unsigned char lead = s[0];
  if (lead < 0x80) return 1;
  int length = 0;
  unsigned char second_lo = 0x80, second_hi = 0xBF;  // allowed range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) second_lo = 0xA0;
    if (lead == 0xED) second_hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) second_lo = 0x90;
    if (lead == 0xF4) second_hi = 0x8F;
  } else {
    return -1;  // 80..C1, F5..FF never start a sequence
  }
  for (int i = 1; i < length; ++i) {
    if (static_cast<size_t>(i) >= n) return -i;  // truncated at the end of the input
    const unsigned char lo = i == 1 ? second_lo : 0x80;
    const unsigned char hi = i == 1 ? second_hi : 0xBF;
    if (s[i] < lo || s[i] > hi) return -i;
  }
  return length;
}

}  // namespace

size_t utf8_valid_prefix(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    // Fast path: 8 ASCII bytes at a time (English text is almost all ASCII).
    if (i + 8 <= n) {
      uint64_t word;
      std::memcpy(&word, s + i, 8);
      if ((word & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const int length = sequence_length(s + i, n - i);
    if (length < 0) return i;
    i += static_cast<size_t>(length);
  }
  return n;
}

std::string utf8_replace_invalid(std::string_view bytes, int64_t* replacements) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  std::string out;
  out.reserve(n + n / 8);
  int64_t replaced = 0;
  size_t i = 0;
  while (i < n) {
    const int length = sequence_length(s + i, n - i);
    if (length > 0) {
      out.append(bytes.data() + i, static_cast<size_t>(length));
      i += static_cast<size_t>(length);
    } else {
      out.append("\xEF\xBF\xBD");
      ++replaced;
      i += static_cast<size_t>(-length);
    }
  }
  if (replacements) *replacements = replaced;
  return out;
}

}  // namespace collage
