#!/usr/bin/env bash
# Two memosrt binaries and the peer's llama-bench in turn, round by round
# (A B C A B C): stories260K decode, the ratio of each binary's tokens/s
# to the peer's in the same round, and the medians. For a change to the
# engine: the old and the new build meet the same moments of a noisy host.
#
#   OLD=/tmp/memosrt.old bench/peer/versus.sh          # against bin/memosrt, N=256, T=2, 9 rounds
#   OLD=/tmp/old NEW=bin/memosrt N=256 T=1 P=25 bench/peer/versus.sh
#
# memosrt: run --threads T --num-predict N --no-cache --json, tokens/s =
# (eval_tokens - 1) / eval_ms as bench/peer/peer.sh counts it; peer:
# llama-bench -t T -p 0 -n N -r 1. Needs the peer (bench/peer/peer.sh build).
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${N:-256}
T=${T:-2}
P=${P:-9}
OLD=${OLD:?OLD: the memosrt binary to compare}
NEW=${NEW:-bin/memosrt}
NAME=versus
. bench/peer/lib.sh

echo "round old new peer (tok/s) old/peer new/peer"
for i in $(seq "$P"); do
	"$OLD" run --model "$MODEL" --threads "$T" --num-predict "$N" --no-cache --json "$PROMPT" >"$TMP/o.json" 2>/dev/null
	"$NEW" run --model "$MODEL" --threads "$T" --num-predict "$N" --no-cache --json "$PROMPT" >"$TMP/n.json" 2>/dev/null
	"$BENCH" -m "$MODEL" -t "$T" -p 0 -n "$N" -r 1 -o json >"$TMP/b.json" 2>/dev/null
	awk -v i="$i" -v o="$(mtps "$TMP/o.json")" -v n="$(mtps "$TMP/n.json")" -v p="$(ptps "$TMP/b.json")" \
		'BEGIN { printf "%s %s %s %s %.3f %.3f\n", i, o, n, p, o / p, n / p }' | tee -a "$TMP/rounds"
done
python3 - "$TMP/rounds" <<'PY'
import statistics as st, sys
c = list(zip(*[[float(v) for v in l.split()[1:]] for l in open(sys.argv[1])]))
f = lambda x: '%.3f (%.3f-%.3f)' % (st.median(x), min(x), max(x))
print('medians: old %.0f, new %.0f, peer %.0f tok/s; old/peer %s; new/peer %s; %d rounds' % (st.median(c[0]), st.median(c[1]), st.median(c[2]), f(c[3]), f(c[4]), len(c[0])))
PY
