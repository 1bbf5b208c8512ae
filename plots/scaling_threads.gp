# scaling_threads.gp -- OpenMP strong scaling at one head and at eight: speedup over stage 01 on
# one thread against the thread count (data: sweep_threads.dat, made by plots/bench.sh, sweep
# threads). Both panels share one y scale (powers of two, written 1/8 rather than 0.125) and a key.
load 'common.gp'
set output out_dir.'/scaling_threads.png'
file = data('sweep_threads.dat')
T = system(sprintf("awk '!/^#/ && $1 ~ /^0/ { print $3; exit }' %s", file)) + 0
heads(s, h) = sprintf("%s && $4 == %s", stage(s), h)
stats rows(file, '1') using 13 nooutput
low = floor(log(STATS_min) / log(2)); high = ceil(log(STATS_max * 1.1) / log(2))
stats rows(file, '1') using 7 nooutput
most_threads = STATS_max
set logscale y 2
set yrange [2.0**low / 1.1 : 2.0**high * 1.1] # a little past the outer ticks, so both are drawn
set ytics () ; do for [e = low : high] { set ytics add (power_of_two(e) 2.0**e) }
set xrange [0.7 : most_threads + 0.3]
set xtics 1
set xlabel 'OpenMP threads'
set ylabel 'speedup over stage 01 on 1 thread (x)'
set multiplot title sprintf("OpenMP scaling: speedup over stage 01 on one thread (B = 1, T = %d, K = V = 64)\n%s", T, machine) noenhanced font ',16'
set tmargin at screen 0.82; set bmargin at screen 0.3
set label 100 sprintf("data: %s (%s); a missing curve was not run (its work is over the sweep's limit)", shown('sweep_threads.dat'), made_short)
do for [panel = 1:2] {
    h = panel == 1 ? "1" : "8"
    set title (panel == 1 ? "H = 1: one sequence, parallel along T only" : "H = 8 heads: one head a thread")
    if (panel == 1) { set lmargin at screen 0.095; set rmargin at screen 0.495 } else { unset label 100; unset ylabel; set lmargin at screen 0.585; set rmargin at screen 0.985 } # the same y axis as the left panel's
    set key off
    plot curve(file, heads("01_naive_loop", h), 13) using 7:13 with linespoints ls 1 notitle, \
         curve(file, heads("03_parallel_scan", h), 13) using 7:13 with linespoints ls 3 notitle, \
         curve(file, heads("04_two_phase_scan", h), 13) using 7:13 with linespoints ls 4 notitle, \
         curve(file, heads("05_wy_chunked", h), 13) using 7:13 with linespoints ls 5 notitle, \
         [1:most_threads] x with lines ls 6 notitle
}
# the one key of both panels: an empty plot the width of the figure, below them
set lmargin at screen 0.085; set rmargin at screen 0.985; set tmargin at screen 0.17; set bmargin at screen 0.06
unset title; unset xlabel; unset ylabel; unset tics; unset grid; unset border; unset label 100
set key inside center center horizontal maxrows 2 width 1 samplen 2.5
unset logscale; set xrange [0:1]; set yrange [0:1]
plot NaN with linespoints ls 1 title '01 naive loop', NaN with linespoints ls 3 title '03 parallel scan', \
     NaN with linespoints ls 4 title '04 two-phase scan', NaN with linespoints ls 5 title '05 WY chunked', \
     NaN with lines ls 6 title 'ideal (speedup = threads)'
unset multiplot
