#!/bin/sh
# bench_mpi.sh BIN OUT -- strong scaling of stage 08: one long sequence (B=1 H=8 K=V=64,
# T=2^20 unless T is set; REPS runs after a warm-up, 3 unless set), ranks 1, 2, 4, ... up to the cores here, one thread per rank.
# Writes OUT (a .dat file headed by the machine): ranks median_ms phase1_ms exscan_ms phase3_ms
# speedup_vs_1_rank summary_bytes. phase1 is the fold (rank 0: its replay), exscan the one
# collective (after a barrier, so it is communication, not waiting), phase3 the replay.
set -eu
# shellcheck source=plots/bench_lib.sh
. "$(dirname "$0")/bench_lib.sh"
bin=${1:-bin}
out=${2:-plots/data/mpi_scaling.dat}
T=${T:-1048576}
REPS=${REPS:-3} # medians of REPS runs after one warm-up run
cores=$(nproc)
# Physical cores: one rank per core while they last, then one per hardware thread.
physical=$(lscpu -p=core,socket 2>/dev/null | grep -v '^#' | sort -u | wc -l)
[ "$physical" -gt 0 ] || physical=$cores
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
{
    echo "# machine: $cpu, $cores hardware threads on $physical cores; Open MPI $(mpirun --version | head -1 | awk '{print $NF}')"
    echo "# made by: sh plots/bench_mpi.sh $bin $out (T=$T REPS=$REPS) on $(date -u +%Y-%m-%d)"
    echo "ranks median_ms phase1_ms exscan_ms phase3_ms speedup_vs_1_rank summary_bytes"
} > "$out"
ranks=1
base=""
while [ "$ranks" -le "$cores" ]; do
    binding="--bind-to core"
    [ "$ranks" -le "$physical" ] || binding="--use-hwthread-cpus --bind-to hwthread"
    # shellcheck disable=SC2086 # $binding is two words on purpose
    line=$(mpirun -np "$ranks" $binding --mca btl_vader_single_copy_mechanism none \
        "$bin/08_context_parallel" --B 1 --T "$T" --H 8 --K 64 --V 64 --threads 1 --reps "$REPS")
    ms=$(field median_ms "$line")
    [ -n "$base" ] || base=$ms
    printf '%s %s %s %s %s %s %s\n' "$ranks" "$ms" "$(field phase1_ms "$line")" "$(field exscan_ms "$line")" \
        "$(field phase3_ms "$line")" "$(ratio "$base" "$ms")" \
        "$(field summary_bytes "$line")" >> "$out"
    ranks=$((ranks * 2))
done
cat "$out"
