#!/usr/bin/env bash
# The chat templates of serve's tests rendered by @huggingface/jinja (run
# by .ci/run): chat.mjs renders every conversation of cases.json with the
# real templates of SmolLM2, Qwen2.5 and Llama 3.2 beside it, and the
# result must be the committed expected.json, which TestChatTemplates
# checks polysketch's rendering against. Skips with a message when node or
# the npm registry cannot be had.
set -uo pipefail
cd "$(dirname "$0")"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "node or npm is not available: the chat templates were not rendered with @huggingface/jinja"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! (cd "$tmp" && echo '{"private":true}' >package.json &&
      timeout 300 npm install --no-audit --no-fund --loglevel=error @huggingface/jinja >/dev/null 2>&1); then
  echo "could not install the npm package @huggingface/jinja (registry unreachable?): the chat templates were not rendered with it"
  exit 0
fi
cp chat.mjs "$tmp/chat.mjs"
node "$tmp/chat.mjs" "$PWD" >"$tmp/expected.json" || exit 1
if ! diff -u expected.json "$tmp/expected.json"; then
  echo "serve/testdata/chat/expected.json differs from what @huggingface/jinja renders (above)"
  exit 1
fi
echo "serve/testdata/chat/expected.json: as @huggingface/jinja renders the templates"
