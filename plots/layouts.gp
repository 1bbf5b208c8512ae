# layouts.gp -- the layouts table as a figure: each row of layouts_ours.dat (the K = V = 128
# shapes of docs/06 and docs/07, grouped value heads, a packed batch, K = V = 64), our stage's
# binary and every public GDN forward beside it, one run (data made by plots/bench_layouts.sh;
# a peer that does not run a row, nan there, has no bar).
load 'common.gp'
set output out_dir.'/layouts.png'
file = data('layouts_ours.dat')
set ylabel "median time per forward pass (ms, log scale)"
set logscale y
set format y "%g"
set style data histograms
set style histogram clustered gap 1.5
set style fill solid 0.85 border -1
set boxwidth 0.9
set key inside left top horizontal width 1 samplen 2.5
set bmargin 7
set xtics nomirror rotate by -25 font ',12' noenhanced
set grid ytics
set label 100 sprintf("data: %s (%s); ours: the stage the package picks for the row, its binary;\nFLA 0.6 (Triton), FlashInfer (CuTe DSL) and FlashQLA (TileLang, its context parallelism on), each replayed from a CUDA graph", shown('layouts_ours.dat'), made_short) at screen 0.008, screen 0.06
set title sprintf("Real model layouts: ours beside FLA, FlashInfer and FlashQLA\n%s", machine) noenhanced font ',16'
shapes = rows(file, '$1 != "shape"')
stats shapes using 9 nooutput
set xrange [-0.6:STATS_records - 0.4]
plot shapes using 9:xtic(1) ls 1 title "ours", \
     '' using 11 ls 2 title "FLA", \
     '' using 12 ls 3 title "FlashInfer", \
     '' using 13 ls 4 title "FlashQLA"
