#!/usr/bin/env bash
# memosrt against the llama.cpp a user would install: a release
# of llama.cpp built with CMake from nothing, then both run alternately,
# A B A B, on the same models, threads and token counts.
#
#   make bench-peer           # builds bin/memosrt, models/1b.gguf, the peer, then the table
#   PAIRS=5 make bench-peer   # more pairs (default 3)
#   ROWS="decode-1b decode-stories prefill-1b" (default); more rows:
#                              prefill-1b-first (each process's first prefill),
#                              warm-1024 warm-4096 (warm TTFT from a stored state vs
#                              llama-server's slot restore), read-1b mmap-1b (weights
#                              read / mapped on both sides), contended-stories
#                              contended-1b (decode beside BUSY=3 busy loops: memosrt
#                              without --threads, its engine picks them; no quiet gate),
#                              depth-4096 (16 tokens over 4,096 cached ones),
#                              and each llama-bench row (decode-*, prefill-*, read-1b,
#                              mmap-1b, contended-*, depth-*) with -omp appended, e.g.
#                              decode-stories-omp: the same pair against the peer's
#                              OpenMP build (below)
#   bench/peer/peer.sh build  # only build the peer (and decodeloop, below; the
#                              OpenMP peer too when ROWS names an -omp row)
#
# The peer: llama.cpp release b7347, whose git bundle ships inside the npm
# package node-llama-cpp@3.14.5 (package/llama/gitRelease.bundle). cmake comes
# from apt when it is missing. llama-bench and llama-server are built in
# Release with -DGGML_NATIVE=ON (-march=native), -DGGML_OPENMP=OFF (ggml's
# threadpool, as memosrt; docs/benchmarks.md, Build choices) and no CURL,
# under .cache/peer/ (git-ignored): a second run rebuilds nothing. Nothing of
# llama.cpp enters the repository. The -omp rows also build llama-bench
# alone with -DGGML_OPENMP=ON (llama.cpp's default where libgomp is found, as
# a user who builds or installs it gets), from the same source, under
# .cache/peer/build-omp (PEER_OMP_BUILD); it must link libgomp, else the
# script stops.
#
# Rows (tokens/s, higher is better; ratio = memosrt / peer, pair by pair):
#   decode-1b       generated 1B shape (F16), 64 tokens:
#                   A  memosrt run --threads T --num-predict 64 --no-cache --json
#                      rate (eval_tokens - 1) / eval_ms: the decode steps after
#                      the first token (which comes with the prompt)
#                   B  llama-bench -t T -p 0 -n 64 -r 1 (a warm-up run, then one
#                      timed run of 64 single-token decodes, no sampling)
#   read-1b         decode-1b with the peer reading its weights too (-mmp 0;
#                   memosrt reads them by default)
#   mmap-1b         decode-1b with both mapping their weights (memosrt run
#                   --mmap; llama-bench -mmp 1, its default)
#   decode-stories  stories260K, 256 tokens, the same pair of commands with
#                   --num-predict 256 / -n 256. memosrt run samples each token
#                   (greedy over the vocabulary, the CLI's default), detokenizes
#                   it and builds the response; llama-bench samples nothing
#   prefill-1b      1B shape, 512 tokens from an empty context:
#                   A  memosrt bench ttft --prefix 496 --query-tokens 16 --reps 1 --warmup
#                      rate 512 / cold_ttft_ms (one prefill of 496 + 16 tokens,
#                      first token sampled, after an untimed warm-up prefill)
#                   B  llama-bench -t T -p 512 -n 0 -r 1 (a warm-up run, then
#                      the timed one)
#   prefill-1b-first the same, each process's first prefill: memosrt without
#                   --warmup, llama-bench --no-warmup
#   depth-N         a 16-token prefill over N cached tokens (tokens/s):
#                   A  memosrt bench ttft --prefix N --query-tokens 16 --reps 1:
#                      rate 16 / floor_ms (the query decoded on a sequence that
#                      already holds the N-token prefix: no restore)
#                   B  llama-bench -t T -p 16 -n 0 -d N -fa 0 -mmp 0 -r 1 (the
#                      depth prefilled once, untimed; flash attention off and
#                      weights read, as memosrt's defaults for the 1B shape)
#   warm-N          warm TTFT (ms, lower is better; the ratio is peer / memosrt so
#                   that > 1 is memosrt faster), N-token prefix + 16-token query:
#                   A  memosrt bench ttft --prefix N --reps 1: warm_disk_ttft_ms,
#                      the prefix's KV state restored from Badger, then the query
#                   B  llama-server: the prefix's slot saved once
#                      (POST /slots/0?action=save), then per pair the slot
#                      erased, restored (POST /slots/0?action=restore) and the
#                      prefix + query completed with cache_prompt (1 token);
#                      ms = restore's wall time + the completion's
#                      prompt_ms (the query's prefill)
#
# Before each pair a quiet gate waits while the 1-minute load average is above
# LOAD_MAX (default 0.75 x CPUs), at most LOAD_WAIT seconds (then it warns and
# goes on). Each measured process writes its output to a file that is read
# after it exits: nothing else runs beside it (bench/runproc.sh says why).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)

