#!/bin/sh
# scaling.sh measures how polysketch uses the cores of this machine: the
# rows of issue 23 that a quiet machine can measure. Run it from the
# repository root, with no other work on the machine:
#
#	scripts/scaling.sh            # threads 1, 2, 4, … up to the cores; 3 rounds
#	THREADS="1 2" ROUNDS=5 scripts/scaling.sh
#	PRECISIONS="fp32 bf16" scripts/scaling.sh
#
# Every timed command runs under flock /tmp/bench.lock, so that it never
# overlaps another benchmark of this workplace. Rounds alternate the
# thread counts, so that a slow spell of the machine spreads over all of
# them; the summary gives, per thread count, the range over rounds of
# tokens per second, of the speed-up over one thread in the same round,
# and of the CPU time per step relative to one thread's (the work must
# not grow with threads: at most 1.1×).
#
# Sections (SECTIONS, default all): control (the bare FMA and TDPBF16PS
# loops on n threads at once against one alone, for each n: a server
# lowers its clock as more cores work, and n times what each core keeps
# is the ceiling of any speed-up on n threads; then independent scalar
# busy loops on 1 and on the most threads: their time should not grow
# with threads; if it does, the machine is not quiet and no ratio below
# means anything),
# train (bench train, default model,
# N = 1024, 8192 tokens a step), serial (the serial share of one step at
# GOMAXPROCS=1, split for the most threads, and each phase's speed-up on
# them), decode (BenchmarkBatchStep
# of ./model, S = 1 and 16 sequences), gpt2 (bench train at the
# GPT-2-small shape: 12 layers, d 768, 12 heads of 64, 4096 tokens a step,
# which need about 9 GiB; 8192 would need 17; GPT2_TOKENS=2048 halves
# the time), on one thread and the most; serve (bench serve, 1 and 16
# clients, on the most threads: 16 clients should get 10× one client's
# tokens/s);
# kernels (one thread: the bare FMA, VDPBF16PS and TDPBF16PS loops, the
# tile kernel alone, and Sgemm against each bf16 kernel at a square and
# three of the default model's shapes; not in the default SECTIONS).
#
# On a machine without Go (a lent server), build the binaries here and
# name them: POLYSKETCH (go build -buildvcs=true ./cmd/polysketch: its
# version names the commit it was built from), MODEL_TEST (go test
# -c ./model, for decode) and BLAS_TEST (go test -c ./blas, for control
# and kernels); control's busy loops, which it builds with Go, are then
# skipped.
set -eu

cores=$(getconf _NPROCESSORS_ONLN)
if [ -z "${THREADS:-}" ]; then
	THREADS=1
	t=2
	while [ "$t" -le "$cores" ]; do
		THREADS="$THREADS $t"
		t=$((t * 2))
	done
	case " $THREADS " in *" $cores "*) ;; *) THREADS="$THREADS $cores" ;; esac
fi
ROUNDS=${ROUNDS:-3}
PRECISIONS=${PRECISIONS:-fp32}
SECTIONS=${SECTIONS:-control train serial decode gpt2 serve}
GPT2_TOKENS=${GPT2_TOKENS:-4096}
max=$(echo "$THREADS" | tr ' ' '\n' | sort -n | tail -1)
lock=/tmp/bench.lock

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bin=${POLYSKETCH:-}
if [ -z "$bin" ]; then
	go build -buildvcs=true -o "$tmp/polysketch" ./cmd/polysketch
	bin=$tmp/polysketch
fi

# testbin VAR PKG: the test binary of PKG, VAR's if set, else built here.
testbin() {
	eval "t=\${$1:-}"
	if [ -z "$t" ]; then
		t=$tmp/$(basename "$2").test
		go test -c -o "$t" "$2"
	fi
	echo "$t"
}

echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $cores cores; $(grep -o -m1 -w amx_bf16 /proc/cpuinfo || echo 'no amx_bf16'); $(grep -o -m1 -w avx512_bf16 /proc/cpuinfo || echo 'no avx512_bf16')"
echo "# commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'); $("$bin" version 2>/dev/null | head -n 1); threads $THREADS; $ROUNDS rounds; load $(cut -d' ' -f1-3 /proc/loadavg)"

