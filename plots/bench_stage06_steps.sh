#!/bin/sh
# bench_stage06_steps.sh OUTDIR -- stage 06 step by step, in one run on one machine: each step's
# code (plots/stage06_steps.list) taken from its commit by git
# archive, built side by side, and timed at two shapes on the same inputs, beside FLA's Triton
# chunk_gated_delta_rule replayed from a CUDA graph. One machine and one run for every step, so
# that the steps' times compare with each other.
#
#   sh plots/bench_stage06_steps.sh plots/data     (from a git clone, on a machine with a CUDA
#                                                   device and FLA; about five minutes)
#
# Writes OUTDIR/stage06_steps.dat: a row a step, its time the median of two rounds' medians (of
# 20 runs each, after a warm-up, CUDA events, L2 flushed), and its o against the last step's
# (err_vs_last: 0 where a step changed no arithmetic; about 3e-3 where the rounding differs).
set -eu
# shellcheck source=plots/bench_lib.sh
. "$(dirname "$0")/bench_lib.sh"
out=${1:-plots/data}
# step:commit, the commit where each step was complete (plots/stage06_steps.list)
steps=$(awk '!/^#/ && NF == 2 { printf "%s%s:%s", (n++ ? " " : ""), $1, $2 }' "$(dirname "$0")/stage06_steps.list")
shapes="8_4096_16_128_128 1_16384_8_64_64"
# the reference output: the last step's (the list's last entry, so that adding a step moves it)
last=${steps##*[[:space:]]}
last=${last%%:*}
git rev-parse --git-dir > /dev/null 2>&1 || { echo "bench_stage06_steps.sh: needs a git clone (it builds each step's commit)" >&2; exit 1; }
bench_begin
make bin/make_problem > /dev/null
for step in $steps; do # every step built at once: each is its own tree
    n=${step%%:*}
    mkdir -p "$work/s$n"
    git archive "${step#*:}" steps common Makefile tests | tar -x -C "$work/s$n"
    (cd "$work/s$n" && make bin/06_warp_specialized > build.log 2>&1) || echo "step $n (${step#*:}) did not build: $work/s$n/build.log" >&2 &
done
wait
for shape in $shapes; do
    # shellcheck disable=SC2046 # the shape is five words
    set -- $(echo "$shape" | tr _ ' ')
    bin/make_problem --B "$1" --T "$2" --H "$3" --K "$4" --V "$5" --seed 7 "$work/p_$shape" > /dev/null
    "$work/s$last/bin/06_warp_specialized" --in "$work/p_$shape" --reps 1 --out "$work/o_$shape" > /dev/null
    fla_times "$work/p_$shape" "$work/o_$shape" 30
    echo "$fla_graph" > "$work/fla_$shape"
done
for _round in 1 2; do
    for shape in $shapes; do
        for step in $steps; do
            n=${step%%:*}
            line=$("$work/s$n/bin/06_warp_specialized" --in "$work/p_$shape" --reps 20 --check-against "$work/o_$shape")
            echo "$n $(field median_ms "$line") $(field err_ref "$line")" >> "$work/t_$shape"
        done
    done
done
rows=$out/stage06_steps.dat
{
    echo "# machine: $gpu, $(nproc) CPU cores"
    echo "# made by: sh plots/bench_stage06_steps.sh $out on $(date -u +%Y-%m-%d), at $(git rev-parse --short HEAD)"
    echo "step commit ms_8_4096_16_128_128 ms_1_16384_8_64_64 fla_graph_8_4096_16_128_128 fla_graph_1_16384_8_64_64 err_vs_last_8_4096_16_128_128 err_vs_last_1_16384_8_64_64"
} > "$rows"
median2() { # the two rounds' times of step $1 at shape $2, averaged (the median of two)
    awk -v n="$1" '$1 == n { s += $2; c++ } END { printf "%.4f", s / c }' "$work/t_$2"
}
error_of() { awk -v n="$1" '$1 == n { e = $3 } END { print e }' "$work/t_$2"; }
# shellcheck disable=SC2086 # two words, the shapes
set -- $shapes
for step in $steps; do
    n=${step%%:*}
    echo "$n ${step#*:} $(median2 "$n" "$1") $(median2 "$n" "$2") $(cat "$work/fla_$1") $(cat "$work/fla_$2") $(error_of "$n" "$1") $(error_of "$n" "$2")" >> "$rows"
done
cat "$rows"
