#!/bin/sh
# bench.sh BIN MODE [SWEEP...] -- the benchmark sweeps behind the figures and docs tables.
#   make bench           MODE full: writes plots/data/ (the committed data; make plots then
#                        draws the committed figures from it)
#   make bench QUICK=1   MODE quick: shorter sweeps, fewer repetitions, written to
#                        build/quick/data/, figures drawn from them into build/quick/ with
#                        "quick" in their titles; nothing committed is touched
# Without SWEEP names, every sweep of the figures runs (and, in full mode, the docs' other
# tables: stages_01_04, stages_01_04_05, cpu_goal, backward); with them, those sweeps alone
# (error_sources, about 5 minutes, runs only when named).
# Every point runs one stage binary (median of --reps runs after a warm-up, checked against the
# fp64 oracle) and appends one row to a plain-text data file. Stages too slow or too large for
# a point are written as a row with "skipped: <why>", never left out silently.
set -eu
# shellcheck source=plots/bench_lib.sh
. "$(dirname "$0")/bench_lib.sh"
bin=${1:-bin}
mode=${2:-full}
shift 2 || true
if [ $# -gt 0 ]; then
    sweeps=$*
    made_by="sh plots/bench.sh BIN $mode $sweeps"
else
    sweeps="T K threads segments chunk precision peak"
    [ "$mode" = quick ] || sweeps="$sweeps stages_01_04 stages_01_04_05 cpu_goal backward"
    made_by="make bench"
    [ "$mode" != quick ] || made_by="make bench QUICK=1"
fi
# a quick run's numbers are not the committed measurements: they go under build/
data=plots/data
[ "$mode" != quick ] || data=build/quick/data
mkdir -p "$data"
cores=$(nproc)
cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //; s/ *$//')
[ -n "$cpu" ] || cpu=$(uname -m)
machine="$cpu, $cores cores"

if [ "$mode" = quick ]; then
    lengths="256 1024 4096 16384"; reps=3; long=16384; mid=4096; k_length=1024
    work_limit=4000000000; map_limit=268435456
    echo "bench (quick): about a minute on 2 cores; writing $data/*.dat"
else
    lengths="256 1024 4096 16384 65536"; reps=5; long=65536; mid=16384; k_length=4096
    work_limit=100000000000; map_limit=2147483648
    echo "bench (full): about 3 minutes on 2 cores (AMD EPYC, 2026-11-29); writing $data/*.dat"
fi

columns="stage B T H K V threads option option_value median_ms gflops err_oracle speedup_vs_01"
begin() { # file description
    file="$data/$1.dat"
    {
        echo "# $2"
        echo "# machine: $machine"
        echo "# made by: $made_by, $(date -u +%Y-%m-%d)"
        echo "# speedup_vs_01: stage 01 on 1 thread at the same sizes, divided by this row's median"
        echo "$columns"
    } >"$file"
    baseline=""
}

# skip_reason STAGE T H K V: why a point is not run, or nothing
skip_reason() {
    awk -v s="$1" -v T="$2" -v H="$3" -v K="$4" -v V="$5" -v limit="$work_limit" -v maps="$map_limit" 'BEGIN {
        affine = T * H * 2 * K * K * (K + V)
        if (s ~ /^02_/ && affine > limit) { printf "skipped:work_%.0e_flops", affine; exit }
        if (s ~ /^03_/ && 2 * affine > limit) { printf "skipped:work_%.0e_flops", 2 * affine; exit }
        if (s ~ /^03_/ && T * K * (K + V) * 4 > maps) { printf "skipped:maps_need_%.0f_MiB", T * K * (K + V) * 4 / 1048576; exit }
    }'
}