# train NAME ARGS…: bench train rounds over THREADS and, within each
# round, over PRECISIONS (--precision P is added to ARGS), so that the
# precisions compare in the same minute of the machine; then a summary per
# precision, and with fp32 and bf16 both, bf16 against fp32 per round.
train() {
	name=$1
	shift
	for p in $PRECISIONS; do
		: >"$tmp/$name-$p"
	done
	for r in $(seq "$ROUNDS"); do
		for p in $PRECISIONS; do
			for t in $THREADS; do
				GOMAXPROCS=$t flock "$lock" "$bin" bench train "$@" --precision "$p" |
					awk -v r="$r" -v t="$t" '$2 ~ /^[0-9]+$/ && NF >= 8 { print r, t, $5, $7, $8 }' >>"$tmp/$name-$p"
			done
		done
	done
	for p in $PRECISIONS; do
		summary "$name-$p" "$@" --precision "$p"
	done
	case " $PRECISIONS " in *" fp32 "*) ;; *) return ;; esac
	case " $PRECISIONS " in *" bf16 "*) ;; *) return ;; esac
	echo
	echo "## $name: bf16 against fp32, tokens/s in the same round"
	awk -v threads="$THREADS" '
		FNR == NR { a[$1, $2] = $3; next }
		{ b[$1, $2] = $3; rs[$1] = 1 }
		END {
			n = split(threads, order, " ")
			for (i = 1; i <= n; i++) {
				t = order[i]
				first = 1
				for (r in rs) {
					x = a[r, t] > 0 ? b[r, t] / a[r, t] : 0
					if (first || x < lo) lo = x
					if (first || x > hi) hi = x
					first = 0
				}
				printf "%-8s %5.2f–%.2f\n", t " thr", lo, hi
			}
		}' "$tmp/$name-fp32" "$tmp/$name-bf16"
}

# summary NAME ARGS…: the table of one precision's rounds in $tmp/NAME.
summary() {
	table=$1 # not name: sh has no locals, and train's name is still in use
	shift
	out=$tmp/$table
	echo
	echo "## $table: bench train $*"
	echo "threads  tokens/s        speed-up vs 1   CPU s/step   CPU vs 1      spin s/step"
	awk -v threads="$THREADS" '
		{ tps[$1, $2] = $3; cpu[$1, $2] = $4; spin[$1, $2] = $5; rs[$1] = 1 }
		END {
			n = split(threads, order, " ")
			for (i = 1; i <= n; i++) {
				t = order[i]
				first = 1
				for (r in rs) {
					s = tps[r, 1] > 0 ? tps[r, t] / tps[r, 1] : 0
					c = cpu[r, 1] > 0 ? cpu[r, t] / cpu[r, 1] : 0
					if (first || tps[r, t] < tlo) tlo = tps[r, t]
					if (first || tps[r, t] > thi) thi = tps[r, t]
					if (first || s < slo) slo = s
					if (first || s > shi) shi = s
					if (first || cpu[r, t] < clo) clo = cpu[r, t]
					if (first || cpu[r, t] > chi) chi = cpu[r, t]
					if (first || c < rlo) rlo = c
					if (first || c > rhi) rhi = c
					if (first || spin[r, t] < plo) plo = spin[r, t]
					if (first || spin[r, t] > phi) phi = spin[r, t]
					first = 0
				}
				printf "%-8s %6.0f–%-8.0f %5.2f–%-8.2f %6.3f–%-6.3f %5.2f–%-7.2f %6.3f–%.3f\n", t, tlo, thi, slo, shi, clo, chi, rlo, rhi, plo, phi
			}
		}' "$out"
}

