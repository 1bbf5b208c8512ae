# gpu_progression.gp -- the GPU stages 01 to 07 beside the public kernels FLA and FlashQLA: time
# per forward pass at six shapes, one bar a stage or peer, log scale. Each bar is the newest
# measurement of that stage or peer at that shape among the committed data files (newest by the
# code each was measured at, as their headers name it):
#   01_cuda, 03, 04          gpu_shapes.dat at its two shapes (the only measurements there)
#   05_cuda                  gpu_shapes.dat at its two shapes; stage06_shapes.dat at the four
#                            K = 128 shapes of stage 06's benchmark
#   06                       stage06_vs_fla.dat at (1, 16384, 8, 64); stage07_shapes.dat at
#                            (1, 65536, 8, 128); peers.dat at the four K = 128 shapes
#   07                       stage07_shapes.dat (its shapes: these two and (8, 4096, 16, 128))
#   FLA (bf16, CUDA graph)   as 06: stage06_vs_fla.dat, stage07_shapes.dat, peers.dat
#   FlashQLA (bf16, graph)   peers.dat (only the four K = 128 shapes)
# A stage or peer not measured at a shape has no bar there (the bars of a shape are packed, in
# the key's order); the note under the figure says which are missing.
load 'common.gp'
set output out_dir.'/gpu_progression.png'
shapes = data('gpu_shapes.dat'); s06 = data('stage06_shapes.dat'); vs_fla = data('stage06_vs_fla.dat')
s07 = data('stage07_shapes.dat'); peers = data('peers.dat')
# pick(file, condition, column): that column of the first row meeting the awk condition, or -
pick(file, condition, column) = system(sprintf("awk '!/^#/ && %s { print $%d; found = 1; exit } END { if (!found) print \"-\" }' %s", condition, column, file))
# the shape's condition in each file's columns
at_shapes(name, stage) = sprintf("$1 == \"%s\" && $2 == \"%s\"", name, stage)      # gpu_shapes.dat: name stage B T H K V
at_bthk(b, t, h, k, first) = sprintf("$%d == %d && $%d == %d && $%d == %d && $%d == %d", first, b, first + 1, t, first + 2, h, first + 3, k)
# the six shapes: (B, T, H, K = V) and the eight times at each (ms, or - where not measured)
array B[6] = [1, 1, 8, 1, 4, 2]; array T[6] = [16384, 65536, 4096, 8192, 4096, 16384]
array H[6] = [8, 8, 16, 96, 64, 16]; array K[6] = [64, 128, 128, 128, 128, 128]
bars = 8
array ms[6 * bars]
at(i, first) = at_bthk(B[i], T[i], H[i], K[i], first)
do for [i = 1 : 2] {
    name = i == 1 ? "seed" : "long"
    ms[(i - 1) * bars + 1] = pick(shapes, at_shapes(name, "01_naive_loop_cuda"), 9)
    ms[(i - 1) * bars + 2] = pick(shapes, at_shapes(name, "03_parallel_scan_cuda"), 9)
    ms[(i - 1) * bars + 3] = pick(shapes, at_shapes(name, "04_two_phase_scan_cuda"), 9)
    ms[(i - 1) * bars + 4] = pick(shapes, at_shapes(name, "05_wy_chunked_cuda"), 9)
    ms[(i - 1) * bars + 5] = i == 1 ? pick(vs_fla, at(i, 1), 6) : pick(s07, at(i, 2), 8)
    ms[(i - 1) * bars + 6] = pick(s07, at(i, 2), 9)
    ms[(i - 1) * bars + 7] = i == 1 ? pick(vs_fla, at(i, 1), 8) : pick(s07, at(i, 2), 11)
    ms[(i - 1) * bars + 8] = "-"
}
do for [i = 3 : 6] {
    do for [j = 1 : 3] { ms[(i - 1) * bars + j] = "-" }
    ms[(i - 1) * bars + 4] = pick(s06, at(i, 1)." && $6 == \"05_cuda\"", 7)
    ms[(i - 1) * bars + 5] = pick(peers, "$1 == \"06\" && ".at(i, 2), 7)
    ms[(i - 1) * bars + 6] = pick(s07, at(i, 2), 9)
    ms[(i - 1) * bars + 7] = pick(peers, "$1 == \"06\" && ".at(i, 2), 8)
    ms[(i - 1) * bars + 8] = pick(peers, "$1 == \"06\" && ".at(i, 2), 9)
}
# the bars, packed: x, time, series; a shape's label under the middle of its bars
set print $packed
x = 0
set xtics ()
do for [i = 1 : 6] {
    first = x
    do for [j = 1 : bars] {
        if (ms[(i - 1) * bars + j] ne "-") { print sprintf("%g %s %d", x, ms[(i - 1) * bars + j], j); x = x + 1 }
    }
    set xtics add (sprintf("B=%d, T=%d\nH=%d, K=V=%d", B[i], T[i], H[i], K[i]) (first + x - 1) / 2.0)
    x = x + 1.5
}
unset print
names = "01 naive loop|03 parallel scan|04 two-phase scan|05 WY chunked|06 warp-specialized|07 sequence parallel|FLA 0.6.0|FlashQLA 0.1.3"
name(j) = system(sprintf("echo '%s' | cut -d'|' -f%d", names, j))
# the stages in greens (the CUDA ports of the CPU stages) and blues (the tensor-core stages),
# the peers in orange and pink
array color[8] = [0xc7e9c0, 0xa1d99b, 0x74c476, 0x31a354, 0x4292c6, 0x08306b, 0xd95f02, 0xe7298a]
set title sprintf("The GPU stages 01 to 07 beside FLA and FlashQLA: one forward pass at six shapes (B, T, H, K = V)\n%s", machine) noenhanced font ',16'
set ylabel 'median time per forward pass (ms, log scale)'
set logscale y
set yrange [0.05 : 5000]
set format y '%g'
set xrange [-1 : x - 1.5]
set xtics nomirror scale 0 font ',13' noenhanced
set grid noxtics ytics
set style fill solid 0.9 border rgb '#333333'
set boxwidth 0.85
set lmargin at screen 0.085; set rmargin at screen 0.985
set tmargin at screen 0.885; set bmargin at screen 0.335
set key at screen 0.5, screen 0.128 center center horizontal maxrows 2 width -3 samplen 1.5 noenhanced
set label 100 sprintf("data (%s/): gpu_shapes.dat (01, 03, 04, 05 at the first two shapes), stage06_shapes.dat (05 at K = 128), stage06_vs_fla.dat (06, FLA at the first),\nstage07_shapes.dat (06, 07, FLA at the second; 07 at the third), peers.dat (06, FLA, FlashQLA at K = 128); measured from 2026-11-29 to 2026-12-03", data_shown) at screen 0.008, screen 0.045
set label 101 "01, 03, 04, 05: CUDA, fp32; 06, 07: bf16 on tensor cores; FLA and FlashQLA: bf16, replayed from a CUDA graph. No bar: not measured at that shape\n(FlashQLA runs K = V = 128 only and was not run at T = 65536; 01, 03, 04 not at the last four shapes; 07 not at the last three)." \
    at screen 0.5, screen 0.215 center font ',12' noenhanced
plot $packed using 1:2:(color[int($3)]) with boxes lc rgb variable notitle, \
     $packed using 1:2:(sprintf($2 < 1 ? "%.3f" : $2 < 100 ? "%.2f" : "%.0f", $2)) with labels rotate by 90 left offset 0, 0.35 font ',11' notitle, \
     for [j = 1 : bars] NaN with boxes lc rgb color[j] title name(j)