point=0
# run STAGE T H K V THREADS [OPTION]   (OPTION like --chunk 64)
run() {
    stage=$1 T=$2 H=$3 K=$4 V=$5 threads=$6
    shift 6
    option_name=$(echo "${1:--}" | sed 's/^--//')
    option_value=${2:--}
    option_text=$option_name
    [ "$option_value" = - ] || option_text="$option_name=$option_value"
    point=$((point + 1))
    reason=$(skip_reason "$stage" "$T" "$H" "$K" "$V")
    if [ -n "$reason" ]; then
        echo "$stage 1 $T $H $K $V $threads $option_name $option_value $reason - - -" >>"$file"
        printf '[%3d] %-18s T=%-6s H=%s K=%-3s threads=%-2s %-12s %s\n' "$point" "$stage" "$T" "$H" "$K" "$threads" "$option_text" "$reason"
        return
    fi
    start=$(date +%s.%N)
    if ! line=$("$bin/$stage" --T "$T" --H "$H" --K "$K" --V "$V" --threads "$threads" --reps "$reps" "$@" \
        --check-against oracle 2>"$data/.last_error"); then
        echo "bench: $stage failed: $(cat "$data/.last_error")" >&2
        exit 1
    fi
    ms=$(field median_ms "$line")
    # record the option the stage resolved when none was given (its default chunk or segments)
    for name in chunk segments; do
        value=$(field "$name" "$line")
        if [ -n "$value" ] && [ "$option_name" = - ]; then option_name="$name(default)" option_value=$value; fi
    done
    if [ "$stage" = 01_naive_loop ] && [ "$threads" = 1 ]; then baseline=$ms; fi
    speedup=$(awk -v a="${baseline:-0}" -v b="$ms" 'BEGIN { if (a > 0) printf "%.3f", a / b; else printf "-" }')
    echo "$stage 1 $T $H $K $V $threads $option_name $option_value $ms $(field gflops "$line") $(field err_oracle "$line") $speedup" >>"$file"
    took=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
    printf '[%3d] %-18s T=%-6s H=%s K=%-3s threads=%-2s %-12s %10s ms  x%-7s (point took %s s)\n' "$point" "$stage" "$T" \
        "$H" "$K" "$threads" "$option_text" "$ms" "$speedup" "$took"
}

cpu_stages="01_naive_loop 02_affine 03_parallel_scan 04_two_phase_scan 05_wy_chunked"

sweep_T() {
    for heads in 1 8; do
        begin "sweep_T_H$heads" "T sweep: B=1 H=$heads K=V=64; every stage on all $cores threads, stage 01 also on 1"
        for T in $lengths; do
            run 01_naive_loop "$T" "$heads" 64 64 1
            for stage in $cpu_stages; do run "$stage" "$T" "$heads" 64 64 "$cores"; done
        done
    done
}

sweep_K() {
    begin sweep_K "K sweep: B=H=1 T=$k_length K=V; 1 thread (the work per token: K^2 for 01, K^3 for 02 and 03)"
    for K in 16 32 64 128; do
        for stage in $cpu_stages; do run "$stage" "$k_length" 1 "$K" "$K" 1; done
    done
}

sweep_threads() {
    begin sweep_threads "threads sweep: B=1 T=$mid K=V=64, H=1 (parallel along T only) and H=8"
    for heads in 1 8; do
        run 01_naive_loop "$mid" "$heads" 64 64 1
        threads=1
        while [ "$threads" -le "$cores" ]; do
            for stage in 01_naive_loop 03_parallel_scan 04_two_phase_scan 05_wy_chunked; do
                run "$stage" "$mid" "$heads" 64 64 "$threads"
            done
            threads=$((threads + 1))
        done
    done
}

sweep_segments() {
    begin sweep_segments "segments sweep: stage 04, B=H=1 T=$long K=V=64 on $cores threads"
    run 01_naive_loop "$long" 1 64 64 1
    for P in 1 2 3 4 5 6 8 12 16 17 24 32 33 48 64; do
        [ "$P" -le $((4 * cores + 1)) ] || continue
        run 04_two_phase_scan "$long" 1 64 64 "$cores" --segments "$P"
    done
}

sweep_chunk() {
    begin sweep_chunk "chunk sweep: stage 05, B=1 H=8 T=$mid K=V=64 on 1 thread"
    run 01_naive_loop "$mid" 8 64 64 1
    for C in 1 2 4 8 16 32 64 128; do run 05_wy_chunked "$mid" 8 64 64 1 --chunk "$C"; done
}

sweep_precision() {
    echo "precision study (stage 01 with the state rounded to fp16, bf16, fp32 every token)"
    {
        echo "# machine: $machine"
        echo "# made by: $made_by, $(date -u +%Y-%m-%d)"
        "$bin/precision_study" --T "$long"
    } >"$data/precision.dat"
}

# stage 06's roundings emulated one at a time on the CPU (docs/precision.md); about 5 minutes on
# 2 cores, so run by name only: sh plots/bench.sh bin full error_sources
sweep_error_sources() {
    echo "error sources (stage 06's roundings, emulated in double)"
    {
        echo "# machine: $machine"
        echo "# made by: bin/error_sources, $(date -u +%Y-%m-%d)"
        "$bin/error_sources"
    } >"$data/error_sources.dat"
}

