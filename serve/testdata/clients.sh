#!/usr/bin/env bash
# Real clients against a live `polysketch serve` (run by .ci/run): the
# official openai package from npm (completions, chat, and prompt
# logprobs equal to eval --choices's), a multi-turn chat that must resume
# from the prefix cache with the answers of a server without one, and the
# web page in headless Chromium through puppeteer-core; then SIGTERM must
# stop the server with status 0.
# Each part skips with a message when what it needs cannot be had (no
# node/npm, no registry, no Chromium), and every step is time-bounded.
set -uo pipefail
cd "$(dirname "$0")/../.."
here=serve/testdata

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "node or npm is not available: the real-client tests of polysketch serve were skipped"
  exit 0
fi
tmp=$(mktemp -d)
pid=
coldpid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
  if [ -n "$coldpid" ] && kill -0 "$coldpid" 2>/dev/null; then kill -KILL "$coldpid"; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

if ! (cd "$tmp" && echo '{"private":true}' >package.json &&
      timeout 300 npm install --no-audit --no-fund --loglevel=error openai >/dev/null 2>&1); then
  echo "could not install the npm package openai (registry unreachable?): the real-client tests of polysketch serve were skipped"
  exit 0
fi
chromium=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (timeout 600 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq chromium >/dev/null) ||
    echo "could not install chromium"
  chromium=$(command -v chromium || true)
fi
browser=no
if [ -n "$chromium" ]; then
  if (cd "$tmp" && timeout 300 npm install --no-audit --no-fund --loglevel=error puppeteer-core >/dev/null 2>&1); then
    browser=yes
  else
    echo "could not install the npm package puppeteer-core: the browser test will be skipped"
  fi
else
  echo "Chromium is not available: the browser test will be skipped"
fi

go build -o "$tmp/polysketch" ./cmd/polysketch || exit 1
echo "training a one-step checkpoint to serve"
if ! timeout 600 "$tmp/polysketch" train --steps 1 --eval-batches 1 --out "$tmp/run" >"$tmp/train.log" 2>&1; then
  cat "$tmp/train.log"; exit 1
fi
"$tmp/polysketch" serve --checkpoint "$tmp/run" --addr 127.0.0.1:0 --name ci-model >"$tmp/serve.out" 2>"$tmp/serve.err" &
pid=$!
addr=
for _ in $(seq 600); do
  if grep -q 'ready:' "$tmp/serve.out" 2>/dev/null; then
    addr=$(sed -n 's|.*listening on http://\([^ ]*\).*|\1|p' "$tmp/serve.out" | head -1)
    break
  fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$addr" ]; then
  echo "polysketch serve did not become ready:"; cat "$tmp/serve.out" "$tmp/serve.err"; exit 1
fi

status=0
cp "$here/openai_client.mjs" "$here/browser.mjs" "$here/multiturn.mjs" "$here/echo.mjs" "$tmp/"
(cd "$tmp" && timeout 120 node openai_client.mjs "http://$addr/v1") || status=1

# Prompt logprobs (echo) against eval --choices on the same checkpoint.
if timeout 300 "$tmp/polysketch" eval --checkpoint "$tmp/run" --shots 1 --log-samples "$tmp/samples.jsonl" \
    --choices multichoice/testdata/piqa.jsonl,multichoice/testdata/hellaswag.parquet,multichoice/testdata/generic.jsonl >"$tmp/eval.out" 2>&1; then
  (cd "$tmp" && timeout 120 node echo.mjs "http://$addr/v1" samples.jsonl) || status=1
else
  echo "polysketch eval --choices failed:"; cat "$tmp/eval.out"; status=1
fi

# The same checkpoint served without the prefix cache, for the multi-turn
# chat to compare with.
"$tmp/polysketch" serve --checkpoint "$tmp/run" --addr 127.0.0.1:0 --name ci-model --cache-memory 0 >"$tmp/cold.out" 2>"$tmp/cold.err" &
coldpid=$!
coldaddr=
for _ in $(seq 600); do
  if grep -q 'ready:' "$tmp/cold.out" 2>/dev/null; then
    coldaddr=$(sed -n 's|.*listening on http://\([^ ]*\).*|\1|p' "$tmp/cold.out" | head -1)
    break
  fi
  kill -0 "$coldpid" 2>/dev/null || break
  sleep 0.1
done
if [ -n "$coldaddr" ]; then
  (cd "$tmp" && timeout 120 node multiturn.mjs "http://$addr" "http://$coldaddr") || status=1
else
  echo "polysketch serve --cache-memory 0 did not become ready:"; cat "$tmp/cold.out" "$tmp/cold.err"; status=1
fi
kill -TERM "$coldpid" 2>/dev/null
wait "$coldpid"
coldpid=
if [ "$browser" = yes ]; then
  (cd "$tmp" && timeout 120 node browser.mjs "http://$addr" "$chromium") || status=1
fi

kill -TERM "$pid"
if ! timeout 60 tail --pid="$pid" -f /dev/null; then
  echo "polysketch serve did not stop within 60 s of SIGTERM"; status=1
fi
wait "$pid"; code=$?
pid=
if [ "$code" != 0 ]; then
  echo "polysketch serve exited with status $code after SIGTERM, want 0:"; cat "$tmp/serve.err"; status=1
fi
grep -q 'stopped' "$tmp/serve.out" || { echo "polysketch serve did not report a clean stop"; status=1; }
[ "$status" = 0 ] && echo "polysketch serve: real clients ok, graceful shutdown ok"
exit "$status"
