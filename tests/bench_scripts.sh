#!/bin/sh
# bench_scripts.sh -- the GPU bench scripts run end to end against stand-ins, on any machine.
#
# A GPU bench script runs for minutes on a GPU and writes its data file at the end; a slip in
# its shell (an assignment from a failing $( ) under set -e, a column left out of a row) would
# cost that time and leave no data. Here each script runs with stand-ins first on the PATH:
# bin/ binaries that print a `result ... median_ms=... gflops=...` line (make_problem makes its
# folder); a python3 that answers as plots/fla_bench.py and plots/fla_backward_bench.py do
# (every peer runs; --serve answers each problem, then `done PROBLEM`), as the package's
# gpu_stage_for and as plots/kernel_times.py; an nvidia-smi and an ncu. Each script must exit 0
# and write every data file it names, each row with as many fields as its header line, and no
# ratio column 0 (the stand-ins' times are all positive). The numbers mean nothing: this checks
# the scripts, not the code they time. The two that need MPI or git history
# (bench_context_gpu.sh, bench_stage06_steps.sh) are not run; bench_against_tree.sh builds a
# stand-in tree.
#
#     sh tests/bench_scripts.sh      (make test runs it)
set -u
cd "$(dirname "$0")/.." || exit 1
stand=$(mktemp -d)
trap 'rm -rf "$stand"' EXIT
mkdir -p "$stand/bin" "$stand/path"

# the binaries: a result line, the --out folder made; make_problem makes its problem folder
for name in make_problem 01_naive_loop_cuda 03_parallel_scan_cuda 04_two_phase_scan_cuda 05_wy_chunked_cuda 06a_tensor_cores 06b_producer_consumer 06c_bulk_copies \
    06d_warp_chain 06e_output_warps 06_warp_specialized 07_sequence_parallel 10_backward_chunked_cuda \
    11a_backward_mma_sync 11_backward_tensor_cores 12_backward_fused 13_backward_states; do
    # 07 counts its fold's flops too: far more than 06's count of the same problem
    gflops=100; [ "$name" = 07_sequence_parallel ] && gflops=1000000
    # 13 apart from 12, so that its own column is seen to hold its own time
    ms=0.5; [ "$name" = 13_backward_states ] && ms=0.25
    cat > "$stand/bin/$name" << EOF
#!/bin/sh
if [ "$name" = make_problem ]; then for last; do :; done; mkdir -p "\$last"; exit 0; fi
[ "\$1" = --help ] && { echo "  --lengths L1,L2,...  a packed batch"; exit 0; }
while [ \$# -gt 0 ]; do [ "\$1" = --out ] && mkdir -p "\$2"; shift; done
echo "result stage=$name median_ms=$ms gflops=$gflops"
EOF
done
cat > "$stand/path/nvidia-smi" << 'EOF'
#!/bin/sh
echo "Stand-in GPU, 1.0"
EOF
cat > "$stand/path/ncu" << 'EOF'
#!/bin/sh
echo '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'
EOF
# python3: the package's pick, and the two peer scripts' result lines for every peer asked
cat > "$stand/path/python3" << 'EOF'
#!/bin/sh
if [ "$1" = -c ]; then
    # the package's pick: 07 for one sequence of 65536 tokens or more, else 06
    case $2 in
    *sys.stdin*) while read -r n longest _; do
        if [ "$n" = 1 ] && [ "$longest" -ge 65536 ]; then echo 07_sequence_parallel; else echo 06_warp_specialized; fi
    done ;;
    *) echo 06_warp_specialized ;;
    esac
    exit 0
fi
case $1 in *kernel_times.py) cat > /dev/null; echo "1.0 - - 2.0 3.0"; exit 0 ;; esac
script=$1 peers=fla serve=0 previous=""
for argument; do
    [ "$previous" = --peers ] && peers=$argument
    [ "$argument" = --serve ] && serve=1
    previous=$argument
done
answer() {
    for peer in $(echo "$peers" | tr ',' ' '); do
        case $script in
        *fla_backward_bench.py)
            for mode in backward forward_backward; do
                echo "result peer=$peer mode=$mode dtype=bf16 median_ms=2.0 err_dq_vs_ours=1e-3 err_dv_vs_ours=1e-3"
                echo "result peer=$peer mode=${mode}_graph dtype=bf16 median_ms=1.5 err_dq_vs_ours=1e-3 err_dv_vs_ours=1e-3 graph_vs_eager=0.000e+00"
            done ;;
        *)
            name=$peer; [ "$peer" = fla ] && name=fla_chunk
            # served (bench_layouts.sh): FlashQLA's call refuses the CUDA graph, as a call that
            # reads a packed batch's offsets on the host does, so it is timed eagerly
            if [ "$serve" = 1 ] && [ "$peer" = flashqla ]; then
                echo "result peer=$name mode=graph dtype=bf16 error=RuntimeError: capture invalidated"
                echo "result peer=$name mode=eager dtype=bf16 median_ms=1.5 err_o_vs_ours=1e-3"
                continue
            fi
            for mode in eager graph; do echo "result peer=$name mode=$mode dtype=bf16 median_ms=1.0 err_o_vs_ours=1e-3"; done ;;
        esac
    done
}
if [ "$serve" = 1 ]; then
    while read -r problem; do answer; echo "done $problem"; done
