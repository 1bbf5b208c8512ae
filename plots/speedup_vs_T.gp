load 'common.gp'
set output 'speedup_vs_T.png'
set multiplot layout 1,2 title "Speedup over stage 01 on one thread, against sequence length (K = V = 64)\n{/*0.8 ".machine."}"
set logscale x 2
set logscale y 2
set xlabel 'T (tokens)'
set ylabel 'speedup over 01 on 1 thread (x)'
set key below
cores = system("sed -n 's/.*, \\([0-9]*\\) cores/\\1/p' data/sweep_T_H1.dat | head -1") + 0
on_all(s) = sprintf("%s && $7 == %d", stage(s), cores)
do for [file in "data/sweep_T_H1.dat data/sweep_T_H8.dat"] {
    set title (file eq "data/sweep_T_H1.dat" ? "B = H = 1: one sequence" : "B = 1, H = 8 heads")
    plot rows(file, on_all("01_naive_loop")) using 3:13 with linespoints ls 1 title sprintf('01 loop, %d threads', cores), \
         rows(file, on_all("02_affine")) using 3:13 with linespoints ls 2 title '02 affine', \
         rows(file, on_all("03_parallel_scan")) using 3:13 with linespoints ls 3 title '03 parallel scan', \
         rows(file, on_all("04_two_phase_scan")) using 3:13 with linespoints ls 4 title '04 two-phase scan', \
         rows(file, on_all("05_wy_chunked")) using 3:13 with linespoints ls 5 title '05 WY chunked', \
         1 with lines ls 6 title 'stage 01, 1 thread'
}
unset multiplot
