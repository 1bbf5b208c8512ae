#!/bin/sh
# demo.sh -- the table `make demo` prints: every stage this machine can run on one problem,
# with its median time, speedup over stage 01 (CPU), and error against the stage before it and
# the oracle. Each stage writes its o.npy and ht.npy; the next stage is checked against them.
#
#   sh common/demo.sh find-gpu           prints why the GPU stages cannot run here, or nothing
#                                        where a GPU answers
#   sh common/demo.sh run BIN [REASON]   the table: the CPU stages, then the GPU stages, or
#                                        one line saying they were skipped for REASON
set -eu

if [ "${1:-}" = find-gpu ]; then
    # cheap, before anything is built: nvidia-smi lists each GPU as "GPU 0: NVIDIA H200 (UUID: ...)"
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && exit 0
        echo "no NVIDIA GPU answers (nvidia-smi -L lists none)"
    elif [ -e /dev/nvidia0 ]; then
        exit 0
    else
        echo "no NVIDIA GPU found (no nvidia-smi, no /dev/nvidia0)"
    fi
    exit 0
fi
[ "${1:-}" = run ] || { echo "usage: sh common/demo.sh find-gpu | run BIN [REASON]" >&2; exit 1; }
bin=${2:-bin}
no_gpu=${3:-}
shape="--B 1 --T 4096 --H 2 --K 64 --V 64 --h0 --reps 7"
work=build/demo
rm -rf "$work"
mkdir -p "$work"
echo "gdn-steps demo: $shape, $(nproc) threads, $(uname -m) $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')"
if [ -z "$no_gpu" ]; then
    echo "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
fi
printf '%-24s %12s %12s %14s %14s\n' stage median_ms speedup err_vs_prev err_vs_oracle
base_ms=""
failed=0

# run STAGE LAUNCHER ORACLE_CHECK REFERENCE: one row; REFERENCE is the stage whose --out this
# one is checked against ("" for none)
run() {
    stage=$1 launcher=$2 oracle_check=$3 reference=$4
    check=""
    [ -n "$reference" ] && check="--check-against $work/$reference"
    if ! line=$($launcher "$bin/$stage" $shape $oracle_check $check --out "$work/$stage" 2>"$work/$stage.err"); then
        failed=1
    fi
    [ -s "$work/$stage.err" ] && sed 's/^/  /' "$work/$stage.err"
    [ -n "$line" ] || { echo "  $stage printed no result line"; failed=1; return 1; }
    ms=$(echo "$line" | sed 's/.*median_ms=\([^ ]*\).*/\1/')
    oracle="-"
    case "$line" in *err_oracle=*) oracle=$(echo "$line" | sed 's/.*err_oracle=\([^ ]*\).*/\1/') ;; esac
    prev="-"
    case "$line" in *err_ref=*) prev=$(echo "$line" | sed 's/.*err_ref=\([^ ]*\).*/\1/') ;; esac
    [ -n "$base_ms" ] || base_ms=$ms
    speedup=$(awk -v a="$base_ms" -v b="$ms" 'BEGIN { printf "%.2fx", a / b }')
    printf '%-24s %12s %12s %14s %14s\n' "$stage" "$ms" "$speedup" "$prev" "$oracle"
}

# The CPU progression: the stage folders holding name.c (06 on are GPU only).
previous=""
for binary in "$bin"/[0-9][0-9]_*; do
    stage=$(basename "$binary")
    [ -x "$binary" ] && [ -f "steps/$stage/${stage#??_}.c" ] || continue
    case "$stage" in *_backward_*) continue ;; esac # their own table, below
    # stage 08 runs on 3 MPI ranks (so that one of them folds), --oversubscribe so that a machine
    # with fewer cores runs it too; it is checked against the stage before it only (no oracle
    # check: that would need the whole problem in one process)
    launcher="" oracle_check="--check-against oracle"
    case "$stage" in 08_*)
        command -v mpirun >/dev/null 2>&1 || { echo "  $stage skipped: no mpirun"; continue; }
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
        launcher="mpirun --oversubscribe -np 3 --mca btl_vader_single_copy_mechanism none" oracle_check="" ;;
    esac
    run "$stage" "$launcher" "$oracle_check" "$previous" && previous=$stage
done

# The backward stages: the same problem, the loss's gradients do and dht drawn from the seed; each
# checked against the one before it (o, ht and every gradient) and the fp64
# backward oracle. Speedup is against the first of them.
echo "backward (gradients of the same problem; errors: the worst of o, ht, dq, dk, dv, dg, dbeta, dh0)"
forward_base_ms=$base_ms base_ms="" previous=""
for binary in "$bin"/[0-9][0-9]_backward_*; do
    stage=$(basename "$binary")
    [ -x "$binary" ] && [ -f "steps/$stage/${stage#??_}.c" ] || continue
    run "$stage" "" "--check-against oracle" "$previous" && previous=$stage
done
# their GPU twins, where a GPU answers, each checked against its CPU stage
if [ -z "$no_gpu" ]; then
    for binary in "$bin"/[0-9][0-9]_backward_*_cuda; do
        stage=$(basename "$binary")
        [ -x "$binary" ] || continue
        run "$stage" "" "--check-against oracle" "${stage%_cuda}"
    done
    # the GPU-only ones (11: bf16 inputs), against the oracle on their rounded inputs alone: the
    # rows above ran on the inputs unrounded
    for binary in "$bin"/[0-9][0-9]_backward_*; do
        stage=$(basename "$binary")
        case "$stage" in *_cuda) continue ;; esac
        [ -x "$binary" ] && [ -f "steps/$stage/${stage#??_}.cu" ] && [ ! -f "steps/$stage/${stage#??_}.c" ] || continue
        run "$stage" "" "--check-against oracle" ""
    done
fi
base_ms=$forward_base_ms

# The GPU progression, as plots/bench_gpu.sh runs it: the CUDA twins of 01, 03, 04, 05, then
# 06 and 07, each checked against the row above (01_cuda against stage 01 on the CPU). 06 and 07
# read q, k, v rounded to bf16, so the binary holds them to GDN_TOLERANCE_BF16 (common/
# tolerances.h): against the oracle on the same rounded inputs, and against the row above;
# 06's difference from 05_cuda includes the rounding of the inputs.
if [ -n "$no_gpu" ]; then
    echo "GPU stages skipped: $no_gpu; their binaries are not built"
else
    previous=01_naive_loop
    for binary in "$bin"/[0-9][0-9]_*; do
        stage=$(basename "$binary")
        name=${stage%_cuda}
        case "$stage" in
        08_* | *_backward_*) continue ;; # 08 runs under MPI; the backward stages have their table
        *_cuda) [ -f "steps/$name/${name#??_}.cu" ] || continue ;;
        *) [ -f "steps/$stage/${stage#??_}.cu" ] && [ ! -f "steps/$stage/${stage#??_}.c" ] || continue ;;
        esac
        [ -x "$binary" ] || { echo "  $stage skipped: not built"; continue; }
        run "$stage" "" "--check-against oracle" "$previous" && previous=$stage
    done
fi
echo "errors are relative L2 (worse of o and ht); tolerances: common/tolerances.h"
[ "$failed" = 0 ] || { echo "demo: a stage failed its check (see above)"; exit 1; }