sweep_peak() {
    echo "fma peak and stage 05's chunk products, one thread:"
    {
        echo "# machine: $machine"
        echo "# made by: $made_by, $(date -u +%Y-%m-%d)"
        "$bin/fma_peak"
    } | tee "$data/fma_peak.dat"
}

# stages 01-04 at K = V = 16, 32, 64, T = 4096, B = H = 1, on 1 and 2 threads, in one run
sweep_stages_01_04() {
    begin stages_01_04 "stages 01-04: B=H=1 T=4096, K=V in 16 32 64, 1 and 2 threads"
    for K in 16 32 64; do
        for threads in 1 2; do
            for stage in 01_naive_loop 02_affine 03_parallel_scan 04_two_phase_scan; do
                run "$stage" 4096 1 "$K" "$K" "$threads"
            done
        done
    done
}

# stages 01, 04, 05 at the seed article's shape and at K = V = 128, 1 and 2 threads
sweep_stages_01_04_05() {
    begin stages_01_04_05 "stages 01, 04, 05: B=1 T=16384 H=8 K=V=64 and B=1 T=4096 H=2 K=V=128, 1 and 2 threads"
    for shape in "16384 8 64" "4096 2 128"; do
        # shellcheck disable=SC2086 # the shape is three words
        set -- $shape
        for threads in 1 2; do
            for stage in 01_naive_loop 04_two_phase_scan 05_wy_chunked; do
                run "$stage" "$1" "$2" "$3" "$3" "$threads"
            done
        done
    done
}

# the backward stages: 09 and 10 at every chunk size from 16, beside stage 01's forward (its
# speedup_vs_01 is then the forward's time over the backward's), 1 and 2 threads
sweep_backward() {
    begin backward_cpu "backward stages 09, 10: B=1 T=4096 H=8 K=V=64 and B=1 T=4096 H=2 K=V=128, 1 and 2 threads; B=1 T=16384 H=8 K=V=64 on all cores"
    # this machine's FMA peak and matmul_add's rate on one chunk's products, beside the times
    echo "# $("$bin/fma_peak")" >>"$file"
    for shape in "8 64" "2 128"; do
        # shellcheck disable=SC2086 # the shape is two words
        set -- $shape
        for threads in 1 2; do
            run 01_naive_loop 4096 "$1" "$2" "$2" "$threads"
            run 09_backward_loop 4096 "$1" "$2" "$2" "$threads"
            for C in 16 32 64 128; do run 10_backward_chunked 4096 "$1" "$2" "$2" "$threads" --chunk "$C"; done
        done
    done
    # the README's shape, all cores
    run 01_naive_loop 16384 8 64 64 1
    for stage in 01_naive_loop 09_backward_loop 10_backward_chunked; do run "$stage" 16384 8 64 64 "$cores"; done
}

# the stage 04 goal on a many-core CPU: B = H = 1, T = 65536, K = V = 64, all cores
sweep_cpu_goal() {
    begin "cpu_goal_${cores}cores" "stage 04 on $cores cores: B=H=1 T=65536 K=V=64; 01 on 1 and on $cores threads; 05 too"
    run 01_naive_loop 65536 1 64 64 1
    run 01_naive_loop 65536 1 64 64 "$cores"
    for P in $((cores / 2)) "$cores" $((cores + 1)) $((2 * cores + 1)); do
        run 04_two_phase_scan 65536 1 64 64 "$cores" --segments "$P"
    done
    run 05_wy_chunked 65536 1 64 64 1
    # the machine's own ceiling: independent heads, one per thread, need no communication at all
    run 01_naive_loop 4096 "$cores" 64 64 1
    run 01_naive_loop 4096 "$cores" 64 64 "$cores"
}

for sweep in $sweeps; do
    "sweep_$sweep"
done
rm -f "$data/.last_error"
if [ "$mode" != quick ]; then
    echo "bench: done; make plots renders the figures from $data"
elif command -v gnuplot > /dev/null 2>&1; then
    sh "$(dirname "$0")/render.sh" "$data" build/quick quick
    echo "bench: done; the quick figures are in build/quick/ (make plots draws the committed ones)"
else
    echo "bench: done; no gnuplot, so no quick figures (make plots installs it)"
fi
