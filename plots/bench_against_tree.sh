#!/bin/sh
# bench_against_tree.sh BIN OUTDIR TREE -- stages 06 and 07 of another source tree beside this
# tree's, in one run on one machine: the same inputs, the outputs compared byte for byte, the
# times alternating. For a change that must keep the arithmetic and the speed (code moved
# between files, a stage cut into sub-stages): it shows both, where a unit test cannot time.
#
#   git archive COMMIT | tar -x -C /tmp/tree      (any tree: a commit, a release, a colleague's)
#   sh plots/bench_against_tree.sh bin plots/data /tmp/tree    (on a machine with a CUDA device)
#
# Builds TREE's bin/06_warp_specialized and bin/07_sequence_parallel (make, in TREE), then at
# each of the shapes below writes one row to OUTDIR/against_tree.dat: the two trees' times, each
# the median of three rounds' medians (of 20 runs after a warm-up, CUDA events, L2 flushed; the
# rounds alternate the trees, so drift in the card's clocks falls on both), their ratio, and
# same_bits: 1 where o and ht are the same bytes in both trees (h0 given). Then the same for
# three packed batches (two sequences of 28672 + 4096 and of 1024 + 7168 tokens with 2 key and 8
# value heads, six of 300 to 8000 with 4 and 16; K = V = 128) into OUTDIR/against_tree_packed.dat,
# where TREE's stages take --lengths (a comment line says so where they do not).
set -eu
# shellcheck source=plots/bench_lib.sh
. "$(dirname "$0")/bench_lib.sh"
bin=${1:-bin}
out=${2:-plots/data}
tree=${3:?usage: bench_against_tree.sh BIN OUTDIR TREE}
for stage in 06_warp_specialized 07_sequence_parallel make_problem; do
    [ -x "$bin/$stage" ] || { echo "bench_against_tree.sh: $bin/$stage is missing (make all)" >&2; exit 1; }
done
(cd "$tree" && make bin/06_warp_specialized bin/07_sequence_parallel > build.log 2>&1) ||
    { echo "bench_against_tree.sh: $tree did not build: $tree/build.log" >&2; exit 1; }
bench_begin
rows=$out/against_tree.dat
gpu_data_header "bench_against_tree.sh $bin $out $tree" "stage B T H K V ms_tree ms_this tree/this same_bits" > "$rows"
median3() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
# compare STAGE FILE COLUMNS: the two trees' STAGE on the problem in $work/p, o and ht compared
# byte for byte, then three rounds alternating the trees; one row into FILE: STAGE, COLUMNS
# (the problem's), the two median-of-three times, their ratio and same_bits
compare() {
    "$tree/bin/$1" --in "$work/p" --reps 1 --out "$work/tree" > /dev/null
    "$bin/$1" --in "$work/p" --reps 1 --out "$work/this" > /dev/null
    same=1
    for f in o ht; do cmp -s "$work/tree/$f.npy" "$work/this/$f.npy" || same=0; done
    t1='' t2=''
    for _round in 1 2 3; do
        t1="$t1 $(field median_ms "$("$tree/bin/$1" --in "$work/p" --reps 20)")"
        t2="$t2 $(field median_ms "$("$bin/$1" --in "$work/p" --reps 20)")"
    done
    # shellcheck disable=SC2086 # three times each
    m1=$(median3 $t1) m2=$(median3 $t2)
    echo "$1 $3 $m1 $m2 $(ratio "$m1" "$m2") $same" >> "$2"
    rm -rf "$work/p" "$work/tree" "$work/this"
}
for case in 06_warp_specialized:8_4096_16_128_128 06_warp_specialized:1_8192_96_128_128 \
    06_warp_specialized:4_4096_64_128_128 06_warp_specialized:2_16384_16_128_128 \
    06_warp_specialized:1_16384_8_64_64 07_sequence_parallel:1_65536_8_128_128 \
    07_sequence_parallel:1_16384_1_64_64; do
    # shellcheck disable=SC2046 # the shape is five words
    set -- $(echo "${case#*:}" | tr _ ' ')
    "$bin"/make_problem --B "$1" --T "$2" --H "$3" --K "$4" --V "$5" --seed 7 --h0 "$work/p" > /dev/null
    compare "${case%%:*}" "$rows" "$*"
done
cat "$rows"
packed=$out/against_tree_packed.dat
gpu_data_header "bench_against_tree.sh $bin $out $tree" "stage lengths H HV K V ms_tree ms_this tree/this same_bits" > "$packed"
if ! "$tree/bin/06_warp_specialized" --help 2>&1 | grep -q -- --lengths; then
    echo "# $tree's stages take no packed batch (no --lengths in their --help): no rows" >> "$packed"
    cat "$packed"
    exit 0
fi
for case in 06_warp_specialized:28672,4096:2:8 07_sequence_parallel:28672,4096:2:8 06_warp_specialized:1024,7168:2:8 \
    07_sequence_parallel:1024,7168:2:8 06_warp_specialized:4096,4096,2048,1000,300,8000:4:16 \
    07_sequence_parallel:4096,4096,2048,1000,300,8000:4:16; do
    # shellcheck disable=SC2046 # stage, lengths, H, HV
    set -- $(echo "$case" | tr : ' ')
    "$bin"/make_problem --lengths "$2" --H "$3" --HV "$4" --K 128 --V 128 --seed 7 --h0 "$work/p" > /dev/null
    compare "$1" "$packed" "$(echo "$2" | tr , +) $3 $4 128 128"
done
cat "$packed"
