#!/usr/bin/env bash
# Per-token cost of the `memosrt run` process: the CLI as a user
# runs it, against llama.cpp's raw decode loop built from the same sources
# (BenchmarkDecodeBatch, 1 sequence, no sampling), each a fresh process,
# alternated A B A B on a quiet machine, default threads on both sides.
#
#   make bench-decode   # runs this after the in-process benchmarks; PAIRS=9 STEPS=256
#
# A  ./bin/memosrt run --json --num-predict STEPS (plain inference, greedy):
#    (eval_tokens - 1) / eval_ms, the decode steps after the first token
#    (which comes with the prompt), as the raw loop counts them
# B  llama.test -bench 'DecodeBatch/stories260K/threads=NCPU' with
#    MEMOSRT_BENCH_REPS=1: a warm-up run, then one timed run of 256 steps
#
# Each command's output goes to a file and is read after it exits: nothing
# else runs beside the measured process. (A parser started on a pipe, such
# as `| python3 -c ...`, starts up while the ~150 ms decode runs and takes
# one of the two vCPUs from it: measured that way memosrt run read 1,081-
# 1,349 tokens/s against 1,900-2,220 written to a file, which is where the
# earlier "0.7x" of the process came from.)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
PAIRS=${PAIRS:-9}
STEPS=256 # BenchmarkDecodeBatch's steps for stories260K
OUT=${OUT:-.cache/runproc}
MODEL=${MEMOSRT_MODELS:-../shared/models}/stories260K.gguf # as internal/testmodels finds it
[ -f "$MODEL" ] || { echo "runproc: no $MODEL" >&2; exit 1; }
[ -x bin/memosrt ] || { echo "runproc: no bin/memosrt (make build)" >&2; exit 1; }
mkdir -p "$OUT"
"$GO" test -c -o "$OUT/llama.test" ./runtime/llama/
ncpu=$(nproc)

ratios=()
as=()
bs=()
for i in $(seq "$PAIRS"); do
	./bin/memosrt run --model "$MODEL" --num-predict "$STEPS" --json "Once upon a time" >"$OUT/a.json" 2>"$OUT/a.err"
	(cd runtime/llama && MEMOSRT_BENCH_REPS=1 "../../$OUT/llama.test" -test.run '^$' \
		-test.bench "DecodeBatch/stories260K/threads=$ncpu\$" -test.benchtime 1x >"../../$OUT/b.txt" 2>&1)
	a=$(sed -n 's/.*"eval_tokens":\([0-9]*\).*"eval_ms":\([0-9.]*\).*/\1 \2/p' "$OUT/a.json" |
		awk '{ if ($1 < 2 || $2 <= 0) exit 1; printf "%.0f", ($1 - 1) / ($2 / 1000) }')
	b=$(awk '/tok\/s_1seq/ { for (i = 1; i < NF; i++) if ($(i+1) == "tok/s_1seq") printf "%.0f", $i }' "$OUT/b.txt")
	if [ -z "$a" ] || [ -z "$b" ]; then
		echo "runproc: pair $i: no figure (see $OUT/a.json, $OUT/a.err, $OUT/b.txt)" >&2
		exit 1
	fi
	r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }')
	echo "pair $i: memosrt run $a tok/s, raw loop $b tok/s, ratio $r"
	as+=("$a")
	bs+=("$b")
	ratios+=("$r")
done
med() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
rng() { printf '%s\n' "$@" | sort -g | sed -n '1p;$p' | paste -sd- -; }
echo "memosrt run process / raw loop process, stories260K, $STEPS tokens, $ncpu threads, $PAIRS pairs:"
echo "  memosrt run $(med "${as[@]}") tok/s ($(rng "${as[@]}")), raw loop $(med "${bs[@]}") tok/s ($(rng "${bs[@]}"))"
echo "  ratio median $(med "${ratios[@]}") ($(rng "${ratios[@]}"))"