PEER_VERSION=b7347
NPM_PKG=node-llama-cpp@3.14.5
CACHE=${PEER_CACHE:-$ROOT/.cache/peer}
SRC=$CACHE/llama.cpp
BUILD=$CACHE/build
OMP_BUILD=${PEER_OMP_BUILD:-$CACHE/build-omp}
CMAKE_FLAGS=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_OPENMP=OFF -DLLAMA_CURL=OFF
	-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON)
OMP_CMAKE_FLAGS=("${CMAKE_FLAGS[@]/-DGGML_OPENMP=OFF/-DGGML_OPENMP=ON}")
JOBS=${JOBS:-$(nproc)}

PAIRS=${PAIRS:-3}
THREADS=${THREADS:-$(nproc)}
ROWS=${ROWS:-decode-1b decode-stories prefill-1b}
LOAD_MAX=${LOAD_MAX:-$(awk -v n="$(nproc)" 'BEGIN { printf "%.2f", n * 0.75 }')}
LOAD_WAIT=${LOAD_WAIT:-180}
OUT=${OUT:-$ROOT/.cache/peer/out}
MEMOSRT=${MEMOSRT:-$ROOT/bin/memosrt}
MODEL_1B=${MODEL_1B:-$ROOT/models/1b.gguf}
MODEL_STORIES=${MODEL_STORIES:-${MEMOSRT_MODELS:-$ROOT/../shared/models}/stories260K.gguf}
PROMPT="Once upon a time"

say() { echo "peer: $*" >&2; }
die() { say "$*"; exit 1; }

# ---- the peer build -----------------------------------------------------------

need_cmake() {
	command -v cmake >/dev/null && return
	say "cmake missing: apt-get install -y cmake"
	local sudo=
	[ "$(id -u)" -eq 0 ] || sudo=sudo
	$sudo apt-get install -y cmake >&2 || { $sudo apt-get update >&2 && $sudo apt-get install -y cmake >&2; } ||
		die "could not install cmake"
}

need_curl() { # the warm rows talk to llama-server
	command -v curl >/dev/null && return
	say "curl missing: apt-get install -y curl"
	local sudo=
	[ "$(id -u)" -eq 0 ] || sudo=sudo
	$sudo apt-get install -y curl >&2 || { $sudo apt-get update >&2 && $sudo apt-get install -y curl >&2; } ||
		die "could not install curl"
}

fetch_source() {
	[ -d "$SRC/.git" ] && return
	command -v npm >/dev/null || die "npm missing (apt-get install -y npm)"
	local tmp=$CACHE/npm
	rm -rf "$tmp" && mkdir -p "$tmp"
	say "npm pack $NPM_PKG (the $PEER_VERSION git bundle ships inside it)"
	(cd "$tmp" && npm pack --silent "$NPM_PKG" >/dev/null && tar xzf node-llama-cpp-*.tgz package/llama/gitRelease.bundle package/llama/binariesGithubRelease.json)
	local rel
	rel=$(sed -n 's/.*"release": *"\([^"]*\)".*/\1/p' "$tmp/package/llama/binariesGithubRelease.json")
	[ "$rel" = "$PEER_VERSION" ] || die "$NPM_PKG ships llama.cpp '$rel', not $PEER_VERSION"
	rm -rf "$SRC.tmp"
	git -c advice.detachedHead=false clone --quiet "$tmp/package/llama/gitRelease.bundle" "$SRC.tmp"
	mv "$SRC.tmp" "$SRC"
	rm -rf "$tmp"
}

