# stage06_steps.gp -- stage 06 step by step: each step's code built from its commit and timed in
# one run on one machine, at two shapes, beside FLA's CUDA graph (plots/data/stage06_steps.dat).
load 'common.gp'
set output 'stage06_steps.png'
set title sprintf("Stage 06, step by step (each step's commit, one run)\n%s", machine) noenhanced
set xlabel "step (docs/06_warp_specialized.md, \"The steps at a glance\")" noenhanced
set ylabel "median time per forward pass (ms)"
set logscale y
set xtics 1
set key inside right top
data = rows('data/stage06_steps.dat', '$1 ~ /^[0-9]/')
# as many steps as the data has (bench_stage06_steps.sh's list grows a step at a time)
stats data using 1 nooutput
set xrange [0.5:STATS_max + 0.5]
plot data using 1:3 with linespoints title "06, (B,T,H,K,V) = (8,4096,16,128,128)" ls 1, \
     '' using 1:5 with lines title "FLA (Triton), CUDA graph, same shape" ls 1 dt 2, \
     '' using 1:4 with linespoints title "06, (1,16384,8,64,64)" ls 2, \
     '' using 1:6 with lines title "FLA (Triton), CUDA graph, same shape" ls 2 dt 2
