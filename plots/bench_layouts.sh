#!/bin/sh
# bench_layouts.sh BIN OUTDIR [GROUPS] -- our picked stage against every public GDN forward in the
# layouts real models use, side by side in one run on the same bf16 inputs: FLA's Triton
# chunk_gated_delta_rule, FlashInfer's GDN prefill (CuTe DSL, exact; its context parallelism as
# users get it) and FlashQLA's TileLang kernels, twice: as users get them (`flashqla`: its
# automatic context parallelism on, which starts a cut piece after warm-up chunks, not exact)
# and exact (`flashqla_exact`: that cut off, one chain a head), each replayed from a CUDA graph
# (plots/fla_bench.py), beside our stage's binary and the same stage through the Python package
# (CUDA graph too; a packed batch given cu_seqlens_cpu, so that the graph never waits).
#
# GROUPS (comma-separated; default all of them), each its own data file OUTDIR/layouts_GROUP.dat:
#   ours    the K = V = 128 shapes of docs/06 and docs/07, grouped value heads (4096 x 8 with 4 key
#           and 16 value heads, 1 x 32768 with 2 and 8), a packed batch (28672 + 4096) and
#           K = V = 64, where only FLA and we run
#   tp8 tp4 tp2 tp1   the rows of FlashQLA's published H200 forward table (QwenLM/FlashQLA,
#           benchmark/benchmark_results_H200.txt, "FORWARD BENCHMARKS") for Qwen3.5-397B/122B at
#           tensor parallelism 8, 4, 2, 1 (key heads 2, 4, 8, 16; value heads 8, 16, 32, 64): one
#           sequence of 2048 to 32768 tokens, two packed sequences of 4096 to 32768 tokens in all,
#           and 4 or 8 equal sequences, K = V = 128
#   35b     the same rows for Qwen3.5-35B/9B/4B at tensor parallelism 1 (16 key, 32 value heads)
# A packed batch runs on 06 or 07, the stage picked for its rows padded to the longest sequence.
# ROWS (optional, space-separated row names such as "8x4096 1x65536"): only those rows, e.g. to
# finish a group whose run was cut short. A group's file then holds those rows alone (merge them
# with the earlier run's by hand), and a group with none of them keeps its file as it is; a name
# that is no row of the groups asked for stops the script before anything runs.
#
#   sh plots/bench_layouts.sh bin plots/data [tp8]   (a CUDA device, PyTorch, FLA, FlashInfer,
#                     flash-qla, the package importable: pip install --target build/python .)
#
# A row: shape, sequences (rows or packed ones), tokens (all of them), H HV K V, stage, then times in ms (medians: the binary's of 20 after a
# warm-up, CUDA events, L2 flushed; the package's and the peers' of 30, the same way), the
# peers' times over ours, and err_*: each o against our binary's (relative L2), proof of the
# same inputs. nan: that code does not run the shape (its result line in the log says why).
# eager: the peers whose call a CUDA graph cannot capture at that row (it reads a packed batch's
# offsets on the host), timed eagerly instead, launches included; - where every time is a replay.
# The roofline (plots/bench_lib.sh): floor_ms, the least time at the rates in
# plots/data/gpu_peak.dat (bin/gpu_peak on the card its header names: rerun it on another
# card), the larger of the flops (stage 06's count: the problem's, the same for every method;
# 07's own count adds its fold's) over the tensor rate and the least bytes over the copy rate: q and k (bf16, a
# key head's), v (bf16), g and beta (fp32) read once, o (bf16) and ht (fp32) written once; roof_*
# is floor_ms over each time, the fraction of the roofline reached.
# The figure of the ours group: plots/layouts.gp (make plots draws it where the file is).
# The peers are imported and tuned once a group: one fla_bench.py process serves its rows
# (--serve), each problem's files made before its row and removed after it.
set -eu
# shellcheck source=plots/bench_lib.sh
. "$(dirname "$0")/bench_lib.sh"
bin=${1:-bin}
out=${2:-plots/data}
groups=${3:-ours,tp8,tp4,tp2,tp1,35b}
bench_begin
peak_rates
# time_of RUNS PEER: the peer's graph replay time, or where its call cannot be captured (it reads
# the offsets of a packed batch on the host) its eager time, and then the peer's name in $eager
time_of() {
    graph=$(field median_ms "$(printf '%s\n' "$1" | grep "peer=$2 mode=graph" | head -1)")
    [ -n "$graph" ] && { echo "$graph"; return; }
    printf '%s\n' "$1" | grep -q "peer=$2 mode=eager" && echo "$2" >> "$work/eager"
    field median_ms "$(printf '%s\n' "$1" | grep "peer=$2 mode=eager" | head -1)"
}
err_of() { field err_o_vs_ours "$(printf '%s\n' "$1" | grep "peer=$2 mode=" | head -1)"; }

