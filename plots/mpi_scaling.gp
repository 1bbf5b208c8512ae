# mpi_scaling.gp -- stage 08's strong scaling: time per phase against MPI ranks, one sequence
# (data: mpi_scaling_16cores.dat, a 16-core Intel Xeon host; the points of a 2-core AMD EPYC
# are in mpi_scaling_2cores.dat). Above each bar: the measured speedup over one rank and
# docs/08's eq. 17, the speedup the two passes allow: (N + 0.4) / 2.4 on N ranks.
load 'common.gp'
set output out_dir.'/mpi_scaling.png'
file = data('mpi_scaling_16cores.dat')
T = system(sprintf("sed -n 's/.*(T=\\([0-9]*\\).*/\\1/p' %s | head -1", file)) + 0
set title sprintf("Stage 08 under MPI: one sequence, B = 1, H = 8, K = V = 64, T = %d\n%s", T, machine) noenhanced font ',16'
set xlabel "MPI ranks (one thread each)"
set ylabel "median time per forward pass (ms)"
set key inside right top noenhanced width 1 samplen 2.5
set style data histograms
set style histogram rowstacked
set style fill solid 0.8 border -1
set boxwidth 0.6
stats rows(file, '$1 ~ /^[0-9]/') using 2 nooutput
set yrange [0 : STATS_max * 1.2] # room for the labels above the bars
set bmargin 5
set label 100 sprintf("data: %s (%s). Above each bar: the measured speedup over 1 rank; eq. 17 of docs/08, (N + 0.4) / 2.4", shown('mpi_scaling_16cores.dat'), made_short)
data = rows(file, '$1 ~ /^[0-9]/')
model(n) = n > 1 ? (n + 0.4) / 2.4 : 1
plot data using 3:xtic(1) title "phase 1: fold (rank 0: its replay)" ls 1, \
     '' using 4 title "phase 2: MPI_Exscan" ls 2, \
     '' using 5 title "phase 3: replay" ls 3, \
     '' using 0:2:(sprintf("%.2fx\neq. 17: %.1fx", $6, model($1))) with labels center offset 0, 1.6 font ",13" notitle
