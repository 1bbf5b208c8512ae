# gpu_progression.gp -- the GPU progression: time against T for stages 01, 03, 04, 05 on the GPU
# and FLA's Triton kernel (bf16, eager and CUDA graph), B=1 H=8 K=V=64 (plots/data/gpu_vs_T.dat).
load 'common.gp'
set output 'gpu_progression.png'
set title sprintf("GPU stages against FLA, B=1 H=8 K=V=64\n%s", machine) noenhanced
set xlabel "sequence length T (tokens)"
set ylabel "median time per forward pass (ms)"
set logscale xy
data = 'data/gpu_vs_T.dat'
kind(s) = sprintf("$2 == \"%s\"", s)
plot rows(data, kind("01_naive_loop_cuda")) using 4:9 with linespoints ls 1 title "01 naive loop", \
     rows(data, kind("03_parallel_scan_cuda")) using 4:9 with linespoints ls 2 title "03 parallel scan", \
     rows(data, kind("04_two_phase_scan_cuda")) using 4:9 with linespoints ls 3 title "04 two-phase scan", \
     rows(data, kind("05_wy_chunked_cuda")) using 4:9 with linespoints ls 4 title "05 WY chunked", \
     rows(data, kind("fla_eager_bf16")) using 4:9 with linespoints ls 5 title "FLA bf16, eager", \
     rows(data, kind("fla_graph_bf16")) using 4:9 with linespoints ls 6 title "FLA bf16, CUDA graph"
