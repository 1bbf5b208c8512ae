# stage06_steps.gp -- stage 06 step by step: each step's code built from its commit and timed in
# one run on one machine, at two shapes, beside FLA's CUDA graph (data: stage06_steps.dat, made
# by plots/bench_stage06_steps.sh from the list plots/stage06_steps.list).
load 'common.gp'
set output out_dir.'/stage06_steps.png'
file = data('stage06_steps.dat')
set title sprintf("Stage 06 step by step: every step's code timed in one run, at two shapes\n%s", machine) noenhanced font ',16'
set xlabel "step (a commit of plots/stage06_steps.list)" noenhanced
set ylabel "median time per forward pass (ms)"
set logscale y
set format y "%g"
set xtics 1 font ',12'
set key inside right top width 1 samplen 2.5
set bmargin 5
set label 100 sprintf("data: %s (%s); FLA 0.6.0 chunk_gated_delta_rule, bf16, replayed from a CUDA graph", shown('stage06_steps.dat'), made_short)
steps = rows(file, '$1 ~ /^[0-9]/')
# as many steps as the data has (bench_stage06_steps.sh's list grows a step at a time)
stats steps using 1 nooutput
set xrange [0.5:STATS_max + 0.5]
plot steps using 1:3 with linespoints title "06, (B, T, H, K, V) = (8, 4096, 16, 128, 128)" ls 1, \
     '' using 1:5 with lines title "FLA, the same shape" ls 1 dt 2, \
     '' using 1:4 with linespoints title "06, (1, 16384, 8, 64, 64)" ls 2, \
     '' using 1:6 with lines title "FLA, the same shape" ls 2 dt 2
