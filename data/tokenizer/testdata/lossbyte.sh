#!/usr/bin/env bash
# Loss per byte at equal training time: for each tokenizer, a short
# calibration run measures tokens/s, then a run of as many steps as fit in
# BUDGET seconds, then eval on a fixed validation sample. The README's
# table "loss per byte at equal training time" comes from it.
#
# W holds: ps, the polysketch binary (go build -o $W/ps ./cmd/polysketch);
# tok4k and tok16k, tokenizers fitted to the training split of the Go
# source tree (polysketch tokenizer train --corpus DIR --vocab-size 4096,
# DIR a directory of links to the files data.GoSource().Split(0.05)
# returns as training files); val-sample.txt, the first whole validation
# files of that split up to 316,586 bytes (the byte count below).
set -uo pipefail
W=${W:-/tmp/tokwork}
PS=$W/ps
BUDGET=${BUDGET:-150}
cd $W
for tok in ${TOKS:-byte gpt2 $W/tok4k $W/tok16k}; do
  n=$(basename $tok)
  flock /tmp/bench.lock $PS train --tokenizer $tok --steps 10 --warmup 1 --eval-every 0 --eval-batches 1 --save-every 0 \
    --cache-dir $W/cache --out $W/cal-$n --force --log-every 100 >$W/cal-$n.log 2>&1
  rate=$(python3 -c "
import json
ms=[json.loads(l) for l in open('$W/cal-$n/metrics.jsonl')]
r=sorted(m['tokens_per_sec'] for m in ms[3:])
print(r[len(r)//2])")
  steps=$(python3 -c "print(max(10, int($BUDGET*$rate/2048)))")
  echo "$n: calibrated $rate tokens/s -> $steps steps"
  flock /tmp/bench.lock $PS train --tokenizer $tok --steps $steps --eval-every 0 --eval-batches 1 --save-every 0 \
    --cache-dir $W/cache --out $W/run-$n --force --log-every 1000 >$W/run-$n.log 2>&1
  tail -2 $W/run-$n.log | head -1
  # Eval measures loss, not time: outside the lock, at low priority.
  nice -n 19 $PS eval --checkpoint $W/run-$n --corpus $W/val-sample.txt --split all --batches 0 --json --cache-dir $W/cache >$W/eval-$n.json 2>$W/eval-$n.log
  python3 -c "
import json
e=json.load(open('$W/eval-$n.json')); B=316586
print('$n: eval loss %.4f nats/token over %d tokens; %.4f tokens/byte; %.4f nats/byte, %.4f bits/byte' % (e['loss'], e['tokens'], e['tokens']/B, e['loss']*e['tokens']/B, e['loss']*e['tokens']/B/0.6931471805599453))"
done
