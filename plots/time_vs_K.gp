# time_vs_K.gp -- every CPU stage's time against the head size K = V, one thread (data:
# sweep_K.dat, made by plots/bench.sh, sweep K): the scans' K^3 work per token against 01's K^2.
load 'common.gp'
set output out_dir.'/time_vs_K.png'
file = data('sweep_K.dat')
T = system(sprintf("awk '!/^#/ && $1 ~ /^0/ { print $3; exit }' %s", file)) + 0
set title sprintf("Time against head size K = V (B = H = 1, T = %d, one thread): the scans' K³ wall\n%s", T, machine) noenhanced font ',16'
set logscale xy 2
set xlabel 'head size K = V (elements)'
set ylabel 'median time per forward pass (ms)'
set xtics (16, 32, 64, 128)
set xrange [14:146]
set offsets 0, 0, graph 0.06, graph 0.04
set bmargin 5
set key inside left top width 1 samplen 2.5
set label 100 sprintf("data: %s (%s)", shown('sweep_K.dat'), made_short)
plot curve(file, stage("01_naive_loop"), 10) using 5:10 with linespoints ls 1 title '01 naive loop (K² work per token)', \
     curve(file, stage("02_affine"), 10) using 5:10 with linespoints ls 2 title '02 affine (K³)', \
     curve(file, stage("03_parallel_scan"), 10) using 5:10 with linespoints ls 3 title '03 parallel scan (K³)', \
     curve(file, stage("04_two_phase_scan"), 10) using 5:10 with linespoints ls 4 title '04 two-phase scan (K²)', \
     curve(file, stage("05_wy_chunked"), 10) using 5:10 with linespoints ls 5 title '05 WY chunked'