# the rows of a group, one a line: name sequences H HV K V. sequences: "8*4096", B = 8 rows of
# 4096 tokens; "32768", one; "28672,4096", a packed batch of those lengths; "8192x4", a packed
# batch of four sequences of 8192 tokens (FlashQLA's table packs every row of several sequences)
rows_of() {
    case $1 in
    ours)
        printf '%s\n' "8x4096 8*4096 16 16 128 128" "4x4096 4*4096 64 64 128 128" "1x8192 8192 96 96 128 128" \
            "2x16384 2*16384 16 16 128 128" "1x65536 65536 8 8 128 128" "4096x8,gva 8*4096 4 16 128 128" \
            "1x32768,gva 32768 2 8 128 128" "28672+4096 28672,4096 2 8 128 128" "1x16384,k64 16384 8 8 64 64"
        return ;;
    tp8) heads="2 8" ;;
    tp4) heads="4 16" ;;
    tp2) heads="8 32" ;;
    tp1) heads="16 64" ;;
    35b) heads="16 32" ;;
    *) echo "bench_layouts.sh: no group '$1' (ours, tp8, tp4, tp2, tp1, 35b)" >&2; exit 1 ;;
    esac
    for sequences in 32768 16384 8192 4096 2048 28672,4096 24576,8192 16384,16384 8192,24576 4096,28672 \
        12288,4096 6144,2048 4096,4096 2048,6144 1024,7168 8192x4 4096x8 2048x4 1024x8; do
        echo "$(echo "$sequences" | tr ',' '+' | sed 's/^\([0-9]*\)$/1x\1/') $sequences $heads 128 128"
    done
}
# the group's rows that ROWS names (all of them where ROWS is empty)
selected_rows() {
    rows_of "$1" | while read -r name rest; do
        case " ${ROWS:-$name} " in *" $name "*) echo "$name $rest" ;; esac
    done
}
# sizes_of SEQUENCES: sets sizes (make_problem's --B and --T, or --lengths), N (rows or
# sequences), longest and tokens (all of them)
sizes_of() {
    case $1 in
    *\**) N=${1%\**} longest=${1#*\*} tokens=$((${1%\**} * ${1#*\*})) sizes="--B $N --T $longest"; return ;;
    *x*) n=${1#*x} l=${1%x*} all=$l; i=1; while [ "$i" -lt "$n" ]; do all="$all,$l"; i=$((i + 1)); done ;;
    *) all=$1 ;;
    esac
    N=$(echo "$all" | tr ',' '\n' | wc -l) longest=$(echo "$all" | tr ',' '\n' | sort -n | tail -1)
    tokens=$(echo "$all" | tr ',' '\n' | awk '{ s += $1 } END { print s }')
    if [ "$N" -eq 1 ]; then sizes="--B 1 --T $tokens"; else sizes="--lengths $all"; fi
}

for wanted in ${ROWS:-}; do
    found=""
    for group in $(echo "$groups" | tr ',' ' '); do
        rows_of "$group" > /dev/null # an unknown group stops here, before anything runs
        rows_of "$group" | awk -v name="$wanted" '$1 == name { found = 1 } END { exit !found }' && found=1
    done
    [ -n "$found" ] || { echo "bench_layouts.sh: ROWS names '$wanted', which is no row of $groups" >&2; exit 1; }
done
for group in $(echo "$groups" | tr ',' ' '); do
    rows_of "$group" > /dev/null # an unknown group stops here, before anything runs
    [ -n "$(selected_rows "$group")" ] || continue # none of ROWS: the group's file stays as it is
    data=$out/layouts_$group.dat
    gpu_data_header "bench_layouts.sh $bin $out $group" "shape sequences tokens H HV K V stage ms_binary ms_package ms_fla ms_flashinfer ms_flashqla ms_flashqla_exact fla/ours flashinfer/ours flashqla/ours flashqla_exact/ours err_package err_fla err_flashinfer err_flashqla err_flashqla_exact floor_ms roof_binary roof_package roof_fla roof_flashinfer roof_flashqla roof_flashqla_exact eager" > "$data"
    # one bench process for the group's rows, fed through a pipe as the rows' problems are made
    rm -f "$work/to_bench" "$work/from_bench"
    mkfifo "$work/to_bench" "$work/from_bench"
    python3 plots/fla_bench.py --reps 30 --dtypes bf16 --peers gdn_steps,fla,flashinfer,flashqla,flashqla_exact --serve \
        < "$work/to_bench" > "$work/from_bench" &
    exec 3> "$work/to_bench" 4< "$work/from_bench"
    # the stage the package picks for each row (for a packed batch, that of its rows padded to
    # the longest sequence), asked of one Python process for the group
    selected_rows "$group" | while read -r name sequences H HV K V; do
        sizes_of "$sequences"
        echo "$N $longest $H $HV $K $V"
    done | python3 -c "
