#!/usr/bin/env bash
# bench/gpu-check.sh: the whole GPU check in one go, on a machine with an
# NVIDIA GPU, the CUDA toolkit and cmake, and no Go toolchain.
#
#   1. takes a prebuilt bin/memosrt (on a Go machine: make build MARCH=x86-64-v3);
#   2. builds lib/memosrt/libggml-cuda.so (make cuda, or the same cmake
#      commands when make is missing) unless SKIP_BUILD=1 or NGL=0;
#   3. checks that bin/memosrt sees a GPU device;
#   4. generates the random-weight models of SHAPES (bin/memosrt gen-model);
#   5. runs bin/memosrt bench ttft --ngl NGL on each, as JSON and as the table.
#
# Results go to $OUT when set (the device runner's output dir), else
# .cache/gpu-check/<UTC time>: ttft-<shape>.json, ttft-<shape>.txt, one .log of
# stderr per step (build-cuda.out: the build's stdout), system.txt (GPU, driver,
# nvcc, ldd of the module, devices) and summary.txt (steps and their times).
#
# On the device runner: carry bin/ (and .cache/ollama-src from `make cuda-src`,
# models/llama-2-tiny-random.gguf); lib/memosrt, .cache/cmake-cuda and
# models/gen are ignored build outputs, kept while the machine stays warm, so a
# rerun with SKIP_BUILD=1 reuses the CUDA build and the generated models.
#
# Options (flag, or environment variable, default):
#   --ngl N          NGL         99      layers offloaded; 0 runs on the CPU (no build, no GPU check)
#   --prefixes L     PREFIXES    1024,4096,16000   prefix lengths, tokens
#   --shapes L       SHAPES      1b,8b   gen-model presets (1b, 8b, tiny)
#   --cuda-arch A    CUDA_ARCH   90a     CMAKE_CUDA_ARCHITECTURES (90a: H100/H200; native)
#   --skip-build     SKIP_BUILD  0       1: use the lib/memosrt already there
#   --reps N         REPS        (bench default)   repetitions of warm/floor runs
#   --no-table       TABLE       1       0: skip the second run that prints the human table
#   --out DIR        OUT         .cache/gpu-check/<time>
#   --models DIR     MODELS_DIR  models/gen         where generated models go (reused if present)
#   --tokenizer P    TOKENIZER   llama-2-tiny-random.gguf from shared/models, ../shared/models or models/
#                    BIN         bin/memosrt
#                    MEMOSRT_LIB_PATH  lib/memosrt (absolute), the modules bin/memosrt loads
#                    CUDA_SRC    ollama sources for make cuda (see Makefile; .cache/ollama-src from make cuda-src)
#
# Two copies of ggml-base. bin/memosrt links ggml statically (cgo) and exports
# none of its symbols (nm -D bin/memosrt: no ggml_*); ggml dlopens
# libggml-cuda.so with RTLD_LOCAL, and the module binds its ggml_* calls to
# libggml-base.so.0 beside it (LD_DEBUG=bindings, checked with a CPU variant
# module: 43 ggml symbols to libggml-base.so.0, none to the binary). ollama's
# runner works the same way (static ggml, lib/ollama/libggml-cuda.so next to
# libggml-base.so, found through LD_LIBRARY_PATH; we use RUNPATH $ORIGIN).
# The two sides share only structs (ggml_tensor, the backend vtables), so both
# must come from the same ggml revision: build the module from the pinned
# ollama module, never take one from another ollama or llama.cpp release. Each
# copy has its own globals: the CUDA module's log lines go to stderr, not to
# memosrt's slog logger (ggml_log_set reaches the static copy only).
#
# CPU smoke test (how this script is tested without a GPU):
#   NGL=0 SHAPES=tiny PREFIXES=64,256 bench/gpu-check.sh
set -euo pipefail

die() { echo "gpu-check: error: $*" >&2; exit 1; }
say() { echo "gpu-check: $*" >&2; }

NGL=${NGL:-99}
PREFIXES=${PREFIXES:-1024,4096,16000}
SHAPES=${SHAPES:-1b,8b}
CUDA_ARCH=${CUDA_ARCH:-90a}
SKIP_BUILD=${SKIP_BUILD:-0}
REPS=${REPS:-}
TABLE=${TABLE:-1}
OUT=${OUT:-}
MODELS_DIR=${MODELS_DIR:-models/gen}
TOKENIZER=${TOKENIZER:-}
BIN=${BIN:-bin/memosrt}

