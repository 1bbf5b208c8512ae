# sequence_parallel.gp -- stage 07 against stage 06 and FLA's Triton kernel (bf16, eager and
# CUDA graph): time against T at B=1 K=V=64, one head and eight (plots/data/stage07_vs_T.dat,
# one side-by-side run).
load 'common.gp'
set output 'sequence_parallel.png'
set title sprintf("Stage 07 (P automatic) against 06 and FLA, B=1 K=V=64\n%s", machine) noenhanced
set xlabel "sequence length T (tokens)"
set ylabel "median time per forward pass (ms)"
set logscale xy
set xrange [700:200000]
data = 'data/stage07_vs_T.dat'
heads(h) = sprintf("$4 == %d", h)
plot rows(data, heads(1)) using 3:8 with linespoints ls 2 title "06, H=1", \
     rows(data, heads(1)) using 3:9 with linespoints ls 1 title "07, H=1", \
     rows(data, heads(1)) using 3:11 with linespoints ls 6 title "FLA graph, H=1", \
     rows(data, heads(8)) using 3:8 with linespoints ls 2 dt 3 title "06, H=8", \
     rows(data, heads(8)) using 3:9 with linespoints ls 1 dt 3 title "07, H=8", \
     rows(data, heads(8)) using 3:11 with linespoints ls 5 dt 3 title "FLA graph, H=8"
