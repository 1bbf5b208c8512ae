# error_sources.gp -- where stage 06's error enters: each of its roundings alone, then each
# mode's set, emulated in double (plots/error_sources.c), the worse of o's and the state's
# relative L2 error against the fp64 loop on the same bf16 inputs, one head of 65536 tokens at
# K = V = 128, with the contract's gates and with every gate times 1e-3 (data:
# error_sources.dat; docs/precision.md, "Where stage 06's error enters").
load 'common.gp'
set output out_dir.'/error_sources.png'
file = data('error_sources.dat')
set title sprintf("Where stage 06's error enters: one rounding at a time, then each mode's set (emulated in double)\n65536 tokens, K = V = 128, the worse of o and the state against the fp64 loop; %s", machine) noenhanced font ',16'
# a row a configuration: its name, then the worse error with fast gates and with slow ones
table = sprintf("< awk 'NR > 1 && !/^#/ && $2 == 65536 && $3 == 128 && $1 != \"exact\" { e = ($5 > $6 ? $5 : $6); if ($4 == \"fast\") { order[++n] = $1; fast[$1] = e } else slow[$1] = e } END { for (i = 1; i <= n; i++) print order[i], fast[order[i]], slow[order[i]] }' %s", file)
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set logscale y
set yrange [1e-10 : 1]
set format y '10^{%L}'
set ylabel 'relative L2 error, the worse of o and the state'
set xtics rotate by 30 right noenhanced font ',13'
set bmargin at screen 0.3
set key top left vertical noenhanced
set label 100 sprintf("data: %s (%s)\ndefault: every rounding stage 06 makes; precise: --precise (W, S, Vnew and P as two bf16 terms); the rest split more (docs/precision.md)", shown('error_sources.dat'), made_short) at screen 0.01, screen 0.06 font ',12' noenhanced
set arrow 1 from graph 0, first 1e-5 to graph 1, first 1e-5 nohead ls 6
plot table using 2:xtic(1) ls 1 title 'fast gates (the contract: α ≈ 0.5)', \
     '' using 3 ls 2 title 'slow gates (every g times 1e-3)', \
     1/0 with lines ls 6 title "the goal of --precise: 1e-5"
