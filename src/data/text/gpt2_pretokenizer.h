#pragma once
// GPT-2's pre-split: before BPE, encoder.py cuts text into "words" with the regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (contractions, letter runs, digit runs and punctuation runs that keep one leading space,
// and whitespace runs that leave their last space to the next word). std::regex has no
// \p{..} classes, so this uses PCRE2 in UTF + UCP mode, compiled (and JIT-compiled) once.
#include <cstddef>
#include <string_view>

namespace collage {

class Gpt2Pretokenizer {
 public:
  Gpt2Pretokenizer();  // compiles the pattern; throws Error if PCRE2 rejects it
  ~Gpt2Pretokenizer();
  Gpt2Pretokenizer(const Gpt2Pretokenizer&) = delete;
  Gpt2Pretokenizer& operator=(const Gpt2Pretokenizer&) = delete;

  // Calls on_word(std::string_view word) for every match, in order. The matches cover all
  // of `text`. `text` MUST be well-formed UTF-8 (see utf8.h): PCRE2's JIT does not check.
  // Thread-safe: each thread uses its own PCRE2 match data.
  template <typename OnWord>
  void split(std::string_view text, OnWord&& on_word) const {
    size_t start = 0, end = 0;
    while (next_match(text, end, &start, &end)) on_word(text.substr(start, end - start));
  }

  bool uses_jit() const { return jit_; }

 private:
  // The first match at or after `offset`: [*start, *end). False when there is none.
  bool next_match(std::string_view text, size_t offset, size_t* start, size_t* end) const;

  void* code_ = nullptr;  // pcre2_code_8*, kept opaque so users need not include pcre2.h
  bool jit_ = false;
};

}  // namespace collage
