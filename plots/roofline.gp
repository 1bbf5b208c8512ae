# roofline.gp -- stage 06's three kernels on the roofline of the card they ran on: flops a byte
# against flops a second, under the two roofs gpu_peak measured (plots/data/gpu_peak.dat: the
# copy rate and the faster of its bf16 tensor rates, mma.sync's and wgmma's where the file has
# both, read from that file) and the data sheet's (dashed). Data:
# plots/data/roofline_06.dat (kernel times from ncu; flops and bytes counted from the layouts,
# docs/06). The labels of the second shape sit left of their points: both shapes' kernels 1
# and 3 lie near 36 flops a byte.
load 'common.gp'
# the measured roofs, from plots/data/gpu_peak.dat (columns copy_gbs, mma_bf16_tflops and, where
# the file has it, wgmma_bf16_tflops)
stats data('gpu_peak.dat') using 3 nooutput
copy_tbs = STATS_max / 1000.0
stats data('gpu_peak.dat') using (valid(6) && column(6) > column(5) ? column(6) : column(5)) nooutput
mma_tflops = STATS_max
stats data('gpu_peak.dat') using (valid(6) && column(6) > column(5) ? 1 : 0) nooutput
tensor_instruction = STATS_max > 0 ? "wgmma" : "mma.sync"
set output out_dir.'/roofline.png'
set title sprintf("Stage 06's kernels on the roofline: bf16 products, bytes counted from the layouts\n%s", machine) noenhanced font ',16'
set xlabel "arithmetic intensity (flops per byte moved)"
set ylabel "TFLOP/s"
set logscale xy
set xrange [5:500]
set yrange [2:2000]
set key inside right bottom box opaque
sheet_tbs = 4.8; sheet_tflops = 989.0      # the H200's data sheet (wgmma for the flops)
roof(x, tbs, peak) = (tbs * x < peak) ? tbs * x : peak
file = data('roofline_06.dat')
set bmargin 5
set label 100 sprintf("data: %s (kernel times from ncu, %s), %s (the measured roofs: bin/gpu_peak)", shown('roofline_06.dat'), made_short, shown('gpu_peak.dat'))
tflops(chunks, flops, us) = chunks * flops / (us * 1e-6) / 1e12
# the first shape's kernels 2 and 3 lie close together: kernel 3's label goes a little higher
lift(kernel) = kernel eq "3_chunk_outputs" ? 1.3 : 1.0
set label 1 sprintf("ridge: %.0f flops a byte", mma_tflops / copy_tbs) at 60, 800 font ',13'
plot roof(x, copy_tbs, mma_tflops) with lines ls 6 dt 1 lw 2 title sprintf("measured: copies %.2f TB/s, %s %.0f TFLOP/s", copy_tbs, tensor_instruction, mma_tflops), \
     roof(x, sheet_tbs, sheet_tflops) with lines ls 6 dt 2 lw 1 title "data sheet: 4.8 TB/s, 989 TFLOP/s", \
     rows(file, first_column("(8,4096,16,128,128)")) using ($4 / $5):(tflops($3, $4, $6)) with points ls 1 ps 2 title "(B, T, H, K, V) = (8, 4096, 16, 128, 128)", \
     rows(file, first_column("(8,4096,16,128,128)")) using ($4 / $5):(tflops($3, $4, $6) * lift(strcol(2))):(sprintf("kernel %s", substr(strcol(2), 1, 1))) with labels left offset 1.2, 0 notitle, \
     rows(file, first_column("(1,16384,8,64,64)")) using ($4 / $5):(tflops($3, $4, $6)) with points ls 2 ps 2 title "(1, 16384, 8, 64, 64)", \
     rows(file, first_column("(1,16384,8,64,64)")) using ($4 / $5):(tflops($3, $4, $6)):(sprintf("kernel %s", substr(strcol(2), 1, 1))) with labels right offset -1.2, 0 notitle
