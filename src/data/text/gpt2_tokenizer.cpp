// GPT-2 byte-level BPE: loading encoder.json / vocab.bpe, encode, decode (see
// gpt2_tokenizer.h).
#include "data/text/gpt2_tokenizer.h"

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "data/text/bpe_merges.h"
#include "data/text/gpt2_pretokenizer.h"
#include "data/text/utf8.h"

namespace collage {
namespace {

// GPT-2's bytes_to_unicode(): the printable bytes '!'..'~', U+00A1..U+00AC and
// U+00AE..U+00FF stand for themselves; the other 68 bytes, in increasing order, get
// U+0100, U+0101, ... so every token in encoder.json is printable text.
std::array<char32_t, 256> bytes_to_unicode() {
  std::array<char32_t, 256> code_point{};
  char32_t next_extra = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    code_point[b] = printable ? static_cast<char32_t>(b) : next_extra++;
  }
  return code_point;
}

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open GPT-2 {} ({})", path, what, std::strerror(errno));
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) fail("{}: read error", path);
  return content.str();
}

// The raw bytes a token of encoder.json stands for, or false if it has a character outside
// the 256-character alphabet. `token` is valid UTF-8 (nlohmann-json checks that).
bool token_to_bytes(const std::string& token, const std::unordered_map<char32_t, uint8_t>& byte_of,
                    std::string* bytes) {
  bytes->clear();
  for (size_t i = 0; i < token.size();) {
    const auto lead = static_cast<unsigned char>(token[i]);
    char32_t cp = lead;
    int length = 1;
    if (lead >= 0xE0) {
      return false;  // U+0800 and above: outside the alphabet (which ends at U+0143)
    } else if (lead >= 0xC0) {
      cp = ((lead & 0x1Fu) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3Fu);
      length = 2;
    }
    auto it = byte_of.find(cp);
    if (it == byte_of.end()) return false;
    bytes->push_back(static_cast<char>(it->second));
    i += static_cast<size_t>(length);
  }
  return true;
}

// Words seen before -> their tokens. English text repeats a few thousand words, so most
// words skip BPE. Sharded so that OpenMP threads rarely wait on each other; a full shard is
// simply emptied (bounded memory, no eviction bookkeeping).
class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 64;             // longer words are rare: not cached
  static constexpr size_t kMaxEntriesPerShard = 1 << 14;  // 16 shards -> ~260k words

  bool find(std::string_view word, std::vector<int32_t>& out) const {
    Shard& shard = shard_for(word);
    std::lock_guard lock(shard.mutex);
    auto it = shard.map.find(word);
    if (it == shard.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }

  void insert(std::string_view word, const int32_t* ids, size_t n) const {
    Shard& shard = shard_for(word);
    std::lock_guard lock(shard.mutex);
    if (shard.map.size() >= kMaxEntriesPerShard) shard.map.clear();
    shard.map.try_emplace(std::string(word), ids, ids + n);
  }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> map;
  };
  Shard& shard_for(std::string_view word) const {
    return shards_[(Hash{}(word) >> 20) % shards_.size()];
  }
  mutable std::array<Shard, 16> shards_;
};

}  // namespace

struct Gpt2Tokenizer::Impl {
  std::vector<std::string> token_bytes;   // [vocab] raw bytes of each token
  std::array<int32_t, 256> byte_token{};  // byte -> id of the one-byte token
  BpeMerges merges;
  int32_t eot = -1;
  Gpt2Pretokenizer pretokenizer;
  WordCache cache;
};

Gpt2Tokenizer::Gpt2Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Gpt2Tokenizer::~Gpt2Tokenizer() = default;
Gpt2Tokenizer::Gpt2Tokenizer(Gpt2Tokenizer&&) noexcept = default;
Gpt2Tokenizer& Gpt2Tokenizer::operator=(Gpt2Tokenizer&&) noexcept = default;

