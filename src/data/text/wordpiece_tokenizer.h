#pragma once
// BERT's uncased tokenizer (Google's tokenization.py FullTokenizer with do_lower_case, which
// Megatron's bert_tokenization.py copies): BasicTokenizer, then WordpieceTokenizer.
//
// BasicTokenizer, on code points:
//   1. clean: drop U+0000, U+FFFD and every category C* character (Cc, Cf, Cn, Co, Cs) except
//      tab, LF and CR; tab, LF, CR and category Zs become spaces;
//   2. every CJK ideograph (the Unicode blocks listed in is_cjk_ideograph) becomes a word;
//   3. split into words at spaces (and at U+2028/U+2029, on which Python's str.split() splits);
//   4. each word: lower-case (full mapping with Final_Sigma, as Python's str.lower()), NFD,
//      drop the non-spacing marks (Mn): "Ünïcödé" -> "unicode";
//   5. each punctuation character becomes a word of its own: ASCII 33-47, 58-64, 91-96,
//      123-126 (so "$+<=>^`|~" count) and category P*.
// WordpieceTokenizer, on each word: a word of more than 100 code points is [UNK]; otherwise
// greedy longest match first from the left, pieces after the first looked up as "##piece";
// if some position has no match the whole word is [UNK].
// Special tokens written in the text ("[CLS]", "[MASK]") are ordinary text here, as in
// tokenization.py: callers add [CLS]/[SEP]/[MASK] ids themselves.
// Ill-formed UTF-8 is first repaired to U+FFFD (utf8.h), which step 1 then drops.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace collage {

class WordpieceTokenizer {
 public:
  // Reads a BERT vocab.txt: one token per line, the token on line n+1 has id n; for example
  // bert-base-uncased's data/assets/bert-uncased/vocab.txt (30522 tokens). Throws Error naming the
  // file (and line) for a missing/unreadable file, an empty line, a CR, a token that is not UTF-8,
  // a duplicate token or no "[UNK]".
  static WordpieceTokenizer load(const std::string& vocab_txt_path);
  // The same from tokens in id order; `source` names them in errors.
  static WordpieceTokenizer from_tokens(std::vector<std::string> tokens, const std::string& source);

  ~WordpieceTokenizer();
  WordpieceTokenizer(WordpieceTokenizer&&) noexcept;
  WordpieceTokenizer& operator=(WordpieceTokenizer&&) noexcept;

  // Token ids of `utf8_text`. Thread-safe.
  std::vector<int32_t> encode(std::string_view utf8_text) const;
  // Same, appending to `out`.
  void encode_append(std::string_view utf8_text, std::vector<int32_t>& out) const;

  // The words BasicTokenizer makes of `utf8_text` (steps 1-5 above), before WordPiece.
  static std::vector<std::string> basic_words(std::string_view utf8_text);

  int vocab_size() const;
  // Id of `token`, or -1 if the vocabulary does not have it.
  int32_t id_of(std::string_view token) const;
  int32_t unk_id() const;  // id of "[UNK]": 100 in bert-base-uncased
  // The token string of an id (e.g. "##ing"); throws Error if id is not in [0, vocab_size()).
  const std::string& token(int32_t id) const;

  static constexpr int kMaxWordChars = 100;  // longer words are [UNK]

 private:
  struct Impl;
  explicit WordpieceTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// True for the code points BERT surrounds with spaces: the CJK Unified Ideographs blocks
// U+4E00-9FFF, U+3400-4DBF, U+20000-2A6DF, U+2A700-2B73F, U+2B740-2B81F, U+2B820-2CEAF and
// the CJK Compatibility Ideographs U+F900-FAFF, U+2F800-2FA1F (not Hangul, kana or CJK
// punctuation).
bool is_cjk_ideograph(char32_t cp);

}  // namespace collage