while [ $# -gt 0 ]; do
	case "$1" in
	--ngl) NGL=${2:?--ngl needs a value}; shift 2 ;;
	--prefixes) PREFIXES=${2:?--prefixes needs a value}; shift 2 ;;
	--shapes) SHAPES=${2:?--shapes needs a value}; shift 2 ;;
	--cuda-arch) CUDA_ARCH=${2:?--cuda-arch needs a value}; shift 2 ;;
	--skip-build) SKIP_BUILD=1; shift ;;
	--reps) REPS=${2:?--reps needs a value}; shift 2 ;;
	--no-table) TABLE=0; shift ;;
	--out) OUT=${2:?--out needs a value}; shift 2 ;;
	--models) MODELS_DIR=${2:?--models needs a value}; shift 2 ;;
	--tokenizer) TOKENIZER=${2:?--tokenizer needs a value}; shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
done

case "$NGL" in '' | *[!0-9]*) die "NGL must be a number of layers, got '$NGL'" ;; esac

# Work from the repository root, whatever the caller's directory.
cd "$(dirname "$0")/.."

[ -n "$OUT" ] || OUT=.cache/gpu-check/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT" "$MODELS_DIR"
OUT=$(cd "$OUT" && pwd)

SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY" >&2; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# step NAME CMD...: runs CMD with stderr to $OUT/NAME.log; on failure shows
# the log's tail and stops.
step() {
	local name=$1; shift
	if ! ("$@") 2>"$OUT/$name.log"; then # a subshell, so that die inside only ends the step
		echo "gpu-check: step '$name' failed: $*" >&2
		tail -n 30 "$OUT/$name.log" >&2 || true
		die "see $OUT/$name.log"
	fi
}

# --- 1. binary ---------------------------------------------------------------
[ -x "$BIN" ] || die "$BIN not found or not executable; build it on a machine with Go: make build MARCH=x86-64-v3 (and carry bin/)"
note "gpu-check $(date -u +%FT%TZ): bin $BIN, ngl $NGL, shapes $SHAPES, prefixes $PREFIXES, out $OUT"

# The backend modules this script builds, whatever directory BIN is in.
export MEMOSRT_LIB_PATH=${MEMOSRT_LIB_PATH:-$(pwd)/lib/memosrt}

# CUDA runtime libraries (libcudart, libcublas) of a toolkit install.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
	if [ -d "$d" ]; then
		export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
		break
	fi
done

