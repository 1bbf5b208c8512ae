#!/bin/sh
# sanitize.sh BIN -- compute-sanitizer's memcheck, racecheck and synccheck on every GPU binary,
# on small problems that still reach every code path (partial tiles and chunks, K = 128 with
# two threads per column, h0). Run on a machine with a CUDA device; exits non-zero on any report.
set -u
bin=${1:-bin}
status=0
for stage in 01_naive_loop 03_parallel_scan 04_two_phase_scan 05_wy_chunked; do
    for shape in "--B 2 --T 77 --H 2 --K 32 --V 40 --h0" "--B 1 --T 70 --H 1 --K 128 --V 72"; do
        for tool in memcheck racecheck synccheck; do
            log=$(compute-sanitizer --tool "$tool" --error-exitcode 3 "$bin/${stage}_cuda" $shape --reps 1 \
                  --check-against oracle 2>&1)
            rc=$?
            summary=$(printf '%s\n' "$log" | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' | tail -1)
            printf '%-24s %-10s %-40s rc=%d %s\n' "${stage}_cuda" "$tool" "$shape" "$rc" "$summary"
            [ "$rc" = 0 ] || status=1
        done
    done
done
exit $status
