# segments.gp -- stage 04's segment count P on all threads: speedup over stage 01 on one thread
# (data: sweep_segments.dat, made by plots/bench.sh, sweep segments).
load 'common.gp'
set output out_dir.'/segments.png'
file = data('sweep_segments.dat')
T = system(sprintf("awk '!/^#/ && $1 ~ /^0/ { print $3; exit }' %s", file)) + 0
threads = system(sprintf("awk '!/^#/ && $1 ~ /^04/ { print $7; exit }' %s", file)) + 0
set title sprintf("Stage 04 against its segment count P: speedup over stage 01 on one thread\nB = H = 1, T = %d, K = V = 64, %d threads; %s", T, threads, machine) noenhanced font ',16'
set xlabel 'segments P (the sequence is cut into P pieces)'
set ylabel 'speedup over stage 01 on 1 thread (x)'
set xtics 1
stats rows(file, stage('04_two_phase_scan')) using 9 nooutput
set xrange [STATS_min - 0.5 : STATS_max + 0.5]
set yrange [0:*]
set bmargin 5
set key inside right bottom width 1 samplen 2.5
set label 100 sprintf("data: %s (%s)", shown('sweep_segments.dat'), made_short)
plot rows(file, stage("04_two_phase_scan")) using 9:13 with linespoints ls 4 title sprintf('04 two-phase scan, %d threads', threads), \
     1 with lines ls 6 title 'stage 01, 1 thread (= 1)'