import sys, gdn_steps
for line in sys.stdin:
    N, longest, H, HV, K, V = map(int, line.split())
    print(gdn_steps.gpu_stage_for(N, longest, H, K, V, HV=HV))" > "$work/stages"
    selected_rows "$group" | paste -d ' ' - "$work/stages" | while read -r name sequences H HV K V stage; do
        sizes_of "$sequences"
        # shellcheck disable=SC2086 # the sizes are words
        "$bin"/make_problem $sizes --H "$H" --HV "$HV" --K "$K" --V "$V" --seed 7 "$work/p" > /dev/null
        # ours: the binary (a shape it refuses: then FLA's o is the reference for the errors)
        binary=$("$bin/$stage" --in "$work/p" --reps 20 --out "$work/o" 2>&1 | grep '^result' || true)
        ms_binary=$(field median_ms "$binary")
        # the roofline's flops are the problem's, as stage 06 counts them: 07's count adds its fold's
        counted=$binary
        [ "${stage%%_*}" = 06 ] || counted=$("$bin/06_warp_specialized" --in "$work/p" --reps 1 2>&1 | grep '^result' || true)
        flops=$(awk -v g="$(field gflops "$counted")" -v ms="$(field median_ms "$counted")" 'BEGIN { printf "%.0f", g * ms * 1e6 }')
        bytes=$((tokens * (4 * H * K + 4 * HV * V + 8 * HV) + N * HV * K * V * 4))
        floor=nan
        [ -n "$ms_binary" ] && floor=$(roofline_ms "$flops" "$bytes")
        [ -n "$ms_binary" ] || { printf '%s: %s\n' "$name" "$("$bin/$stage" --in "$work/p" --reps 1 2>&1 | tail -1)" >&2; rm -rf "$work/o"; }
        reference=$work/p
        [ -d "$work/o" ] && reference="$work/p:$work/o"
        echo "$reference" >&3
        runs=""
        while IFS= read -r line <&4; do
            case $line in "done "*) break ;; esac
            runs="$runs$line
"
        done
        printf '%s' "$runs" | grep 'error=' >&2 || true
        : > "$work/eager"
        package=$(time_of "$runs" gdn_steps) fla=$(time_of "$runs" fla_chunk) fi=$(time_of "$runs" flashinfer) qla=$(time_of "$runs" flashqla) qla_exact=$(time_of "$runs" flashqla_exact)
        eager=$(paste -s -d , "$work/eager")
        ours=${ms_binary:-0}
        e_package=$(err_of "$runs" gdn_steps) e_fla=$(err_of "$runs" fla_chunk) e_fi=$(err_of "$runs" flashinfer) e_qla=$(err_of "$runs" flashqla) e_qla_exact=$(err_of "$runs" flashqla_exact)
        echo "$name $N $tokens $H $HV $K $V ${stage%%_*} ${ms_binary:-nan} ${package:-nan} ${fla:-nan} ${fi:-nan} ${qla:-nan} ${qla_exact:-nan}" \
            "$(ratio "${fla:-0}" "$ours") $(ratio "${fi:-0}" "$ours") $(ratio "${qla:-0}" "$ours") $(ratio "${qla_exact:-0}" "$ours")" \
            "${e_package:--} ${e_fla:--} ${e_fi:--} ${e_qla:--} ${e_qla_exact:--} $floor $(fraction "$floor" "${ms_binary:-nan}")" \
            "$(fraction "$floor" "${package:-nan}") $(fraction "$floor" "${fla:-nan}") $(fraction "$floor" "${fi:-nan}") $(fraction "$floor" "${qla:-nan}") $(fraction "$floor" "${qla_exact:-nan}")" \
            "${eager:--}" >> "$data"
        rm -rf "$work/p" "$work/o"
    done
    exec 3>&- 4<&-
    wait
    cat "$data"
done
