#!/usr/bin/env bash
# Context switches per decoded token: memosrt run (one or more binaries)
# against the peer's llama-bench, alternating round by round. Every switch
# on a 2-vCPU machine takes a vCPU from one of ggml's spinning threads,
# and the other waits for it at the next barrier.
#
#   bench/peer/switches.sh                        # bin/memosrt, stories260K, N=1500, 3 rounds, 2 threads
#   N=1500 R=5 T=2 BINS="bin/memosrt /tmp/old" bench/peer/switches.sh
#
# Per round and binary: perf's context-switches of a run decoding N+1
# tokens minus one decoding 1 token, over N (memosrt run --threads T
# --no-cache --json; llama-bench -t T -p 0 -n N+1 -r 1 minus -n 1), and
# the tokens/s the N+1 run reported. Needs perf and the peer
# (bench/peer/peer.sh build).
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${N:-1500}
R=${R:-3}
T=${T:-2}
BINS=${BINS:-bin/memosrt}
NAME=switches
. bench/peer/lib.sh

cs() { # command...: context switches; its stdout in $TMP/out
	perf stat -x, -e context-switches -o "$TMP/cs" "$@" >"$TMP/out" 2>/dev/null
	awk -F, '/context-switches/ { printf "%d", $1 }' "$TMP/cs"
}
per() { awk -v a="$1" -v b="$2" -v n="$N" 'BEGIN { printf "%.3f", (b - a) / n }'; }

for r in $(seq "$R"); do
	line="round $r load $(cut -d' ' -f1 /proc/loadavg)"
	for bin in $BINS; do
		a=$(cs "$bin" run --model "$MODEL" --threads "$T" --num-predict 1 --no-cache --json "$PROMPT")
		b=$(cs "$bin" run --model "$MODEL" --threads "$T" --num-predict $((N + 1)) --no-cache --json "$PROMPT")
		line+="; $bin $(per "$a" "$b") switches/token, $(mtps "$TMP/out") tok/s"
	done
	a=$(cs "$BENCH" -m "$MODEL" -t "$T" -p 0 -n 1 -r 1 -o json)
	b=$(cs "$BENCH" -m "$MODEL" -t "$T" -p 0 -n $((N + 1)) -r 1 -o json)
	echo "$line; llama-bench $(per "$a" "$b") switches/token, $(ptps "$TMP/out") tok/s"
done
