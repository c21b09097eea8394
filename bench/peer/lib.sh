# Sourced by the peer's small scripts (cputime.sh, switches.sh,
# versus.sh) once they are in the repository root, with NAME set to the
# script's name: the model and the peer's llama-bench (each overridable),
# the prompt, a scratch folder removed on exit, and the two readings of
# tokens/s.
MODEL=${MODEL:-${MEMOSRT_MODELS:-$(pwd)/../shared/models}/stories260K.gguf}
BENCH=${BENCH:-${PEER_CACHE:-$(pwd)/.cache/peer}/build/bin/llama-bench}
PROMPT="Once upon a time"
[ -x "$BENCH" ] || { echo "$NAME: no $BENCH (bench/peer/peer.sh build)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# mtps FILE: the decode rate of `memosrt run --json` output, as
# bench/peer/peer.sh counts it: (eval_tokens - 1) / eval_ms, to 0.01 (the first
# token comes with the prompt)
mtps() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.2f" % ((d["eval_tokens"]-1)/(d["eval_ms"]/1000)))' "$1"; }
# ptps FILE: avg_ts of `llama-bench -o json` output
ptps() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d=d[0] if isinstance(d,list) else d; print("%.2f" % d["avg_ts"])' "$1"; }