for section in $SECTIONS; do
	case $section in
	control)
		bt=$(testbin BLAS_TEST ./blas)
		echo
		echo "## control: the bare vector loops on n threads at once against one alone: go test -run '^\$' -bench PeakCores -cpu n ./blas"
		echo "## (core-%: what each core keeps of its rate alone; n × core-% is the most any compute-bound code can speed up on n threads here)"
		for t in $THREADS; do
			GOMAXPROCS=$t flock "$lock" "$bt" -test.run '^$' -test.bench PeakCores -test.cpu "$t" -test.benchtime 1x |
				awk -v t="$t" '/^Benchmark/ { sub(/-[0-9]+$/, "", $1); sub(/^BenchmarkPeakCores\//, "", $1); printf "threads %-3s %-12s %9s GFLOPS  core-%% %6s  ceiling %.1f×\n", t, $1, $5, $7, t * $7 / 100 }'
		done
		if ! command -v go >/dev/null; then
			echo
			echo "## control: busy loops skipped (no go here to build them)"
			continue
		fi
		mkdir -p "$tmp/burn"
		cat >"$tmp/burn/main.go" <<-'EOF'
			package main

			import (
				"fmt"
				"os"
				"strconv"
				"sync"
				"time"
			)

			func main() {
				n, _ := strconv.Atoi(os.Args[1])
				start := time.Now()
				var wg sync.WaitGroup
				for range n {
					wg.Go(func() {
						s := 1.0
						for k := range 300_000_000 {
							s = s*1.0000001 + float64(k&7)
						}
						if s == 0 {
							fmt.Println(s)
						}
					})
				}
				wg.Wait()
				fmt.Printf("%.3f\n", time.Since(start).Seconds())
			}
		EOF
		(cd "$tmp/burn" && GO111MODULE=off go build -o burn main.go)
		echo
		echo "## control: seconds of n independent busy loops on n threads (a quiet machine: the same for every n)"
		for r in $(seq "$ROUNDS"); do
			printf 'round %s' "$r"
			for t in 1 $max; do
				printf '  %s threads %s s' "$t" "$(GOMAXPROCS=$t flock "$lock" "$tmp/burn/burn" "$t")"
			done
			echo
		done
		;;
	train)
		train train --attention polysketch:learned:block=64 --n 1024 --tokens 8192 --steps 3
		;;
	serial)
		for p in $PRECISIONS; do
			echo
			echo "## serial share and phases, $p: GOMAXPROCS=$max bench train --attention polysketch:learned:block=64 --n 1024 --tokens 8192 --steps 1 --phases $max --precision $p"
			GOMAXPROCS=$max flock "$lock" "$bin" bench train --attention polysketch:learned:block=64 --n 1024 --tokens 8192 --steps 1 --phases "$max" --precision "$p" | sed -n '3,24p'
		done
		;;
	decode)
		mt=$(testbin MODEL_TEST ./model)
		echo
		echo "## decode: go test -run '^\$' -bench 'BatchStep(BF16)?/S=(1|16)\$' -benchtime 2s ./model, tokens/s"
		for r in $(seq "$ROUNDS"); do
			for t in $THREADS; do
				printf 'round %s threads %-3s' "$r" "$t"
				GOMAXPROCS=$t flock "$lock" "$mt" -test.run '^$' -test.bench 'BatchStep(BF16)?/S=(1|16)$' -test.benchtime 2s |
					awk '/^Benchmark/ { sub(/-[0-9]+$/, "", $1); sub(/^BenchmarkBatchStep/, "", $1); printf "  %s %s", $1, $5 } END { print "" }'
			done
		done
		;;
	gpt2)
		all=$THREADS
		THREADS="1 $max"
		train gpt2-small --shape gpt2-small --attention polysketch:learned:block=64 --n 1024 --tokens "$GPT2_TOKENS" --mem-limit 16GiB --steps 2
		THREADS=$all
		;;
	serve)
		for r in $(seq "$ROUNDS"); do
			for p in $PRECISIONS; do
				echo
				echo "## serve, round $r, $p: GOMAXPROCS=$max bench serve --clients 1,16 --duration 3s --precision $p"
				GOMAXPROCS=$max flock "$lock" "$bin" bench serve --clients 1,16 --duration 3s --precision "$p" | sed -n '3,$p'
			done
		done
		;;
	kernels)
		bt=$(testbin BLAS_TEST ./blas)
		echo
		echo "## kernels, one thread: go test -run '^\$' -bench '^BenchmarkPeak(AMX)?$' ./blas; then -bench 'TilesAMX/chunks=8/strips=16/|GemmBF16Kernels/^(square|qkv|glu-in|dw-glu-in)$/' -benchtime 4x"
		GOMAXPROCS=1 flock "$lock" "$bt" -test.run '^$' -test.bench '^BenchmarkPeak(AMX)?$' -test.benchtime 0.5s | grep -E '^Benchmark'
		GOMAXPROCS=1 flock "$lock" "$bt" -test.run '^$' -test.bench 'TilesAMX/chunks=8/strips=16/|GemmBF16Kernels/^(square|qkv|glu-in|dw-glu-in)$/' -test.benchtime 4x |
			grep -E '^Benchmark'
		;;
	*)
		echo "scaling.sh: unknown section $section (control, train, serial, decode, gpt2, serve, kernels)" >&2
		exit 2
		;;
	esac
done
