#pragma once
// GPT-2's byte-level BPE tokenizer (OpenAI gpt-2 encoder.py), token for token:
//   1. pre-split the text into words with GPT-2's regex (gpt2_pretokenizer.h);
//   2. each word's UTF-8 bytes start as one token per byte;
//   3. BPE: repeatedly merge the adjacent pair with the lowest rank in vocab.bpe, all its
//      occurrences left to right, until no ranked pair is left.
// encoder.json maps tokens, written in GPT-2's printable "bytes_to_unicode" alphabet, to
// ids; this class keeps each token as its raw bytes instead.
// "<|endoftext|>" inside the text is ordinary text here (as in encoder.py): callers append
// eot_token() themselves.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace collage {

class Gpt2Tokenizer {
 public:
  // Reads GPT-2's encoder.json (token -> id) and vocab.bpe (merges in rank order after a
  // "#version" line). Throws Error naming the file and the problem.
  static Gpt2Tokenizer load(const std::string& encoder_json_path,
                            const std::string& vocab_bpe_path);

  ~Gpt2Tokenizer();
  Gpt2Tokenizer(Gpt2Tokenizer&&) noexcept;
  Gpt2Tokenizer& operator=(Gpt2Tokenizer&&) noexcept;

  // Token ids of `utf8_text`. Ill-formed UTF-8 is first repaired the way Python's
  // errors="replace" and JS TextDecoder do it (one U+FFFD per maximal ill-formed subpart,
  // see utf8.h), so decode(encode(s)) == s holds for well-formed s only.
  // Thread-safe (the word cache is shared and locked per shard).
  std::vector<int32_t> encode(std::string_view utf8_text) const;
  // Same, appending to `out`.
  void encode_append(std::string_view utf8_text, std::vector<int32_t>& out) const;

  // The bytes the ids stand for, concatenated. Throws Error naming the first id that is not
  // in [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids) const;

  int vocab_size() const;     // 50257 for GPT-2
  int32_t eot_token() const;  // id of "<|endoftext|>": 50256 for GPT-2
  // Raw bytes of one token (id must be valid).
  const std::string& token_bytes(int32_t id) const;

 private:
  struct Impl;
  explicit Gpt2Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace collage
