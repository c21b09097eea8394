#!/usr/bin/env bash
# Labelled commands in turn, round by round (A B C A B C), each printing one
# rate; then each one's median and, pair by pair with the last command (the
# peer), its ratio's median. For a setting of memosrt against the peer on
# the 1B shape: every variant meets the same moments of a noisy host.
#
#   R=6 bench/peer/turns.sh "on=mprefill --flash-attn on" \
#       "off=mprefill --flash-attn off" "peer=pbench -p 512 -n 0"
#   R=6 bench/peer/turns.sh "4k=MEMOSRT_HUGEPAGES=0 mprefill" \
#       "2M=mprefill" "peer=pbench -p 512 -n 0"
#
# Each LABEL=WORDS runs WORDS as a shell command (variable assignments
# before it apply to it) with these functions, 2 threads (T=), the 1B shape
# (MODEL_1B=, default models/1b.gguf; make models/1b.gguf):
#   mprefill ARGS  memosrt bench ttft --prefix 496 --query-tokens 16 --reps 1
#                  --warmup: 512 / cold TTFT (tok/s), as bench/peer/peer.sh's
#                  prefill-1b row
#   mdecode ARGS   memosrt run --num-predict 64 --no-cache: (eval_tokens - 1)
#                  / eval_ms (tok/s), as its decode-1b row
#   pbench ARGS    llama-bench -t T -r 1: avg_ts (tok/s)
# Needs the peer (bench/peer/peer.sh build).
set -euo pipefail
cd "$(dirname "$0")/../.."
R=${R:-6}
T=${T:-2}
MODEL_1B=${MODEL_1B:-models/1b.gguf}
NAME=turns
. bench/peer/lib.sh
[ $# -ge 2 ] || { echo "turns: want two or more LABEL=COMMAND arguments" >&2; exit 2; }
MEMOSRT=${MEMOSRT:-bin/memosrt}

mprefill() {
	"$MEMOSRT" bench ttft --model "$MODEL_1B" --threads "$T" --prefix 496 --query-tokens 16 --reps 1 --warmup --json "$@" >"$TMP/a.json" 2>"$TMP/a.err" || { cat "$TMP/a.err" >&2; return 1; }
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.2f" % (512 / (d[0]["cold_ttft_ms"] / 1000)))' "$TMP/a.json"
}
mdecode() {
	"$MEMOSRT" run --model "$MODEL_1B" --threads "$T" --num-predict 64 --no-cache --json "$@" "$PROMPT" >"$TMP/a.json" 2>"$TMP/a.err" || { cat "$TMP/a.err" >&2; return 1; }
	mtps "$TMP/a.json"
}
pbench() {
	"$BENCH" -m "$MODEL_1B" -t "$T" -r 1 -o json "$@" >"$TMP/b.json" 2>"$TMP/b.err" || { cat "$TMP/b.err" >&2; return 1; }
	ptps "$TMP/b.json"
}

labels=()
for a in "$@"; do labels+=("${a%%=*}"); done
echo "round load ${labels[*]}"
for i in $(seq "$R"); do
	line="$i $(cut -d' ' -f1 /proc/loadavg)"
	for a in "$@"; do
		v=$(eval "${a#*=}")
		line="$line $v"
	done
	echo "$line" | tee -a "$TMP/rounds"
done
python3 - "$TMP/rounds" "${labels[@]}" <<'PY'
import statistics as st, sys
rows = [[float(v) for v in l.split()[2:]] for l in open(sys.argv[1])]
labels = sys.argv[2:]
cols = list(zip(*rows))
peer = cols[-1]
for k, name in enumerate(labels):
    c = cols[k]
    line = '%s: median %.2f (%.2f-%.2f)' % (name, st.median(c), min(c), max(c))
    if k < len(labels) - 1:
        r = [a / b for a, b in zip(c, peer)]
        line += '; over %s %.3f (%.3f-%.3f)' % (labels[-1], st.median(r), min(r), max(r))
    print(line)
print('%d rounds' % len(rows))
PY
