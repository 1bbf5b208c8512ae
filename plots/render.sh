#!/bin/sh
# render.sh [DATA_DIR OUT_DIR [quick]] -- the figures, drawn with gnuplot from the data files.
#   make plots:           plots/data into plots/ (the default; a figure whose data file is
#                         missing is an error)
#   make bench QUICK=1:   build/quick/data into build/quick/, "quick" in every title; figures
#                         whose data a quick run does not make (GPU, MPI) are left out
# Paths are relative to the repository root. Each figure's title names the machine its data
# was measured on (its data file's "# machine:" line), its footnote the data files.
# The PNG bytes depend only on the data and the scripts: unchanged data, unchanged figures.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
data=${1:-plots/data}
out=${2:-plots}
tag=${3:-}
case $data in /*) data_dir=$data ;; *) data_dir=$root/$data ;; esac
case $out in /*) out_dir=$out ;; *) out_dir=$root/$out ;; esac
mkdir -p "$out_dir"
cd "$root/plots"
# gnuplot_string TEXT: TEXT as the inside of a single-quoted gnuplot string
gnuplot_string() { printf '%s' "$1" | sed "s/'/''/g"; }
render() { # script data-file (the file whose machine line goes in the title)
    if [ ! -f "$data_dir/$2" ]; then
        [ "$tag" = quick ] && { echo "plots: $(basename "$1" .gp) left out (no $data/$2 in a quick run)"; return 0; }
        echo "plots: $data/$2 missing; run make bench first" >&2
        exit 1
    fi
    # the machine alone (some GPU files carry "; made by: ..." on the same line)
    machine=$(sed -n 's/^# machine: //p' "$data_dir/$2" | head -1 | sed 's/; made by: .*//')
    made=$(sed -n 's/^# made by: //p; s/^# machine: .*; made by: //p' "$data_dir/$2" | head -1)
    # the short form for footnotes: the script that made it and the date
    script=$(printf '%s' "$made" | grep -o 'sh plots/[a-z0-9_]*\.sh\|^make bench[^,]*' | head -1 || true)
    day=$(printf '%s' "$made" | grep -o '20[0-9][0-9]-[0-9][0-9]-[0-9][0-9]' | head -1 || true)
    made_short=$(printf '%s' "${script:+$script, }$day")
    [ "$tag" != quick ] || machine="quick run (make bench QUICK=1, not the committed data); $machine"
    gnuplot -e "machine='$(gnuplot_string "$machine")'; made='$(gnuplot_string "$made")'" \
        -e "made_short='$(gnuplot_string "$made_short")'" \
        -e "data_dir='$(gnuplot_string "$data_dir")'" \
        -e "data_shown='$(gnuplot_string "$data")'; out_dir='$(gnuplot_string "$out_dir")'" "$1"
    echo "wrote $out/$(sed -n "s/^set output out_dir.'\/\(.*\)'/\1/p" "$1")"
}
render speedup_vs_T.gp sweep_T_H1.dat
render time_vs_K.gp sweep_K.dat
render scaling_threads.gp sweep_threads.dat
render chunk_tradeoff.gp sweep_chunk.dat
render segments.gp sweep_segments.dat
render precision.gp precision.dat
render gpu_progression.gp gpu_shapes.dat
render mpi_scaling.gp mpi_scaling_16cores.dat
render context_parallel_gpu.gp context_parallel_gpu.dat
render sequence_parallel.gp stage07_vs_T.dat
render roofline.gp roofline_06.dat
render stage06_steps.gp stage06_steps.dat
render stage06_series.gp stage06_series.dat
render error_sources.gp error_sources.dat
# the layouts figure where its data file is (plots/bench_layouts.sh makes it on a GPU with FLA,
# FlashInfer and FlashQLA installed)
if [ -f "$data_dir/layouts_ours.dat" ]; then
    render layouts.gp layouts_ours.dat
else
    echo "plots: layouts left out (no $data/layouts_ours.dat: plots/bench_layouts.sh makes it)"
fi
# FlashQLA's table row for row: a panel for each of its groups whose file is there
first_group=$(for group in tp8 tp4 tp2 tp1 35b; do [ -f "$data_dir/layouts_$group.dat" ] && echo "layouts_$group.dat"; done | head -1)
if [ -n "$first_group" ]; then
    render layouts_flashqla.gp "$first_group"
else
    echo "plots: layouts_flashqla left out (no $data/layouts_tp8.dat ... layouts_35b.dat: plots/bench_layouts.sh makes them)"
fi
