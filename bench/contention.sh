#!/usr/bin/env bash
# Decode under CPU contention: memosrt's engine against
# llama.cpp's own decode loop built from the same sources, once with ggml's
# threadpool (memosrt's build) and once with OpenMP (llama-bench's default),
# side by side under the same busy processes, default threads everywhere.
#
#   make bench-contention   # BUSY=3 REPS=5 MODELS="stories260K 1b" (1b if models/1b.gguf is made)
#
# Per repetition, one after the other under the same BUSY `yes` loops:
#   tp   runtime.test  BenchmarkDecodeOverhead: the raw llama_decode loop and
#        Engine.Generate (greedy, text streamed) in one process, threadpool
#        build, interleaved run by run (RUNS pairs: medians and their ratio)
#   omp  llama-omp.test BenchmarkDecodeBatch, 1 sequence: the raw loop, OpenMP build
# and prints tokens/s of each and the repetition's ratios (memosrt over the
# threadpool loop of the same process, memosrt over the OpenMP loop run
# next to it), then the medians of the ratios over the repetitions.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
BUSY=${BUSY:-3}
REPS=${REPS:-5}
RUNS=${RUNS:-9}
MODELS=${MODELS:-stories260K 1b}
OUT=${OUT:-.cache/contention}
mkdir -p "$OUT"

echo "building: threadpool (CGO_CFLAGS=${CGO_CFLAGS:-}) and OpenMP test binaries" >&2
"$GO" test -c -o "$OUT/runtime.test" ./runtime/
CGO_CFLAGS="${CGO_CFLAGS:-} -fopenmp -DGGML_USE_OPENMP" CGO_CXXFLAGS="${CGO_CXXFLAGS:-} -fopenmp -DGGML_USE_OPENMP" \
	CGO_LDFLAGS="${CGO_LDFLAGS:-} -fopenmp" "$GO" test -c -o "$OUT/llama-omp.test" ./runtime/llama/

busy=()
stop_busy() { for p in "${busy[@]}"; do kill "$p" 2>/dev/null || true; done; busy=(); }
trap stop_busy EXIT
for _ in $(seq "$BUSY"); do
	yes >/dev/null &
	busy+=($!)
done
echo "$BUSY busy processes (yes) on $(nproc) CPUs" >&2

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
metric() { grep -o "[0-9.]* $1" | head -1 | awk '{print $1}'; }

models=()
for m in $MODELS; do
	case $m in
	stories260K) models+=("stories260K|$(pwd)/../shared/models/stories260K.gguf|256|$RUNS|9") ;;
	1b) [ -f models/1b.gguf ] && models+=("1b|$(pwd)/models/1b.gguf|16|1|1") ;;
	esac
done
for m in "${models[@]}"; do
	IFS='|' read -r name path steps runs reps <<<"$m"
	: >"$OUT/$name.tp"; : >"$OUT/$name.omp"
	for r in $(seq "$REPS"); do
		tp=$(cd runtime && MEMOSRT_BENCH_QUICK=1 MEMOSRT_BENCH_MODEL="$path" MEMOSRT_BENCH_STEPS="$steps" \
			"../$OUT/runtime.test" -test.run '^$' -test.bench DecodeOverhead -test.benchtime "${runs}x" 2>&1)
		omp=$(cd runtime/llama && MEMOSRT_BENCH_REPS="$reps" \
			"../../$OUT/llama-omp.test" -test.run '^$' -test.bench "DecodeBatch/$name/threads=$(nproc)\$" -test.benchtime 1x 2>&1)
		raw=$(metric raw_tok/s <<<"$tp")
		mem=$(metric greedy_stream_tok/s <<<"$tp")
		o=$(metric tok/s_1seq <<<"$omp")
		if [ -z "$raw" ] || [ -z "$mem" ] || [ -z "$o" ]; then
			echo "$tp" >&2
			echo "$omp" >&2
			exit 1
		fi
		awk "BEGIN{print $mem/$raw}" >>"$OUT/$name.tp"
		awk "BEGIN{print $mem/$o}" >>"$OUT/$name.omp"
		printf '%s rep %d: raw loop (threadpool) %s, memosrt %s, raw loop (OpenMP) %s tok/s; memosrt / threadpool loop %.3f, / OpenMP loop %.3f\n' \
			"$name" "$r" "$raw" "$mem" "$o" "$(tail -1 "$OUT/$name.tp")" "$(tail -1 "$OUT/$name.omp")"
	done
	printf '%s, %d repetitions: median memosrt / threadpool loop %.3f, memosrt / OpenMP loop %.3f\n' \
		"$name" "$REPS" "$(median <"$OUT/$name.tp")" "$(median <"$OUT/$name.omp")"
done
