# speedup_vs_T.gp -- every CPU stage's speedup over stage 01 on one thread, against T, at one
# head and at eight (data: sweep_T_H1.dat and sweep_T_H8.dat, made by plots/bench.sh, sweep T).
# Both panels share one y scale (powers of two, written 1/8 rather than 0.125) and one key.
load 'common.gp'
set output out_dir.'/speedup_vs_T.png'
h1 = data('sweep_T_H1.dat'); h8 = data('sweep_T_H8.dat')
cores = system(sprintf("sed -n 's/^# machine: .*, \\([0-9]*\\) cores$/\\1/p' %s | head -1", h1)) + 0
on_all(s) = sprintf("%s && $7 == %d", stage(s), cores)
# one y range for both panels: the powers of two around every speedup of either file
stats rows(h1.' '.h8, '1') using 13 nooutput
low = floor(log(STATS_min) / log(2)); high = ceil(log(STATS_max * 1.1) / log(2))
stats rows(h1.' '.h8, '1') using 3 nooutput
T_low = STATS_min; T_high = STATS_max
set logscale x 2
set logscale y 2
set xrange [T_low / 1.5 : T_high * 1.5]
set yrange [2.0**low / 1.1 : 2.0**high * 1.1] # a little past the outer ticks, so both are drawn
set xtics () ; do for [e = int(log(T_low) / log(2) + 0.5) : int(log(T_high) / log(2) + 0.5) : 2] { set xtics add (sprintf("%d", int(2**e)) 2**e) }
set ytics () ; do for [e = low : high] { set ytics add (power_of_two(e) 2.0**e) }
set xlabel 'sequence length T (tokens)'
set ylabel 'speedup over stage 01 on 1 thread (x)'
set multiplot title sprintf("Speedup over stage 01 on one thread, against sequence length (B = 1, K = V = 64)\n%s", machine) noenhanced font ',16'
set tmargin at screen 0.82; set bmargin at screen 0.3
set label 100 sprintf("data: %s and sweep_T_H8.dat (%s); a missing point was not run (its work is over the sweep's limit)", shown('sweep_T_H1.dat'), made_short)
do for [panel = 1:2] {
    file = panel == 1 ? h1 : h8
    set title (panel == 1 ? "H = 1: one sequence, parallel along T only" : "H = 8 heads")
    if (panel == 1) { set lmargin at screen 0.095; set rmargin at screen 0.495 } else { unset label 100; unset ylabel; set lmargin at screen 0.585; set rmargin at screen 0.985 } # the same y axis as the left panel's
    set key off
    plot curve(file, on_all("01_naive_loop"), 13) using 3:13 with linespoints ls 1 title sprintf('01 naive loop, %d threads', cores), \
         curve(file, on_all("02_affine"), 13) using 3:13 with linespoints ls 2 title '02 affine', \
         curve(file, on_all("03_parallel_scan"), 13) using 3:13 with linespoints ls 3 title '03 parallel scan', \
         curve(file, on_all("04_two_phase_scan"), 13) using 3:13 with linespoints ls 4 title '04 two-phase scan', \
         curve(file, on_all("05_wy_chunked"), 13) using 3:13 with linespoints ls 5 title '05 WY chunked', \
         1 with lines ls 6 title 'stage 01, 1 thread (= 1)'
}
# the one key of both panels: an empty plot the width of the figure, below them
set lmargin at screen 0.085; set rmargin at screen 0.985; set tmargin at screen 0.17; set bmargin at screen 0.06
unset title; unset xlabel; unset ylabel; unset tics; unset grid; unset border; unset label 100
set key inside center center horizontal maxrows 2 width 1 samplen 2.5
unset logscale; set xrange [0:1]; set yrange [0:1]
plot NaN with linespoints ls 1 title sprintf('01 naive loop, %d threads', cores), NaN with linespoints ls 2 title '02 affine', \
     NaN with linespoints ls 3 title '03 parallel scan', NaN with linespoints ls 4 title '04 two-phase scan', \
     NaN with linespoints ls 5 title '05 WY chunked', NaN with lines ls 6 title 'stage 01, 1 thread (= 1)'
unset multiplot
