#!/usr/bin/env bash
# CPU time per decoded token, one thread: memosrt run (one or more
# binaries) against the peer's llama-bench, alternating round by round.
# For a loaded machine, where wall time measures the scheduler: with one
# thread no ggml barrier spins, and perf's task-clock counts only the
# CPU the process got.
#
#   bench/peer/cputime.sh                       # bin/memosrt, stories260K, N=256, 5 rounds
#   N=1024 R=8 BINS="bin/memosrt /tmp/old" bench/peer/cputime.sh
#
# Per round and binary: task-clock of a run decoding N+1 tokens minus one
# decoding 1 token, over N (memosrt run --threads 1 --no-cache --json;
# llama-bench -t 1 -p 0 -n N+1 -r 1 minus -n 1: its warm-up decodes one
# token). Prints µs per token and the ratio peer / memosrt (= tokens/s
# memosrt / peer) per round. Needs perf and the peer (bench/peer/peer.sh build).
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${N:-256}
R=${R:-5}
BINS=${BINS:-bin/memosrt}
NAME=cputime
. bench/peer/lib.sh

tc() { # command...: CPU seconds (task-clock)
	perf stat -x, -e task-clock -o "$TMP/tc" "$@" >/dev/null 2>&1
	awk -F, '/task-clock/ { printf "%.6f", $1 / 1000 }' "$TMP/tc"
}
per() { awk -v a="$1" -v b="$2" -v n="$N" 'BEGIN { printf "%.1f", (b - a) / n * 1e6 }'; }

for r in $(seq "$R"); do
	line="round $r load $(cut -d' ' -f1 /proc/loadavg)"
	us=()
	for bin in $BINS; do
		a=$(tc "$bin" run --model "$MODEL" --threads 1 --num-predict 1 --no-cache --json "$PROMPT")
		b=$(tc "$bin" run --model "$MODEL" --threads 1 --num-predict $((N + 1)) --no-cache --json "$PROMPT")
		us+=("$(per "$a" "$b")")
	done
	a=$(tc "$BENCH" -m "$MODEL" -t 1 -p 0 -n 1 -r 1)
	b=$(tc "$BENCH" -m "$MODEL" -t 1 -p 0 -n $((N + 1)) -r 1)
	peer=$(per "$a" "$b")
	i=0
	for bin in $BINS; do
		line+="; $bin ${us[$i]} us/token, ratio $(awk -v p="$peer" -v m="${us[$i]}" 'BEGIN { printf "%.3f", p / m }')"
		i=$((i + 1))
	done
	echo "$line; llama-bench $peer us/token"
done
