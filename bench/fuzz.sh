#!/usr/bin/env bash
# bench/fuzz.sh: run every fuzz target of the module (func FuzzXxx in a
# _test.go file) for FUZZTIME each, one after the other, and print the
# executions each one made. Exit status 1 if any target found a failure; its
# input is kept under <package>/testdata/fuzz/<target>/ (commit it as a
# regression seed once fixed).
#
#   FUZZTIME=30s bench/fuzz.sh            # what CI runs (make fuzz)
#   FUZZTIME=10s bench/fuzz.sh ./kvcache  # the targets of some packages
#
# Run it from the repository root with the Makefile's CGO flags exported
# (make fuzz does): fuzzing builds the cgo packages with coverage
# instrumentation once (llama.cpp recompiles, about 3 minutes on 2 cores;
# cached afterwards).
set -u
FUZZTIME=${FUZZTIME:-60s}
MINIMIZE=${FUZZMINIMIZETIME:-10s}
GO=${GO:-go}
pkgs=("$@")
[ ${#pkgs[@]} -eq 0 ] && pkgs=(./...)

failed=0
total=0
summary=()
for pkg in $($GO list "${pkgs[@]}"); do
	dir=$($GO list -f '{{.Dir}}' "$pkg")
	for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort); do
		echo "== $pkg $target ($FUZZTIME)"
		start=$(date +%s)
		out=$($GO test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$MINIMIZE" "$pkg" 2>&1)
		rc=$?
		# Go's fuzz coordinator fails with a bare "context deadline exceeded"
		# (no failing input written) when a worker does not answer at the
		# end of -fuzztime, as happens on a starved 2-core machine: run the
		# target once more. A finding always writes its input, and a worker
		# that really hangs hangs again.
		if [ $rc -ne 0 ] && ! printf '%s\n' "$out" | grep -q 'Failing input written' && printf '%s\n' "$out" | grep -q 'context deadline exceeded'; then
			echo "   (worker did not answer at the deadline; running $target once more)"
			out=$($GO test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$MINIMIZE" "$pkg" 2>&1)
			rc=$?
		fi
		execs=$(printf '%s\n' "$out" | grep -o 'execs: [0-9]*' | tail -1 | cut -d' ' -f2)
		secs=$(( $(date +%s) - start ))
		if [ $rc -ne 0 ]; then
			failed=1
			printf '%s\n' "$out" | tail -30
			summary+=("FAIL $pkg $target: ${execs:-0} execs, ${secs}s")
		else
			summary+=("ok   $pkg $target: ${execs:-0} execs, ${secs}s")
			total=$(( total + ${execs:-0} ))
		fi
	done
done
echo
printf '%s\n' "${summary[@]}"
echo "fuzz: ${#summary[@]} targets, $total execs without a finding; FUZZTIME=$FUZZTIME"
exit $failed
