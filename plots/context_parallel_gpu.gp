# context_parallel_gpu.gp -- stage 08's GPU twin: time per phase against GPUs, one long
# sequence (data: context_parallel_gpu.dat, made by plots/bench_context_gpu.sh).
load 'common.gp'
set output out_dir.'/context_parallel_gpu.png'
file = data('context_parallel_gpu.dat')
set title sprintf("Stage 08 across GPUs: one sequence, B = 1, H = 8, K = V = 128\n%s", machine) noenhanced font ',16'
set xlabel "sequence length T (tokens), GPUs (one MPI rank each)"
set ylabel "median time per forward pass (ms)"
set key noenhanced inside left top width 1 samplen 2.5
set style data histograms
set style histogram rowstacked
set style fill solid 0.8 border -1
set boxwidth 0.6
stats rows(file, '$1 ~ /^[0-9]/') using 3 nooutput
set yrange [0 : STATS_max * 1.15] # room for the labels above the bars
set bmargin 5
set label 100 sprintf("data: %s (%s)", shown('context_parallel_gpu.dat'), made_short)
data = rows(file, '$1 ~ /^[0-9]/')
label(T, n) = sprintf("2^{%d}, %d GPU%s", int(log(T) / log(2) + 0.5), n, n > 1 ? "s" : "")
plot data using 4:xtic(label($1, $2)) title "phase 1: kernel 1, fold, compose" ls 1, \
     '' using 5 title "phase 2: MPI_Allgather (host-staged)" ls 2, \
     '' using 6 title "phase 3: scan, replay, kernel 3" ls 3, \
     '' using 0:3:(valid(8) ? sprintf("%.1f ms, %.2fx stage 07 on 1 GPU", $3, $8) : sprintf("%.1f ms; stage 07 on 1 GPU: does not fit", $3)) with labels center offset 0, 0.9 font ",13" notitle
