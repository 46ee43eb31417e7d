// BERT's BasicTokenizer + WordpieceTokenizer (see wordpiece_tokenizer.h).
#include "data/text/wordpiece_tokenizer.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "data/text/unicode_text.h"
#include "data/text/utf8.h"

namespace collage {
namespace {

// Heterogeneous lookup: find a std::string key by a std::string_view into the text.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// tokenization.py's _is_punctuation: all ASCII that is neither letter, digit, space nor
// control counts (Unicode has "$+<=>^`|~" as symbols, BERT splits them all the same).
bool is_bert_punctuation(char32_t cp) {
  if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
      (cp >= 123 && cp <= 126)) {
    return true;
  }
  return cp >= 0x80 && unicode::is_punctuation(cp);
}

// `text` itself when it is well-formed UTF-8, else its U+FFFD repair (utf8.h) kept in `storage`.
std::string_view well_formed(std::string_view text, std::string& storage) {
  if (utf8_valid_prefix(text) == text.size()) return text;
  storage = utf8_replace_invalid(text);
  return storage;
}

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

// BasicTokenizer (steps 1-5 of wordpiece_tokenizer.h): calls on_word(std::string_view) for
// every word in order. `text` is well-formed UTF-8. The buffers are reused across words.
class BasicWordSplitter {
 public:
  template <typename OnWord>
  void split(std::string_view text, OnWord&& on_word) {
    raw_.clear();
    size_t at = 0;
    while (at < text.size()) {
      const size_t begin = at;
      const char32_t cp = unicode::next_code_point(text, &at);
      if (cp < 0x80) {  // ASCII: no table look-ups
        if (cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r') {
          finish_word(on_word);
        } else if (cp >= 0x20 && cp != 0x7F) {  // other C0 controls and DEL are dropped
          raw_.push_back(static_cast<char>(cp));
        }
        continue;
      }
      if (cp == 0xFFFD || unicode::is_other(cp)) continue;  // step 1: dropped
      // Steps 1 and 3: Zs became a space; U+2028/2029 stay but str.split() splits there.
      if (unicode::is_space_separator(cp) || unicode::is_line_or_paragraph_sep(cp)) {
        finish_word(on_word);
        continue;
      }
      if (is_cjk_ideograph(cp)) {  // step 2: a word of its own (still normalised: U+F900..)
        finish_word(on_word);
        raw_.append(text.substr(begin, at - begin));
        finish_word(on_word);
        continue;
      }
      raw_.append(text.substr(begin, at - begin));
    }
    finish_word(on_word);
  }

 private:
  // Steps 4 and 5 on the whitespace-delimited word in raw_.
  template <typename OnWord>
  void finish_word(OnWord&& on_word) {
    if (raw_.empty()) return;
    std::string_view word;
    if (is_ascii(raw_)) {
      for (char& c : raw_) {
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      }
      word = raw_;
    } else {
      // Lower-casing sees the whole word: Final_Sigma depends on the neighbours of a Σ.
      unicode::to_lower(raw_, lowered_);
      unicode::to_nfd(lowered_, decomposed_);
      stripped_.clear();
      for (size_t at = 0; at < decomposed_.size();) {
        const size_t begin = at;
        const char32_t cp = unicode::next_code_point(decomposed_, &at);
        if (!unicode::is_nonspacing_mark(cp)) stripped_.append(decomposed_, begin, at - begin);
      }
      word = stripped_;
    }
    size_t start = 0;  // of the current run of non-punctuation
    for (size_t at = 0; at < word.size();) {
      const size_t begin = at;
      const char32_t cp = unicode::next_code_point(word, &at);
      if (is_bert_punctuation(cp)) {
        if (begin > start) on_word(word.substr(start, begin - start));
        on_word(word.substr(begin, at - begin));
        start = at;
      }
    }
    if (start < word.size()) on_word(word.substr(start));
    raw_.clear();
  }

  std::string raw_, lowered_, decomposed_, stripped_;
};

}  // namespace

