# shellcheck shell=sh
# bench_lib.sh -- what the benchmark scripts share. Sourced by them (. plots/bench_lib.sh),
# not run on its own; run the scripts from the repository root, as their headers say.

# field NAME LINE: the value of NAME=... in a result line (the first, should there be two)
field() { printf '%s\n' "$2" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -1; }

# gpu_name: the first GPU and its driver ("NVIDIA H200, driver 580.159.04"), for the data
# files' machine line
gpu_name() {
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 | sed 's/, /, driver /' |
        grep . || echo unknown GPU
}

# bench_begin: what every GPU bench script starts with: $work, a scratch folder removed when
# the script exits, and $gpu, the machine line's GPU
# shellcheck disable=SC2034 # work and gpu are the callers' to use
bench_begin() {
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    gpu=$(gpu_name)
}

# gpu_data_header COMMAND COLUMNS: a GPU data file's first lines, after bench_begin: the machine,
# the command that made it (sh plots/COMMAND, today) and the column names
gpu_data_header() {
    echo "# machine: $gpu, $(nproc) CPU cores"
    echo "# made by: sh plots/$1 on $(date -u +%Y-%m-%d)"
    echo "$2"
}

# peak_rates: copy_gbs and mma_tflops (GB/s of copies, TFLOP/s of bf16 tensor products: the
# faster of mma.sync and wgmma where the file has both) from the last line of bin/gpu_peak's
# data file, plots/data/gpu_peak.dat: the rates of the card its header names (rerun bin/gpu_peak
# on another card)
# shellcheck disable=SC2034 # the two are the callers' to read
peak_rates() {
    peak=$(tail -1 "$(dirname "$0")/data/gpu_peak.dat")
    copy_gbs=$(echo "$peak" | awk '{ print $3 }') mma_tflops=$(echo "$peak" | awk '{ print ($6 + 0 > $5 + 0 ? $6 : $5) }')
}
# roofline_ms FLOPS BYTES: the least time (ms) at those rates, after peak_rates: the larger of
# the flops over the tensor rate and the bytes over the copy rate
roofline_ms() {
    awk -v f="$1" -v n="$2" -v bw="$copy_gbs" -v tf="$mma_tflops" \
        'BEGIN { a = f / (tf * 1e9); b = n / (bw * 1e6); printf "%.4f", (a > b ? a : b) }'
}
# fraction A B: A / B with three decimals (nan when B is not a positive time): the fraction of
# the roofline a time reaches, with A its roofline_ms
fraction() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0) printf "%.3f", a / b; else printf "nan" }'; }

# ratio A B: A / B with two decimals (nan when either is not a positive time: a code that did not run)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else printf "nan" }'; }

# fla_times PROBLEM_DIR OURS_DIR REPS: FLA's chunk_gated_delta_rule on that problem in bf16
# (plots/fla_bench.py), into fla_eager and fla_graph (medians, ms) and fla_err (FLA's o against
# the o in OURS_DIR); empty where FLA did not run.
# shellcheck disable=SC2034 # the three are the callers' to read
fla_times() {
    fla_output=$(python3 plots/fla_bench.py --reps "$3" --dtypes bf16 "$1:$2" 2>&1 || true)
    fla_eager=$(field median_ms "$(printf '%s\n' "$fla_output" | grep 'mode=eager')")
    fla_graph=$(field median_ms "$(printf '%s\n' "$fla_output" | grep 'mode=graph')")
    fla_err=$(field err_o_vs_ours "$(printf '%s\n' "$fla_output" | grep 'mode=graph')")
}
