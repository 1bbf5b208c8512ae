# precision.gp -- stage 01 with its state rounded to fp32, bf16 or fp16 after every token: the
# error of o against the unrounded fp64 loop, in three gate regimes (data: precision.dat, made
# by plots/precision_study.c through plots/bench.sh, sweep precision).
load 'common.gp'
set output out_dir.'/precision.png'
file = data('precision.dat')
set title sprintf("Stage 01 with the state rounded to fp32, bf16 or fp16 after every token (K = V = 64)\nrelative L2 error of o over tokens T/2 < t <= T, against the fp64 loop; %s", machine) noenhanced font ',16'
stats rows(file, '1') using 3 nooutput
T_low = STATS_min; T_high = STATS_max
set logscale xy
set logscale x 2
set xrange [T_low / 1.3 : T_high * 1.3]
set xtics () ; do for [e = int(log(T_low) / log(2) + 0.5) : int(log(T_high) / log(2) + 0.5) : 2] { set xtics add (sprintf("%d", int(2**e)) 2**e) }
set format y '10^{%L}'
set xlabel 'sequence length T (tokens)'
set ylabel 'relative L2 error of o'
set bmargin at screen 0.33
set key at screen 0.5, screen 0.14 center center vertical maxrows 3 width -5 samplen 2.5 noenhanced
set label 100 sprintf("data: %s (%s); α = exp(g), the gate: α ≈ 0.5 forgets fast, α ≈ 0.99999 almost not at all", shown('precision.dat'), made_short)
formats = "fp32 bf16 fp16"
regimes = "alpha~0.5 alpha~0.99-0.999 alpha~0.99999"
colors = "1 2 9"
shown_regimes = "α≈0.5 α≈0.99-0.999 α≈0.99999"
sel(f, r) = rows(file, sprintf("$1 == \"%s\" && $2 == \"%s\"", f, r))
plot for [i = 0:8] sel(word(formats, i / 3 + 1), word(regimes, i % 3 + 1)) using 3:4 \
     with linespoints ls (word(colors, i / 3 + 1) + 0) pt (4 + 2 * (i % 3)) \
     title sprintf('%s state, %s', word(formats, i / 3 + 1), word(shown_regimes, i % 3 + 1))
