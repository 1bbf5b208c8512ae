# layouts_flashqla.gp -- FlashQLA's published H200 forward table row for row, as a figure: for
# each group that plots/bench_layouts.sh measured (Qwen3.5-397B/122B at tensor parallelism 8, 4,
# 2 and 1, and 35B/9B/4B at 1: layouts_tp8.dat ... layouts_35b.dat), one panel of its 19 rows,
# our stage's binary beside FLA, FlashInfer and FlashQLA (its context parallelism on, and off),
# every time from one run. A peer that does not run a row (nan) has no bar.
# make plots draws it (plots/render.sh) where at least one of those files is.
load 'common.gp'
set output out_dir.'/layouts_flashqla.png'
groups = "tp8 tp4 tp2 tp1 35b"
titles = "'397B/122B, TP8: 2 key, 8 value heads' '397B/122B, TP4: 4 key, 16 value heads' '397B/122B, TP2: 8 key, 32 value heads' '397B/122B, TP1: 16 key, 64 value heads' '35B/9B/4B, TP1: 16 key, 32 value heads'"
have(g) = system(sprintf("test -f '%s' && echo 1 || echo 0", data('layouts_'.g.'.dat'))) + 0
panels = 0
do for [g in groups] { panels = panels + have(g) }
height = 150 + 330 * panels
set terminal pngcairo size 1280, height enhanced font 'DejaVu Sans,13'
set logscale y
set format y "%g"
set ylabel "ms (log scale)" offset 1.5
set style data histograms
set style histogram clustered gap 1.2
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
set xtics nomirror rotate by -30 font ',10' noenhanced
set key outside right top vertical samplen 2 font ',11'
set multiplot layout panels, 1 margins 0.07, 0.82, 100.0 / height, 1 - 90.0 / height spacing 0, 110.0 / height title sprintf("FlashQLA's H200 forward table, row for row: ours beside FLA, FlashInfer and FlashQLA (K = V = 128)\n%s", machine) noenhanced font ',15'
drawn = 0
do for [i = 1:words(groups)] {
    g = word(groups, i)
    if (have(g)) {
        file = data('layouts_'.g.'.dat')
        drawn = drawn + 1
        # the key in the first panel, the footnote under the last
        if (drawn > 1) { unset key }
        if (drawn == panels) {
            set label 100 sprintf("data: %s/layouts_GROUP.dat (%s); ours: the stage the package picks for the row, its binary; each peer replayed from a CUDA graph\n(or, where marked eager in the file, called eagerly); FlashQLA: its automatic context parallelism on (not exact), and off (exact)", data_shown, made_short) at screen 0.008, screen 30.0 / height left font ",10" tc rgb "#555555" noenhanced front
        } else { unset label 100 }
        stats rows(file, '$1 != "shape"') using 9 nooutput
        set xrange [-0.6:STATS_records - 0.4]
        set title word(titles, i) font ',13' offset 0, -0.6
        plot rows(file, '$1 != "shape"') using 9:xtic(1) ls 1 title "ours (binary)", \
             '' using 11 ls 2 title "FLA", \
             '' using 12 ls 3 title "FlashInfer", \
             '' using 13 ls 4 title "FlashQLA", \
             '' using 14 ls 5 title "FlashQLA exact"
    }
}
unset multiplot