bool is_cjk_ideograph(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

struct WordpieceTokenizer::Impl {
  std::vector<std::string> tokens;  // [vocab_size] id -> token
  TokenMap word_start;              // every token, as written
  TokenMap continuation;            // "##xyz" tokens, keyed "xyz"
  size_t longest_token = 0;         // bytes; no longer piece can match
  int32_t unk = -1;

  // WordPiece of one BasicTokenizer word, appended to `out`; `starts` is scratch.
  void wordpiece(std::string_view word, std::vector<size_t>& starts,
                 std::vector<int32_t>& out) const {
    starts.clear();  // byte offset of each code point, then word.size()
    for (size_t at = 0; at < word.size();) {
      starts.push_back(at);
      unicode::next_code_point(word, &at);
    }
    const size_t chars = starts.size();
    starts.push_back(word.size());
    if (chars > static_cast<size_t>(kMaxWordChars)) {
      out.push_back(unk);
      return;
    }
    const size_t first_piece = out.size();
    for (size_t begin = 0; begin < chars;) {
      const TokenMap& pieces = begin == 0 ? word_start : continuation;
      int32_t id = -1;
      size_t end = chars;
      for (; end > begin; --end) {
        const size_t bytes = starts[end] - starts[begin];
        if (bytes > longest_token) continue;
        const auto it = pieces.find(word.substr(starts[begin], bytes));
        if (it != pieces.end()) {
          id = it->second;
          break;
        }
      }
      if (id < 0) {  // nothing matches here: the whole word is unknown
        out.resize(first_piece);
        out.push_back(unk);
        return;
      }
      out.push_back(id);
      begin = end;
    }
  }
};

WordpieceTokenizer::WordpieceTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WordpieceTokenizer::~WordpieceTokenizer() = default;
WordpieceTokenizer::WordpieceTokenizer(WordpieceTokenizer&&) noexcept = default;
WordpieceTokenizer& WordpieceTokenizer::operator=(WordpieceTokenizer&&) noexcept = default;

WordpieceTokenizer WordpieceTokenizer::load(const std::string& vocab_txt_path) {
  std::ifstream in(vocab_txt_path, std::ios::binary);
  if (!in) fail("{}: cannot open BERT vocabulary ({})", vocab_txt_path, std::strerror(errno));
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) fail("{}: read error", vocab_txt_path);
  const std::string text = content.str();
  std::vector<std::string> tokens;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();  // last line without a newline
    tokens.emplace_back(text, at, end - at);
    at = end + 1;
  }
  return from_tokens(std::move(tokens), vocab_txt_path);
}

WordpieceTokenizer WordpieceTokenizer::from_tokens(std::vector<std::string> tokens,
                                                   const std::string& source) {
  COLLAGE_CHECK(!tokens.empty(), "{}: empty BERT vocabulary", source);
  COLLAGE_CHECK(tokens.size() <= INT32_MAX, "{}: {} tokens, more than int32 ids hold", source,
                tokens.size());
  auto impl = std::make_unique<Impl>();
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string& token = tokens[id];
    const size_t line = id + 1;
    COLLAGE_CHECK(!token.empty(), "{}:{}: empty line (a vocabulary has one token per line)", source,
                  line);
    COLLAGE_CHECK(token.find('\r') == std::string::npos,
                  "{}:{}: carriage return in token (CRLF line ends?)", source, line);
    COLLAGE_CHECK(utf8_valid_prefix(token) == token.size(), "{}:{}: token is not valid UTF-8",
                  source, line);
    const auto [it, inserted] = impl->word_start.emplace(token, static_cast<int32_t>(id));
    COLLAGE_CHECK(inserted, "{}:{}: token \"{}\" is already on line {}", source, line, token,
                  it->second + 1);
    if (token.size() > 2 && token.compare(0, 2, "##") == 0) {
      impl->continuation.emplace(token.substr(2), static_cast<int32_t>(id));
    }
    impl->longest_token = std::max(impl->longest_token, token.size());
  }
  const auto unk = impl->word_start.find(std::string_view("[UNK]"));
  COLLAGE_CHECK(unk != impl->word_start.end(), "{}: no \"[UNK]\" token in the vocabulary", source);
  impl->unk = unk->second;
  impl->tokens = std::move(tokens);
  return WordpieceTokenizer(std::move(impl));
}

std::vector<int32_t> WordpieceTokenizer::encode(std::string_view utf8_text) const {
  std::vector<int32_t> ids;
  encode_append(utf8_text, ids);
  return ids;
}

void WordpieceTokenizer::encode_append(std::string_view utf8_text,
                                       std::vector<int32_t>& out) const {
  std::string repaired;
  utf8_text = well_formed(utf8_text, repaired);
  BasicWordSplitter splitter;
  std::vector<size_t> starts;
  splitter.split(utf8_text, [&](std::string_view word) { impl_->wordpiece(word, starts, out); });
}

std::vector<std::string> WordpieceTokenizer::basic_words(std::string_view utf8_text) {
  std::string repaired;
  utf8_text = well_formed(utf8_text, repaired);
  std::vector<std::string> words;
  BasicWordSplitter splitter;
  splitter.split(utf8_text, [&](std::string_view word) { words.emplace_back(word); });
  return words;
}

int WordpieceTokenizer::vocab_size() const { return static_cast<int>(impl_->tokens.size()); }

int32_t WordpieceTokenizer::id_of(std::string_view token) const {
  const auto it = impl_->word_start.find(token);
  return it == impl_->word_start.end() ? -1 : it->second;
}

int32_t WordpieceTokenizer::unk_id() const { return impl_->unk; }

const std::string& WordpieceTokenizer::token(int32_t id) const {
  COLLAGE_CHECK(id >= 0 && id < vocab_size(), "token id {} is outside the vocabulary [0, {})", id,
                vocab_size());
  return impl_->tokens[id];
}

}  // namespace collage
