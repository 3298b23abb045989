#!/usr/bin/env bash
# polysketch's tokenizers against Hugging Face's JavaScript implementation
# (run by .ci/run): trains a tokenizer with `polysketch tokenizer train`,
# then hf.mjs checks that @huggingface/tokenizers, from npm, encodes a few
# hundred strings to the same ids as `polysketch tokenizer encode`, with
# that tokenizer.json and with Llama-3- and Qwen2-style files made from it.
# Skips with a message when node or the npm registry cannot be had.
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
go build -o "$tmp/polysketch" ./cmd/polysketch || exit 1
# A vocabulary of 2000 fitted to the repository's Go source.
if ! "$tmp/polysketch" tokenizer train --corpus . --vocab-size 2000 --out "$tmp/trained" >"$tmp/train.log" 2>&1; then
  cat "$tmp/train.log"; exit 1
fi
# Node resolves an import from the script's directory upward (not from
# NODE_PATH, for modules): the script runs beside node_modules.
cp data/tokenizer/testdata/hf.mjs "$tmp/hf.mjs"
timeout 600 node "$tmp/hf.mjs" "$tmp/polysketch" "$tmp/trained" "$tmp/work"
