#!/bin/sh
# demo.sh BIN -- run every built CPU stage on one problem and print a table (the GPU stages: plots/bench_gpu.sh):
# stage, median time, speedup over stage 01, error against the previous stage and the oracle.
# Each stage writes its o.npy and ht.npy; the next stage is checked against them.
set -eu
bin=${1:-bin}
shape="--B 1 --T 4096 --H 2 --K 64 --V 64 --h0 --reps 7"
work=build/demo
rm -rf "$work"
mkdir -p "$work"
echo "gdn-steps demo: $shape, $(nproc) threads, $(uname -m) $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')"
printf '%-20s %12s %12s %14s %14s\n' stage median_ms speedup err_vs_prev err_vs_oracle
base_ms=""
previous=""
failed=0
for binary in "$bin"/[0-9][0-9]_*; do
    [ -x "$binary" ] || continue
    stage=$(basename "$binary")
    case "$stage" in *_cuda) continue ;; esac
    # the CPU progression only: GPU twins and GPU-only stages (06 on: no name.c) are
    # measured by plots/bench_gpu.sh on a GPU
    [ -f "steps/$stage/${stage#??_}.c" ] || continue
    # stage 08 runs on 3 MPI ranks (so that one of them folds) and is checked against the stage before it only (it has no
    # oracle check: that would need the whole problem on one rank)
    launcher="" oracle_check="--check-against oracle"
    case "$stage" in 08_*)
        command -v mpirun >/dev/null 2>&1 || { echo "  $stage skipped: no mpirun"; continue; }
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
        launcher="mpirun -q -np 3 --oversubscribe --mca btl_vader_single_copy_mechanism none" oracle_check="" ;;
    esac
    reference=""
    [ -n "$previous" ] && reference="--check-against $work/$previous"
    if ! line=$($launcher "$binary" $shape $oracle_check $reference --out "$work/$stage" 2>"$work/$stage.err"); then
        failed=1
    fi
    [ -s "$work/$stage.err" ] && sed 's/^/  /' "$work/$stage.err"
    [ -n "$line" ] || { echo "  $stage printed no result line"; failed=1; continue; }
    ms=$(echo "$line" | sed 's/.*median_ms=\([^ ]*\).*/\1/')
    oracle="-"
    case "$line" in *err_oracle=*) oracle=$(echo "$line" | sed 's/.*err_oracle=\([^ ]*\).*/\1/') ;; esac
    prev="-"
    case "$line" in *err_ref=*) prev=$(echo "$line" | sed 's/.*err_ref=\([^ ]*\).*/\1/') ;; esac
    [ -n "$base_ms" ] || base_ms=$ms
    speedup=$(awk -v a="$base_ms" -v b="$ms" 'BEGIN { printf "%.2fx", a / b }')
    printf '%-20s %12s %12s %14s %14s\n' "$stage" "$ms" "$speedup" "$prev" "$oracle"
    previous=$stage
done
echo "errors are relative L2 (worse of o and ht); tolerances: common/tolerances.h"
[ "$failed" = 0 ] || { echo "demo: a stage failed its check (see above)"; exit 1; }