else
    answer
fi
EOF
chmod +x "$stand/bin/"* "$stand/path/"*

failures=0 passed=""
fail() { echo "bench_scripts: $*"; failures=$((failures + 1)); }
# run SCRIPT DATA_FILE... [-- ARGUMENTS]: the script against the stand-ins, then its data files checked
run() {
    script=$1; shift
    files=""
    while [ $# -gt 0 ] && [ "$1" != -- ]; do files="$files $1"; shift; done
    [ $# -gt 0 ] && shift
    out=$stand/out_$(basename "$script" .sh)
    mkdir -p "$out"
    before=$failures
    if ! PATH="$stand/path:$PATH" sh "plots/$script" "$stand/bin" "$out" "$@" > "$out/log" 2>&1; then
        last=$(tail -1 "$out/log")
        fail "$script exited with an error (${last:-and printed nothing})"
        return
    fi
    for file in $files; do
        [ -f "$out/$file" ] || { fail "$script wrote no $file"; continue; }
        problem=$(awk '/^#/ { next } !columns { columns = NF; next } NF != columns { print "row " NR " has " NF " fields, the header " columns; exit }
            { rows++ } END { if (!rows) print "no rows" }' "$out/$file")
        [ -z "$problem" ] || fail "$script, $file: $problem"
        zero=$(awk '/^#/ { next } !header { for (i = 1; i <= NF; i++) if ($i ~ /\//) ratio[i] = $i; header = 1; next }
            { for (i in ratio) if ($i == "0" || $i == "0.00") { print ratio[i] " is 0 in row " NR; exit } }' "$out/$file")
        [ -z "$zero" ] || fail "$script, $file: $zero"
    done
    [ "$failures" -gt "$before" ] || passed="$passed $script"
}
run bench_stage06_series.sh stage06_series.dat stage06_series_k64.dat
run bench_stage06.sh stage06_vs_fla.dat
run bench_peers.sh peers.dat
run bench_python.sh python_bench.dat
run bench_backward_gpu.sh backward_gpu.dat
# expect_columns EXPECTED COLUMN...: backward_gpu.dat's first row holds EXPECTED in those columns
expect_columns() {
    expected=$1
    shift
    got=$(awk -v names="$*" '/^#/ { next } !header { for (i = 1; i <= NF; i++) column[$i] = i; header = 1; next }
        { n = split(names, name, " "); for (j = 1; j <= n; j++) printf "%s%s", (j > 1 ? " " : ""), $column[name[j]]; print ""; exit }' \
        "$stand/out_bench_backward_gpu/backward_gpu.dat" 2>&1)
    [ "$got" = "$expected" ] || fail "bench_backward_gpu.sh, backward_gpu.dat: $* '$got', not '$expected'"
}
# the package's backward through stage 12 is its own peer: its graph time and the peers' over it
expect_columns "1.5 1.00 1.00" ms_package12_backward_graph fla_graph/package12 flashqla_graph/package12
# stage 13 beside the peers' graph times, as stage 12
expect_columns "0.25 6.00 6.00" ms_states_backward fla_graph/states flashqla_graph/states
run bench_layouts.sh layouts_ours.dat layouts_tp8.dat -- ours,tp8
# a peer with no graph time is timed eagerly and named in the row's last field; the others
# (FlashQLA exact beside it) keep their graph time
eager=$(awk '/^#/ { next } !header { header = 1; next } $13 != "1.5" || $14 != "1.0" || $NF != "flashqla" { print "row " NR ": ms_flashqla " $13 ", ms_flashqla_exact " $14 ", eager " $NF; exit }' \
    "$stand/out_bench_layouts/layouts_ours.dat" 2>&1)
[ -z "$eager" ] || fail "bench_layouts.sh, layouts_ours.dat: FlashQLA's eager time not taken: $eager"
# a row on 07 has the problem's floor (06's count of its flops), not 07's count, which adds the fold's
floor=$(awk '/^#/ { next } !header { for (i = 1; i <= NF; i++) column[$i] = i; header = 1; next }
    $1 == "1x65536" { print $column["stage"], $column["floor_ms"] }' "$stand/out_bench_layouts/layouts_ours.dat")
case $floor in 07\ 0.1*) ;; *) fail "bench_layouts.sh, layouts_ours.dat: the 1x65536 row's stage and floor_ms are '$floor', not 07 and the bytes' 0.1385 ms" ;; esac
# the figure of FlashQLA's table draws a panel from the tp8 file alone, and gnuplot says nothing
# (where gnuplot is installed: make plots needs it, make test does not)
if command -v gnuplot > /dev/null; then
    said=$(cd plots && gnuplot -e "data_dir='$stand/out_bench_layouts'; out_dir='$stand'" layouts_flashqla.gp 2>&1)
    [ -z "$said" ] && [ -s "$stand/layouts_flashqla.png" ] || fail "layouts_flashqla.gp on the stand-in tp8 file: no figure, or gnuplot said '$said'"
fi
# PEERS names the backward's peers: only those run, the others' columns are nan; a name that is
# no peer stops the script before it writes anything
peers=$(mkdir -p "$stand/out_peers" && PEERS=fla SHAPES="1 64 2 16 16" PATH="$stand/path:$PATH" sh plots/bench_backward_gpu.sh "$stand/bin" "$stand/out_peers" > "$stand/out_peers.log" 2>&1 &&
    awk '/^#/ { next } !header { for (i = 1; i <= NF; i++) column[$i] = i; header = 1; next }
        { print $column["ms_fla_backward"], $column["ms_flashqla_backward"], $column["ms_package_backward"], $column["ms_fla_backward_graph"], $column["ms_package_backward_graph"], $column["graph_vs_eager"] }' "$stand/out_peers/backward_gpu.dat")
[ "$peers" = "2.0 nan nan 1.5 nan 0.000e+00" ] ||
    fail "bench_backward_gpu.sh with PEERS=fla: FLA, FlashQLA, package times, FLA's and the package's from graphs, graph_vs_eager '$peers', not '2.0 nan nan 1.5 nan 0.000e+00' ($(tail -1 "$stand/out_peers.log"))"
if PEERS=fla,triton PATH="$stand/path:$PATH" sh plots/bench_backward_gpu.sh "$stand/bin" "$stand/out_peers" > "$stand/out_peers.log" 2>&1; then
    fail "bench_backward_gpu.sh with PEERS=fla,triton ran"
else
    grep -q "PEERS names 'triton'" "$stand/out_peers.log" || fail "bench_backward_gpu.sh with PEERS=fla,triton: '$(tail -1 "$stand/out_peers.log")'"
    grep -q "^1 64 2 16 16 " "$stand/out_peers/backward_gpu.dat" ||
        fail "bench_backward_gpu.sh with PEERS=fla,triton wrote over the data file it was given"
fi
# ROWS names the rows to run: those, in the group's order, and no others
rows=$(mkdir -p "$stand/out_rows" && ROWS="1x32768,gva 8x4096" PATH="$stand/path:$PATH" sh plots/bench_layouts.sh "$stand/bin" "$stand/out_rows" ours > "$stand/out_rows.log" 2>&1 &&
    awk '/^#/ { next } !header { header = 1; next } { printf "%s ", $1 }' "$stand/out_rows/layouts_ours.dat")
[ "$rows" = "8x4096 1x32768,gva " ] || fail "bench_layouts.sh with ROWS=\"1x32768,gva 8x4096\": rows '$rows' ($(tail -1 "$stand/out_rows.log"))"
# a group with none of the named rows keeps its file; a name that is no row stops the script
echo "kept" > "$stand/out_rows/layouts_tp8.dat"
ROWS="8x4096" PATH="$stand/path:$PATH" sh plots/bench_layouts.sh "$stand/bin" "$stand/out_rows" ours,tp8 > "$stand/out_rows.log" 2>&1 &&
    [ "$(cat "$stand/out_rows/layouts_tp8.dat")" = kept ] || fail "bench_layouts.sh with ROWS=8x4096: the tp8 file was rewritten"
if ROWS="1x99" PATH="$stand/path:$PATH" sh plots/bench_layouts.sh "$stand/bin" "$stand/out_rows" ours > "$stand/out_rows.log" 2>&1 ||
    ! grep -q "ROWS names '1x99'" "$stand/out_rows.log"; then
    fail "bench_layouts.sh with ROWS=1x99: no one-line refusal ($(tail -1 "$stand/out_rows.log"))"
fi
run bench_gpu.sh gpu_shapes.dat gpu_vs_T.dat
# another tree's 06 and 07: a stand-in tree whose make puts the stand-in binaries in its bin/
mkdir -p "$stand/tree/bin"
printf 'bin/%%:\n\tcp %s/$(@F) $@\n' "$stand/bin" > "$stand/tree/Makefile"
run bench_against_tree.sh against_tree.dat against_tree_packed.dat -- "$stand/tree"
run bench_sequence.sh stage07_shapes.dat stage07_vs_T.dat
[ "$failures" -eq 0 ] || exit 1
echo "bench_scripts: $(echo "$passed" | wc -w) GPU bench scripts ran against stand-ins and wrote whole rows"
