#!/bin/sh
# render.sh -- every figure under plots/ from the data under plots/data/ (make plots).
# Each figure's title names the machine its data was measured on (the data file's header).
set -eu
cd "$(dirname "$0")"
render() { # script data-file
    [ -f "data/$2" ] || { echo "plots: data/$2 missing; run make bench first" >&2; exit 1; }
    machine=$(sed -n 's/^# machine: //p' "data/$2" | head -1)
    gnuplot -e "machine='$machine'" "$1"
    echo "wrote $(sed -n "s/^set output '\(.*\)'/\1/p" "$1")"
}
render speedup_vs_T.gp sweep_T_H1.dat
render time_vs_K.gp sweep_K.dat
render scaling_threads.gp sweep_threads.dat
render chunk_tradeoff.gp sweep_chunk.dat
render segments.gp sweep_segments.dat
render precision.gp precision.dat
render gpu_progression.gp gpu_vs_T.dat
render mpi_scaling.gp mpi_scaling_16cores.dat
render context_parallel_gpu.gp context_parallel_gpu.dat
render sequence_parallel.gp stage07_vs_T.dat
render roofline.gp roofline_06.dat
render stage06_steps.gp stage06_steps.dat