build_peer() {
	local stamp=$BUILD/.memosrt-peer-stamp want
	want="$PEER_VERSION ${CMAKE_FLAGS[*]} $(uname -m) $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null || true)"
	if [ -x "$BUILD/bin/llama-bench" ] && [ -x "$BUILD/bin/llama-server" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
		return
	fi
	need_cmake
	fetch_source
	say "building llama-bench and llama-server $PEER_VERSION in $BUILD (about 10 minutes on 2 cores)"
	cmake -S "$SRC" -B "$BUILD" "${CMAKE_FLAGS[@]}" >"$CACHE/cmake-configure.log" 2>&1 ||
		die "cmake configure failed: $CACHE/cmake-configure.log"
	cmake --build "$BUILD" --target llama-bench llama-server -j "$JOBS" >"$CACHE/cmake-build.log" 2>&1 ||
		die "cmake build failed: $CACHE/cmake-build.log"
	echo "$want" >"$stamp"
}

# the OpenMP peer of the -omp rows: llama-bench only
build_peer_omp() {
	local stamp=$OMP_BUILD/.memosrt-peer-stamp want
	want="$PEER_VERSION ${OMP_CMAKE_FLAGS[*]} $(uname -m) $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null || true)"
	if ! [ -x "$OMP_BUILD/bin/llama-bench" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
		need_cmake
		fetch_source
		say "building llama-bench $PEER_VERSION with OpenMP in $OMP_BUILD (about 20 minutes on 2 cores)"
		cmake -S "$SRC" -B "$OMP_BUILD" "${OMP_CMAKE_FLAGS[@]}" >"$CACHE/cmake-omp-configure.log" 2>&1 ||
			die "cmake configure failed: $CACHE/cmake-omp-configure.log"
		cmake --build "$OMP_BUILD" --target llama-bench -j "$JOBS" >"$CACHE/cmake-omp-build.log" 2>&1 ||
			die "cmake build failed: $CACHE/cmake-omp-build.log"
		echo "$want" >"$stamp"
	fi
	ldd "$OMP_BUILD/bin/llama-bench" | grep -q libgomp ||
		die "$OMP_BUILD/bin/llama-bench does not link libgomp (OpenMP not found: apt-get install -y libgomp1, gcc's -fopenmp)"
}

# decodeloop (bench/peer/decodeloop.c): the bare decode loop against the
# peer's libllama, for instruction counts per context parameter.
build_decodeloop() {
	local bin=$BUILD/bin/decodeloop
	[ "$bin" -nt bench/peer/decodeloop.c ] && return
	${CC:-cc} -O2 -o "$bin" bench/peer/decodeloop.c -I"$SRC/include" -I"$SRC/ggml/include" \
		-L"$BUILD/bin" -lllama -Wl,-rpath,"$BUILD/bin" || die "could not build $bin"
}

# ---- measuring ------------------------------------------------------------------

load1() { cut -d' ' -f1 /proc/loadavg; }

quiet_gate() {
	local waited=0
	while awk -v l="$(load1)" -v m="$LOAD_MAX" 'BEGIN { exit !(l > m) }'; do
		if [ "$waited" -ge "$LOAD_WAIT" ]; then
			say "warning: load average $(load1) still above $LOAD_MAX after ${LOAD_WAIT}s; measuring anyway (noisy)"
			return
		fi
		sleep 5
		waited=$((waited + 5))
	done
}

num() { sed -n "s/.*\"$1\": *\\([0-9.eE+-]*\\).*/\\1/p" "$2" | head -1; }

# contended-* rows: BUSY busy loops (yes) run beside both sides
BUSY=${BUSY:-3}
BUSY_PIDS=()
start_busy() {
	local i
	for i in $(seq "$BUSY"); do
		yes >/dev/null &
		BUSY_PIDS+=($!)
	done
}
stop_busy() {
	local p
	for p in "${BUSY_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	BUSY_PIDS=()
}

# memosrt run without --threads (the engine picks its decode threads):
# decode tokens/s after the first token
a_decode_auto() { # model tokens [memosrt run flags...]
	local m=$1 n=$2
	shift 2
	"$MEMOSRT" run --model "$m" --num-predict "$n" --no-cache --json "$@" "$PROMPT" >"$OUT/a.json" 2>"$OUT/a.err" || return 1
	awk -v n="$(num eval_tokens "$OUT/a.json")" -v ms="$(num eval_ms "$OUT/a.json")" \
		'BEGIN { if (n < 2 || ms <= 0) exit 1; printf "%.2f", (n - 1) / (ms / 1000) }'
}

# memosrt run at THREADS threads: decode tokens/s after the first token
a_decode() { # model tokens [memosrt run flags...]
	local m=$1 n=$2
	shift 2
	a_decode_auto "$m" "$n" --threads "$THREADS" "$@"
}

b_bench() { # model args...
	local m=$1
	shift
	"$PEER_BENCH" -m "$m" -t "$THREADS" -r 1 -o json "$@" >"$OUT/b.json" 2>"$OUT/b.err" || return 1
	printf '%.2f' "$(num avg_ts "$OUT/b.json")"
}

a_prefill() { # [bench ttft flags...]
	"$MEMOSRT" bench ttft --model "$MODEL_1B" --threads "$THREADS" --prefix 496 --query-tokens 16 --reps 1 --json "$@" >"$OUT/a.json" 2>"$OUT/a.err" || return 1
	awk -v ms="$(num cold_ttft_ms "$OUT/a.json")" 'BEGIN { if (ms <= 0) exit 1; printf "%.2f", 512 / (ms / 1000) }'
}

a_depth() { # depth
	"$MEMOSRT" bench ttft --model "$MODEL_1B" --threads "$THREADS" --prefix "$1" --query-tokens 16 --reps 1 --json >"$OUT/a.json" 2>"$OUT/a.err" || return 1
	awk -v ms="$(num floor_ms "$OUT/a.json")" 'BEGIN { if (ms <= 0) exit 1; printf "%.2f", 16 / (ms / 1000) }'
}

a_warm() { # prefix
	"$MEMOSRT" bench ttft --model "$MODEL_1B" --threads "$THREADS" --prefix "$1" --query-tokens 16 --reps 1 --json >"$OUT/a.json" 2>"$OUT/a.err" || return 1
	printf '%.1f' "$(num warm_disk_ttft_ms "$OUT/a.json")"
}

# llama-server for warm-N: started once per row, the prefix's slot saved once.
SERVER_PID=
PORT=${PEER_PORT:-18432}
stop_server() {
	[ -n "$SERVER_PID" ] || return 0
	kill "$SERVER_PID" 2>/dev/null || true
	wait "$SERVER_PID" 2>/dev/null || true
	SERVER_PID=
}
trap 'stop_server; stop_busy' EXIT

post() { curl -sS --max-time 900 -H 'Content-Type: application/json' "http://127.0.0.1:$PORT$1" -d "$2"; }

# tokens N [FROM]: N token ids as a JSON list (ids from 1000 on: plain text
# pieces of the 1B shape's Llama-2 vocabulary), so that the server's prompt is
# exactly N tokens, as memosrt's --prefix N is.
tokens() { awk -v n="$1" -v f="${2:-1000}" 'BEGIN { printf "["; for (i = 0; i < n; i++) printf "%s%d", i ? "," : "", f + (i * 37) % 20000; printf "]" }'; }

start_server() { # prefix
	stop_server
	local n=$1 slots=$OUT/slots
	rm -rf "$slots" && mkdir -p "$slots"
	"$BUILD/bin/llama-server" -m "$MODEL_1B" -t "$THREADS" -c $((n + 256)) --cache-ram 0 --port "$PORT" \
		--slot-save-path "$slots/" >"$OUT/server.log" 2>&1 &
	SERVER_PID=$!
	for _ in $(seq 300); do
		curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
		sleep 1
	done
	curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || die "llama-server did not come up: $OUT/server.log"
	# the prefix alone, prefilled once (cold) and saved to a file
	post /completion "{\"prompt\": $(tokens "$n"), \"n_predict\": 0, \"id_slot\": 0, \"cache_prompt\": true}" >"$OUT/b-cold.json"
	post '/slots/0?action=save' '{"filename": "prefix.bin"}' >"$OUT/b-save.json"
	grep -q n_saved "$OUT/b-save.json" || die "slot save failed: $(cat "$OUT/b-save.json")"
}

b_warm() { # prefix: the slot erased, restored from its file, then prefix + 16 query tokens completed
	local n=$1 t0 t1 prompt
	prompt=$(tokens "$n")
	prompt="${prompt%]},$(tokens 16 3000 | tr -d '[')"
	post '/slots/0?action=erase' '{}' >/dev/null
	t0=$(date +%s%N)
	post '/slots/0?action=restore' '{"filename": "prefix.bin"}' >"$OUT/b-restore.json"
	t1=$(date +%s%N)
	grep -q n_restored "$OUT/b-restore.json" || return 1
	post /completion "{\"prompt\": $prompt, \"n_predict\": 1, \"id_slot\": 0, \"cache_prompt\": true}" >"$OUT/b.json" || return 1
	# the query's prefill must be all that was computed (the prefix came from the slot)
	[ "$(num prompt_n "$OUT/b.json")" = 16 ] || { say "llama-server prefilled $(num prompt_n "$OUT/b.json") tokens, not the 16 of the query"; return 1; }
	awk -v us="$(((t1 - t0) / 1000))" -v p="$(num prompt_ms "$OUT/b.json")" 'BEGIN { if (p == "") exit 1; printf "%.1f", us / 1000 + p }'
}

med() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
rng() { printf '%s\n' "$@" | sort -g | sed -n '1p;$p' | paste -sd- -; }

TABLE=()
row() { # name what peer-cmd unit higher-is-better a-fn b-fn
	local name=$1 what=$2 peercmd=$3 unit=$4 higher=$5 afn=$6 bfn=$7 i a b r
	local as=() bs=() rs=()
	what+=$PEER_TAG
	[ -z "$PEER_TAG" ] || name+=-omp
	for i in $(seq "$PAIRS"); do
		[ ${#BUSY_PIDS[@]} -gt 0 ] || quiet_gate
		local l=$(load1)
		a=$($afn) || die "$name pair $i: memosrt gave no figure ($OUT/a.json, $OUT/a.err)"
		b=$($bfn) || die "$name pair $i: peer gave no figure ($OUT/b.json, $OUT/b.err)"
		if [ "$higher" = 1 ]; then r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }'); else r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }'); fi
		say "$name pair $i (load $l): memosrt $a, peer $b $unit, ratio $r"
		as+=("$a") bs+=("$b") rs+=("$r")
	done
	TABLE+=("| $what | $(med "${as[@]}") ($(rng "${as[@]}")) | $(med "${bs[@]}") ($(rng "${bs[@]}")) | $unit | **$(med "${rs[@]}")** ($(rng "${rs[@]}")) | $peercmd |")
}

main() {
	build_peer
	build_decodeloop
	case " $ROWS " in *-omp\ *) build_peer_omp ;; esac
	[ "${1:-}" = build ] && return
	[ -x "$MEMOSRT" ] || die "no $MEMOSRT (make build)"
	mkdir -p "$OUT"
	say "$(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); $THREADS threads; $PAIRS pairs; quiet gate: load1 <= $LOAD_MAX (waits up to ${LOAD_WAIT}s)"
	local r omp=
	for r in $ROWS; do
		PEER_BENCH=$BUILD/bin/llama-bench PEER_TAG=
		case $r in
		decode-*-omp | prefill-*-omp | read-1b-omp | mmap-1b-omp | contended-*-omp | depth-*-omp)
			omp=1 PEER_BENCH=$OMP_BUILD/bin/llama-bench PEER_TAG=" [peer: llama-bench built with OpenMP]"
			r=${r%-omp} ;;
		*-omp) die "row $r: only the llama-bench rows have an OpenMP peer" ;;
		esac
		case $r in
		decode-1b)
			[ -f "$MODEL_1B" ] || die "no $MODEL_1B (make models/1b.gguf)"
			row "$r" "decode, 1B shape F16, 64 tokens" "llama-bench -t $THREADS -p 0 -n 64 -r 1" tok/s 1 \
				"a_decode $MODEL_1B 64" "b_bench $MODEL_1B -p 0 -n 64" ;;
		read-1b)
			[ -f "$MODEL_1B" ] || die "no $MODEL_1B (make models/1b.gguf)"
			row "$r" "decode, 1B shape F16, 64 tokens, weights read on both sides" "llama-bench -t $THREADS -p 0 -n 64 -r 1 -mmp 0" tok/s 1 \
				"a_decode $MODEL_1B 64" "b_bench $MODEL_1B -p 0 -n 64 -mmp 0" ;;
		mmap-1b)
			[ -f "$MODEL_1B" ] || die "no $MODEL_1B (make models/1b.gguf)"
			row "$r" "decode, 1B shape F16, 64 tokens, weights mapped on both sides (memosrt run --mmap)" "llama-bench -t $THREADS -p 0 -n 64 -r 1 -mmp 1" tok/s 1 \
				"a_decode $MODEL_1B 64 --mmap" "b_bench $MODEL_1B -p 0 -n 64 -mmp 1" ;;
		decode-stories)
			[ -f "$MODEL_STORIES" ] || die "no $MODEL_STORIES"
			row "$r" "decode, stories260K, 256 tokens (memosrt run samples greedily, llama-bench does not sample)" \
				"llama-bench -t $THREADS -p 0 -n 256 -r 1" tok/s 1 \
				"a_decode $MODEL_STORIES 256" "b_bench $MODEL_STORIES -p 0 -n 256" ;;
		prefill-1b)
			row "$r" "prefill, 1B shape, 512 tokens, after a warm-up prefill on both sides" "llama-bench -t $THREADS -p 512 -n 0 -r 1" tok/s 1 \
				"a_prefill --warmup" "b_bench $MODEL_1B -p 512 -n 0" ;;
		prefill-1b-first)
			row "$r" "prefill, 1B shape, 512 tokens, each process's first prefill" "llama-bench -t $THREADS -p 512 -n 0 -r 1 --no-warmup" tok/s 1 \
				a_prefill "b_bench $MODEL_1B -p 512 -n 0 --no-warmup" ;;
		contended-stories)
			[ -f "$MODEL_STORIES" ] || die "no $MODEL_STORIES"
			start_busy
			row "$r" "decode, stories260K, 256 tokens, $BUSY busy processes beside it (memosrt picks its threads, the peer runs $THREADS)" \
				"llama-bench -t $THREADS -p 0 -n 256 -r 1" tok/s 1 \
				"a_decode_auto $MODEL_STORIES 256" "b_bench $MODEL_STORIES -p 0 -n 256"
			stop_busy ;;
		contended-1b)
			[ -f "$MODEL_1B" ] || die "no $MODEL_1B (make models/1b.gguf)"
			start_busy
			row "$r" "decode, 1B shape F16, 64 tokens, $BUSY busy processes beside it (memosrt picks its threads, the peer runs $THREADS)" \
				"llama-bench -t $THREADS -p 0 -n 64 -r 1" tok/s 1 \
				"a_decode_auto $MODEL_1B 64" "b_bench $MODEL_1B -p 0 -n 64"
			stop_busy ;;
		depth-*)
			local n=${r#depth-}
			row "$r" "prefill, 1B shape, 16 tokens over $n cached tokens" "llama-bench -t $THREADS -p 16 -n 0 -d $n -fa 0 -mmp 0 -r 1" tok/s 1 \
				"a_depth $n" "b_bench $MODEL_1B -p 16 -n 0 -d $n -fa 0 -mmp 0" ;;
		warm-*)
			local n=${r#warm-}
			need_curl
			start_server "$n"
			row "$r" "warm TTFT, 1B shape, $n-token prefix + 16 (ratio peer/memosrt)" \
				"llama-server slot restore + completion" ms 0 "a_warm $n" "b_warm $n"
			stop_server ;;
		*) die "unknown row $r" ;;
		esac
	done
	echo
	echo "memosrt $(git rev-parse --short HEAD 2>/dev/null || echo '?') vs llama.cpp $PEER_VERSION ($BUILD${omp:+; OpenMP: $OMP_BUILD}), $THREADS threads, $(nproc) CPUs, median of $PAIRS pairs (range)"
	echo
	echo "| figure | memosrt | llama.cpp $PEER_VERSION | unit | memosrt / peer | peer command |"
	echo "|---|---:|---:|---|---:|---|"
	printf '%s\n' "${TABLE[@]}"
}

main "$@"
