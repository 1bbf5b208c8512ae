load 'common.gp'
set output 'time_vs_K.png'
set title "Time against head size K = V (T = 4096, B = H = 1, one thread): the scan's K^3 wall\n{/*0.8 ".machine."}"
set logscale xy 2
set xlabel 'K = V'
set ylabel 'median time (ms)'
set xtics (16, 32, 64, 128)
set xrange [14:146]
set key inside left top
file = 'data/sweep_K.dat'
plot rows(file, stage("01_naive_loop")) using 5:10 with linespoints ls 1 title '01 loop (K^2 per token)', \
     rows(file, stage("02_affine")) using 5:10 with linespoints ls 2 title '02 affine (K^3)', \
     rows(file, stage("03_parallel_scan")) using 5:10 with linespoints ls 3 title '03 parallel scan (K^3)', \
     rows(file, stage("04_two_phase_scan")) using 5:10 with linespoints ls 4 title '04 two-phase scan', \
     rows(file, stage("05_wy_chunked")) using 5:10 with linespoints ls 5 title '05 WY chunked'
