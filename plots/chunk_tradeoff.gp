# chunk_tradeoff.gp -- stage 05's chunk size C: time (left axis) and counted GFLOP/s (right axis)
# against C, one thread (data: sweep_chunk.dat, made by plots/bench.sh, sweep chunk).
load 'common.gp'
set output out_dir.'/chunk_tradeoff.png'
file = data('sweep_chunk.dat')
T = system(sprintf("awk '!/^#/ && $1 ~ /^0/ { print $3; exit }' %s", file)) + 0
set title sprintf("Stage 05: the chunk size C trades per-chunk work (C² terms) against T / C sequential steps\n%s; one thread, B = 1, T = %d, H = 8, K = V = 64", machine, T) noenhanced font ',16'
set logscale x 2
set xrange [0.8 : 160]
set xlabel 'chunk size C (tokens)'
set ylabel 'median time per forward pass (ms)'
set y2label 'GFLOP/s (counted work)'
set ytics nomirror
set y2tics
stats rows(file, '1') using 10 nooutput
set yrange [0 : STATS_max * 1.12]
stats rows(file, '1') using 11 nooutput
set y2range [0 : STATS_max * 1.12]
set bmargin at screen 0.23
set key at screen 0.5, screen 0.085 center center horizontal maxrows 1 width -3 samplen 2.5
set label 100 sprintf("data: %s (%s)", shown('sweep_chunk.dat'), made_short)
loop_ms = system(sprintf("awk '$1 == \"01_naive_loop\" { print $10 }' %s", file)) + 0
plot rows(file, stage("05_wy_chunked")) using 9:10 with linespoints ls 5 title '05: time (left axis)', \
     rows(file, stage("05_wy_chunked")) using 9:11 axes x1y2 with linespoints ls 2 title '05: GFLOP/s (right axis)', \
     loop_ms with lines ls 6 title 'stage 01: time (left axis)'