# --- 2. CUDA backend module ----------------------------------------------------
build_cuda_cmake() { # the commands of `make cuda`, for machines without make
	local nvcc src build=.cache/cmake-cuda
	nvcc=${NVCC:-$(command -v nvcc || true)}
	[ -n "$nvcc" ] || { [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc; } || true
	if [ -z "$nvcc" ] || [ ! -x "$nvcc" ]; then
		die "nvcc not found (PATH, /usr/local/cuda/bin); install the CUDA toolkit 12+ or set NVCC"
	fi
	command -v cmake >/dev/null || die "cmake not found; install cmake >= 3.21"
	local gen=()
	if command -v ninja >/dev/null; then
		gen=(-G Ninja)
	elif ! command -v make >/dev/null; then
		die "cmake needs a build tool: install make or ninja"
	fi
	src=${CUDA_SRC:-.cache/ollama-src}
	[ -f "$src/CMakeLists.txt" ] || die "ollama sources not found at $src; run 'make cuda-src' on a Go machine and carry .cache/ollama-src, or set CUDA_SRC"
	# set -e does not apply inside step's `if`, hence the explicit returns.
	# shellcheck disable=SC2016 # $ORIGIN is for the dynamic loader, not the shell
	cmake -S "$src" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
		-DCMAKE_CUDA_COMPILER="$nvcc" -DCUDAToolkit_ROOT="$(dirname "$(dirname "$nvcc")")" \
		-DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" \
		-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON '-DCMAKE_INSTALL_RPATH=$ORIGIN' -DCMAKE_INSTALL_RPATH_USE_LINK_PATH=ON \
		-DCMAKE_DISABLE_FIND_PACKAGE_Vulkan=ON || return 1
	cmake --build "$build" --target ggml-cuda -j "$(nproc)" || return 1
	mkdir -p lib/memosrt || return 1
	rm -f lib/memosrt/libggml-cuda.so lib/memosrt/libggml-base.so*
	cp -P "$build"/lib/ollama/libggml-base.so* "$build/lib/ollama/libggml-cuda.so" lib/memosrt/
}

if [ "$NGL" -eq 0 ]; then
	note "ngl 0: CPU run, no CUDA build and no GPU check"
elif [ "$SKIP_BUILD" = 1 ]; then
	[ -f lib/memosrt/libggml-cuda.so ] || die "SKIP_BUILD=1 but lib/memosrt/libggml-cuda.so is missing"
	note "SKIP_BUILD=1: using the lib/memosrt already there"
else
	t0=$(now)
	if command -v make >/dev/null; then
		step build-cuda make cuda CUDA_ARCH="$CUDA_ARCH" >"$OUT/build-cuda.out"
	else
		step build-cuda build_cuda_cmake >"$OUT/build-cuda.out"
	fi
	note "built lib/memosrt (CUDA_ARCH $CUDA_ARCH) in $(secs "$t0" "$(now)") s"
fi

# --- 3. system and devices --------------------------------------------------------
{
	echo "== uname"; uname -a
	echo "== nvidia-smi"
	nvidia-smi --query-gpu=name,driver_version,memory.total,memory.free,clocks.max.sm --format=csv 2>&1 || echo "(nvidia-smi unavailable)"
	echo "== nvcc"; { nvcc --version || /usr/local/cuda/bin/nvcc --version; } 2>&1 | tail -n 2 || true
	echo "== lib/memosrt"; ls -l lib/memosrt 2>&1 || true
	if [ -f lib/memosrt/libggml-cuda.so ] && command -v ldd >/dev/null; then
		echo "== ldd libggml-cuda.so"; ldd lib/memosrt/libggml-cuda.so 2>&1 || true
	fi
	echo "== memosrt version"; "$BIN" version 2>&1 || true
} >"$OUT/system.txt"
step devices "$BIN" devices >"$OUT/devices.txt"
if [ "$NGL" -gt 0 ]; then
	if ! grep -q '^gpu' "$OUT/devices.txt"; then
		cat "$OUT/devices.txt" >&2
		MEMOSRT_LOG=debug "$BIN" devices >/dev/null 2>"$OUT/devices-debug.log" || true
		# ggml loads backend modules silently; ldd tells what the loader misses.
		if command -v ldd >/dev/null; then
			ldd lib/memosrt/libggml-cuda.so 2>&1 | grep -E 'not found|not a dynamic|No such' >&2 || true
		fi
		die "bin/memosrt found no GPU device: lib/memosrt/libggml-cuda.so did not load or found no CUDA device (nvidia-smi and ldd in $OUT/system.txt; missing CUDA libraries: set LD_LIBRARY_PATH)"
	fi
fi
note "devices: $(tr '\n' ';' <"$OUT/devices.txt")"

# --- 4. models --------------------------------------------------------------------
if [ -z "$TOKENIZER" ]; then
	for p in shared/models ../shared/models models; do
		if [ -f "$p/llama-2-tiny-random.gguf" ]; then TOKENIZER=$p/llama-2-tiny-random.gguf; break; fi
	done
fi
if [ -z "$TOKENIZER" ] || [ ! -f "$TOKENIZER" ]; then
	die "tokenizer source llama-2-tiny-random.gguf not found (shared/models, ../shared/models, models/); set TOKENIZER"
fi

IFS=, read -r -a shapes <<<"$SHAPES"
for s in "${shapes[@]}"; do
	m=$MODELS_DIR/$s.gguf
	if [ -f "$m" ]; then
		note "model $s: reusing $m"
		continue
	fi
	t0=$(now)
	step "gen-$s" "$BIN" gen-model --preset "$s" --out "$m" --tokenizer "$TOKENIZER" >"$OUT/gen-$s.txt"
	note "model $s: generated $m ($(du -h "$m" | cut -f1)) in $(secs "$t0" "$(now)") s"
done

# --- 5. TTFT benchmark ------------------------------------------------------------
extra=()
[ -z "$REPS" ] || extra+=(--reps "$REPS")
for s in "${shapes[@]}"; do
	m=$MODELS_DIR/$s.gguf
	t0=$(now)
	step "ttft-$s-json" "$BIN" bench ttft --model "$m" --prefix "$PREFIXES" --ngl "$NGL" --json "${extra[@]}" >"$OUT/ttft-$s.json"
	note "ttft $s: json in $(secs "$t0" "$(now)") s -> $OUT/ttft-$s.json"
	if [ "$TABLE" = 1 ]; then
		t0=$(now)
		step "ttft-$s-table" "$BIN" bench ttft --model "$m" --prefix "$PREFIXES" --ngl "$NGL" "${extra[@]}" >"$OUT/ttft-$s.txt"
		note "ttft $s: table in $(secs "$t0" "$(now)") s -> $OUT/ttft-$s.txt"
		cat "$OUT/ttft-$s.txt"
		echo
	fi
done
note "done: results in $OUT"
