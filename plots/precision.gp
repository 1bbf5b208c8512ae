load 'common.gp'
set output 'precision.png'
set title "Stage 01 with the state rounded to fp16, bf16 or fp32 after every token (K = V = 64)\n{/*0.8 relative error of o over tokens T/2 < t <= T, against the fp64 loop; ".machine."}"
set logscale xy
set format y '10^{%L}'
set xlabel 'T (tokens)'
set ylabel 'relative L2 error of o'
set key outside right top
formats = "fp32 bf16 fp16"
regimes = "alpha~0.5 alpha~0.99-0.999 alpha~0.99999"
sel(f, r) = rows('data/precision.dat', sprintf("$1 == \"%s\" && $2 == \"%s\"", f, r))
plot for [i = 0:8] sel(word(formats, i / 3 + 1), word(regimes, i % 3 + 1)) using 3:4 \
     with linespoints lc (i / 3 + 1) lw 2 pt (4 + 2 * (i % 3)) \
     title sprintf('%s state, %s', word(formats, i / 3 + 1), word(regimes, i % 3 + 1)) noenhanced
