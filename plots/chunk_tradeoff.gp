load 'common.gp'
set output 'chunk_tradeoff.png'
set title "Stage 05: the chunk size C trades per-chunk work (C^2 terms) against T / C sequential steps\n{/*0.8 ".machine.", one thread, B = 1, H = 8, K = V = 64}"
set logscale x 2
set xlabel 'chunk size C (tokens)'
set ylabel 'median time (ms)'
set y2label 'GFLOP/s (counted work)'
set ytics nomirror
set y2tics
set key inside right top
loop_ms = system("awk '$1 == \"01_naive_loop\" { print $10 }' data/sweep_chunk.dat") + 0
file = 'data/sweep_chunk.dat'
plot rows(file, stage("05_wy_chunked")) using 9:10 with linespoints ls 5 title '05 time (ms)', \
     rows(file, stage("05_wy_chunked")) using 9:11 axes x1y2 with linespoints ls 2 title '05 GFLOP/s (right axis)', \
     loop_ms with lines ls 6 title 'stage 01 time (ms)'
