# sequence_parallel.gp -- stage 07 against stage 06 and FLA's Triton kernel (bf16, replayed from
# a CUDA graph): time against T at B=1 K=V=64, one head and eight (data: stage07_vs_T.dat, the
# three side by side in one run of plots/bench_sequence.sh).
load 'common.gp'
set output out_dir.'/sequence_parallel.png'
file = data('stage07_vs_T.dat')
set title sprintf("Stage 07 (P chosen automatically) against stage 06 and FLA, B = 1, K = V = 64\n%s", machine) noenhanced font ',16'
set xlabel "sequence length T (tokens)"
set ylabel "median time per forward pass (ms)"
set logscale x 2
set logscale y
set format y "%g"
stats rows(file, '1') using 3 nooutput
set xrange [STATS_min / 1.4 : STATS_max * 1.4]
set xtics () ; do for [e = int(log(STATS_min) / log(2) + 0.5) : int(log(STATS_max) / log(2) + 0.5) : 2] { set xtics add (sprintf("%d", int(2**e)) 2**e) }
set key inside left top width 1 samplen 2.5 maxrows 3
set bmargin 5
set label 100 sprintf("data: %s (%s); FLA 0.6.0 chunk_gated_delta_rule, bf16, replayed from a CUDA graph", shown('stage07_vs_T.dat'), made_short)
heads(h) = sprintf("$4 == %d", h)
plot rows(file, heads(1)) using 3:8 with linespoints ls 2 title "06, H = 1", \
     rows(file, heads(1)) using 3:9 with linespoints ls 1 title "07, H = 1", \
     rows(file, heads(1)) using 3:11 with linespoints ls 6 title "FLA, H = 1", \
     rows(file, heads(8)) using 3:8 with linespoints ls 2 dt 3 title "06, H = 8", \
     rows(file, heads(8)) using 3:9 with linespoints ls 1 dt 3 title "07, H = 8", \
     rows(file, heads(8)) using 3:11 with linespoints ls 5 dt 3 title "FLA, H = 8"
