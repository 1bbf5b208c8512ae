load 'common.gp'
set output 'scaling_threads.png'
set multiplot layout 1,2 title "OpenMP scaling: speedup over stage 01 on one thread (K = V = 64)\n{/*0.8 ".machine."}"
set xlabel 'threads'
set ylabel 'speedup over 01 on 1 thread (x)'
set key below
set xtics 1
set logscale y 2
file = 'data/sweep_threads.dat'
heads(s, h) = sprintf("%s && $4 == %s", stage(s), h)
do for [h in "1 8"] {
    set title sprintf("H = %s%s", h, h eq "1" ? ": parallel along T only" : " heads")
    plot rows(file, heads("01_naive_loop", h)) using 7:13 with linespoints ls 1 title '01 loop', \
         rows(file, heads("03_parallel_scan", h)) using 7:13 with linespoints ls 3 title '03 parallel scan', \
         rows(file, heads("04_two_phase_scan", h)) using 7:13 with linespoints ls 4 title '04 two-phase scan', \
         rows(file, heads("05_wy_chunked", h)) using 7:13 with linespoints ls 5 title '05 WY chunked', \
         x with lines ls 6 title 'ideal'
}
unset multiplot