Gpt2Tokenizer Gpt2Tokenizer::load(const std::string& encoder_json_path,
                                  const std::string& vocab_bpe_path) {
  auto impl = std::make_unique<Impl>();
  const std::array<char32_t, 256> code_point = bytes_to_unicode();
  std::unordered_map<char32_t, uint8_t> byte_of;
  for (int b = 0; b < 256; ++b) byte_of[code_point[b]] = static_cast<uint8_t>(b);

  // encoder.json: {"token": id, ...} with ids 0..N-1, each once.
  nlohmann::json encoder;
  try {
    encoder = nlohmann::json::parse(read_file(encoder_json_path, "encoder.json"));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON ({})", encoder_json_path, e.what());
  }
  if (!encoder.is_object() || encoder.empty()) {
    fail("{}: expected a JSON object mapping GPT-2 tokens to ids", encoder_json_path);
  }
  const auto vocab = static_cast<int64_t>(encoder.size());
  impl->token_bytes.resize(static_cast<size_t>(vocab));
  std::vector<bool> id_seen(static_cast<size_t>(vocab), false);
  std::unordered_map<std::string, int32_t> id_of;  // token as written in the files -> id
  id_of.reserve(static_cast<size_t>(vocab));
  for (const auto& [token, value] : encoder.items()) {
    const std::string quoted = nlohmann::json(token).dump();
    if (!value.is_number_integer()) {
      fail("{}: the id of token {} is {}, not an integer", encoder_json_path, quoted, value.dump());
    }
    const auto id = value.get<int64_t>();
    if (id < 0 || id >= vocab) {
      fail("{}: token {} has id {}, outside [0, {}) for {} tokens", encoder_json_path, quoted, id,
           vocab, vocab);
    }
    if (id_seen[id])
      fail("{}: id {} is used by two tokens (one is {})", encoder_json_path, id, quoted);
    id_seen[id] = true;
    if (!token_to_bytes(token, byte_of, &impl->token_bytes[id])) {
      fail("{}: token {} has a character outside GPT-2's 256-character byte alphabet",
           encoder_json_path, quoted);
    }
    id_of.emplace(token, static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    std::string single;  // UTF-8 of code_point[b] (< U+0800: one or two bytes)
    const char32_t cp = code_point[b];
    if (cp < 0x80) {
      single.push_back(static_cast<char>(cp));
    } else {
      single.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      single.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    auto it = id_of.find(single);
    if (it == id_of.end()) fail("{}: no token for byte 0x{:02X}", encoder_json_path, b);
    impl->byte_token[b] = it->second;
  }
  auto eot = id_of.find("<|endoftext|>");
  if (eot == id_of.end()) fail("{}: no \"<|endoftext|>\" token", encoder_json_path);
  impl->eot = eot->second;

  // vocab.bpe: "#version: 0.2" then one merge "left right" per line, best rank first.
  const std::string merges_text = read_file(vocab_bpe_path, "vocab.bpe");
  constexpr int32_t kNotProduced = INT32_MAX;
  std::vector<int32_t> produced_by(static_cast<size_t>(vocab), kNotProduced);  // merge rank
  for (int b = 0; b < 256; ++b) produced_by[impl->byte_token[b]] = -1;
  std::istringstream lines(merges_text);
  std::string line;
  int64_t line_number = 0;
  while (std::getline(lines, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line_number == 1 && line.rfind("#version", 0) == 0) continue;
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string::npos) {
      fail("{}:{}: expected two tokens separated by one space, found \"{}\"", vocab_bpe_path,
           line_number, line);
    }
    const std::string left = line.substr(0, space), right = line.substr(space + 1);
    const auto id = [&](const std::string& token) {
      auto it = id_of.find(token);
      if (it == id_of.end()) {
        fail("{}:{}: token \"{}\" is not in {}", vocab_bpe_path, line_number, token,
             encoder_json_path);
      }
      return it->second;
    };
    const int32_t left_id = id(left), right_id = id(right), merged_id = id(left + right);
    const int32_t rank = impl->merges.size();
    if (impl->merges.contains(left_id, right_id)) {
      fail("{}:{}: merge \"{}\" appears twice", vocab_bpe_path, line_number, line);
    }
    for (const auto& [token, token_id] : {std::pair{left, left_id}, std::pair{right, right_id}}) {
      if (produced_by[token_id] >= rank) {
        fail(
            "{}:{}: merge \"{}\" uses \"{}\", which is neither a single byte nor the result "
            "of an earlier merge",
            vocab_bpe_path, line_number, line, token);
      }
    }
    if (produced_by[merged_id] != kNotProduced) {
      fail("{}:{}: merge \"{}\" produces \"{}\", which an earlier line already produces",
           vocab_bpe_path, line_number, line, left + right);
    }
    produced_by[merged_id] = rank;
    impl->merges.add(left_id, right_id, merged_id);
  }
  if (impl->merges.size() == 0) fail("{}: no merges", vocab_bpe_path);
  return Gpt2Tokenizer(std::move(impl));
}

void Gpt2Tokenizer::encode_append(std::string_view utf8_text, std::vector<int32_t>& out) const {
  std::string repaired;
  std::string_view text = utf8_text;
  if (utf8_valid_prefix(text) != text.size()) {
    repaired = utf8_replace_invalid(text);
    text = repaired;
  }
  const Impl& impl = *impl_;
  std::vector<int32_t> word_ids;
  impl.pretokenizer.split(text, [&](std::string_view word) {
    const bool cacheable = word.size() <= WordCache::kMaxWordBytes;
    if (cacheable && impl.cache.find(word, out)) return;
    word_ids.clear();
    for (unsigned char byte : word) word_ids.push_back(impl.byte_token[byte]);
    impl.merges.apply(word_ids);
    if (cacheable) impl.cache.insert(word, word_ids.data(), word_ids.size());
    out.insert(out.end(), word_ids.begin(), word_ids.end());
  });
}

std::vector<int32_t> Gpt2Tokenizer::encode(std::string_view utf8_text) const {
  std::vector<int32_t> ids;
  ids.reserve(utf8_text.size() / 3 + 1);
  encode_append(utf8_text, ids);
  return ids;
}

std::string Gpt2Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size()) {
      fail("GPT-2 decode: token id {} (position {}) is not in [0, {})", ids[i], i, vocab_size());
    }
    text += impl_->token_bytes[ids[i]];
  }
  return text;
}

int Gpt2Tokenizer::vocab_size() const { return static_cast<int>(impl_->token_bytes.size()); }
int32_t Gpt2Tokenizer::eot_token() const { return impl_->eot; }
const std::string& Gpt2Tokenizer::token_bytes(int32_t id) const {
  COLLAGE_CHECK(id >= 0 && id < vocab_size(), "GPT-2 token id {} is not in [0, {})", id,
                vocab_size());
  return impl_->token_bytes[id];
}

}  // namespace collage
