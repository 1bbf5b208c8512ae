# context_parallel_gpu.gp -- stage 08's GPU twin: time per phase against GPUs, one long
# sequence (plots/data/context_parallel_gpu.dat, made by bench_context_gpu.sh).
load 'common.gp'
set output 'context_parallel_gpu.png'
set title sprintf("Stage 08 across GPUs: one sequence, B=1 H=8 K=V=128\n%s", machine) noenhanced
set xlabel "T (tokens), GPUs (one MPI rank each)"
set ylabel "median time per forward pass (ms)"
set key noenhanced inside left top
set style data histograms
set style histogram rowstacked
set style fill solid 0.8 border -1
set boxwidth 0.6
set yrange [0:*]
set offsets 0, 0, graph 0.12, 0 # room for the labels above the bars
data = rows('data/context_parallel_gpu.dat', '$1 ~ /^[0-9]/')
label(T, n) = sprintf("2^{%d}, %d", int(log(T) / log(2) + 0.5), n)
plot data using 4:xtic(label($1, $2)) title "phase 1: kernel 1, fold, compose" ls 1, \
     '' using 5 title "phase 2: MPI_Allgather (host-staged)" ls 2, \
     '' using 6 title "phase 3: scan, replay, kernel 3" ls 3, \
     '' using 0:3:(valid(8) ? sprintf("%.1f ms, %.2fx 07", $3, $8) : sprintf("%.1f ms, 07 does not fit", $3)) with labels center offset 0,0.8 font ",9" notitle
