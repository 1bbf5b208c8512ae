# stage06_series.gp -- stage 06's series as a speed curve: 05_cuda, each sub-stage and the
# final 06, beside FLA's CUDA graph (dashed), at two shapes, each shape's bars from one run
# (data: stage06_series.dat and stage06_series_k64.dat, made by plots/bench_stage06_series.sh).
load 'common.gp'
set output out_dir.'/stage06_series.png'
wide = data('stage06_series.dat')
seed = data('stage06_series_k64.dat')
# a stage's short name: 06a_tensor_cores -> 06a
name(s) = s eq "05_wy_chunked_cuda" ? "05 (fp32)" : s[1:strstrt(s, "_") - 1]
set ylabel "median time per forward pass (ms, log scale)"
set logscale y
set format y "%g"
set yrange [0.1:20]
set style fill solid 0.85 border -1
set boxwidth 0.7
set key inside right top width 1 samplen 2.5
set bmargin 6
set xtics nomirror font ',13' noenhanced
set grid ytics
set label 100 sprintf("data: %s and stage06_series_k64.dat, one run a shape (%s);\n05 computes in fp32; the sub-stages, 06 and FLA 0.6.0 take bf16 inputs", shown('stage06_series.dat'), made_short) at screen 0.008, screen 0.06
set multiplot layout 1,2 title sprintf("Stage 06's series: 05's kernels on tensor cores (06a), one idea a sub-stage, then 06\n%s", machine) noenhanced font ',16'
set title "(8, 4096, 16, 128, 128)" font ',15'
stats rows(wide, '$1 ~ /^0/') using 7 nooutput
set xrange [-0.6:STATS_records - 0.4]
plot rows(wide, '$1 ~ /^0/') using 0:7:xtic(name(strcol(1))) with boxes ls 1 notitle, \
     '' using 0:7:(sprintf("%.3g", $7)) with labels offset 0,0.8 font ',12' notitle, \
     '' using 0:8 with lines ls 6 title "FLA, CUDA graph"
set title "(1, 16384, 8, 64, 64)" font ',15'
stats rows(seed, '$1 ~ /^0/') using 7 nooutput
set xrange [-0.6:STATS_records - 0.4]
unset ylabel
plot rows(seed, '$1 ~ /^0/') using 0:7:xtic(name(strcol(1))) with boxes ls 2 notitle, \
     '' using 0:7:(sprintf("%.3g", $7)) with labels offset 0,0.8 font ',12' notitle, \
     '' using 0:8 with lines ls 6 title "FLA, CUDA graph"
unset multiplot
