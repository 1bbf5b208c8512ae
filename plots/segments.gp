load 'common.gp'
set output 'segments.png'
set title "Stage 04: segments P on all threads (B = H = 1, K = V = 64): speedup over stage 01 on one thread\n{/*0.8 ".machine."}"
set xlabel 'segments P'
set ylabel 'speedup over 01 on 1 thread (x)'
set key inside right top
plot rows('data/sweep_segments.dat', stage("04_two_phase_scan")) using 9:13 with linespoints ls 4 title '04 measured', \
     1 with lines ls 6 title 'stage 01, 1 thread'
