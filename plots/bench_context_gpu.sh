#!/bin/sh
# bench_context_gpu.sh BIN OUT -- strong scaling of stage 08's GPU twin: one long sequence,
# B=1 H=8 K=V=128, T in TS (default "1048576 4194304:2": 2^20, and 2^22 from 2 GPUs on, since
# it does not fit on one), on 1, 2, 4, ... GPUs of this machine (one rank each), beside stage
# 07 on one GPU in the same run (REPS runs after a warm-up, 5 unless set; device events; the
# slowest rank's phases). Writes OUT (a .dat file headed by the
# machine): T gpus median_ms phase1_ms allgather_ms phase3_ms segments speedup_vs_07
# efficiency. phase1: kernel 1, the fold and the compose; allgather: the exchange through host
# memory, timed after a barrier; phase3: the scan, the replay and kernel 3. speedup_vs_07:
# 07's time on one GPU over this one ("-" where 07 does not fit on one GPU); efficiency: the
# fewest GPUs' time times their count over this time times this count.
set -eu
# shellcheck source=plots/bench_lib.sh
. "$(dirname "$0")/bench_lib.sh"
bin=${1:-bin}
out=${2:-plots/data/context_parallel_gpu.dat}
TS=${TS:-"1048576 4194304:2"} # T[:fewest GPUs]
REPS=${REPS:-5}
gpus=$(nvidia-smi -L | wc -l)
cores=$(nproc)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
{
    echo "# machine: $gpus x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1), $cores CPU cores; Open MPI $(mpirun --version | head -1 | awk '{print $NF}')"
    echo "# made by: sh plots/bench_context_gpu.sh $bin $out (TS=\"$TS\" REPS=$REPS) on $(date -u +%Y-%m-%d)"
    echo "T gpus median_ms phase1_ms allgather_ms phase3_ms segments speedup_vs_07 efficiency"
} > "$out"
shape="--B 1 --H 8 --K 128 --V 128 --reps $REPS --threads $cores"
for spec in $TS; do
    T=${spec%%:*}
    fewest=${spec#*:}
    [ "$fewest" != "$spec" ] || fewest=1
    # stage 07 on one GPU; a problem too large for one GPU is refused with its byte count
    line07=""
    [ "$fewest" -gt 1 ] || line07=$("$bin/07_sequence_parallel" --T "$T" $shape 2>&1 | tail -1)
    ms07=$(field median_ms "$line07")
    [ -n "$ms07" ] || echo "T=$T: stage 07 on one GPU: $line07" >&2
    first=""
    n=$fewest
    while [ "$n" -le "$gpus" ]; do
        line=$(mpirun -np "$n" --bind-to none --mca btl_vader_single_copy_mechanism none \
            -x OMP_NUM_THREADS=$((cores / n)) -x NCCL_NVLS_ENABLE "$bin/08_context_parallel_cuda" --T "$T" \
            --B 1 --H 8 --K 128 --V 128 --reps "$REPS" 2>&1 | tail -1)
        ms=$(field median_ms "$line")
        if [ -z "$ms" ]; then
            echo "T=$T on $n GPUs: $line" >&2
            n=$((n * 2))
            continue
        fi
        [ -n "$first" ] || {
            first=$ms
            first_n=$n
        }
        speedup=-
        [ -z "$ms07" ] || speedup=$(awk -v a="$ms07" -v b="$ms" 'BEGIN { printf "%.2f", a / b }')
        printf '%s %s %s %s %s %s %s %s %s\n' "$T" "$n" "$ms" "$(field phase1_ms "$line")" "$(field allgather_ms "$line")" \
            "$(field phase3_ms "$line")" "$(field segments "$line")" "$speedup" \
            "$(awk -v a="$first" -v m="$first_n" -v b="$ms" -v n="$n" 'BEGIN { printf "%.2f", a * m / (b * n) }')" >> "$out"
        n=$((n * 2))
    done
    [ -z "$ms07" ] || printf '# stage 07 on one GPU at T=%s: %s ms (%s)\n' "$T" "$ms07" "$(field segments "$line07")" >> "$out"
done
cat "$out"
