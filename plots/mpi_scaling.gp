# mpi_scaling.gp -- stage 08's strong scaling: time per phase against ranks (plots/data/mpi_scaling_16cores.dat, the
# device machine's 16 cores; the 2-core development machine's points are in mpi_scaling_2cores.dat).
load 'common.gp'
set output 'mpi_scaling.png'
set title sprintf("Stage 08 under MPI: one sequence, B=1 H=8 K=V=64, T=2^18\n%s", machine) noenhanced
set xlabel "MPI ranks (one thread each)"
set ylabel "median time per forward pass (ms)"
set key noenhanced
set style data histograms
set style histogram rowstacked
set style fill solid 0.8 border -1
set boxwidth 0.6
set yrange [0:*]
set offsets 0, 0, graph 0.12, 0 # room for the labels above the bars
data = rows('data/mpi_scaling_16cores.dat', '$1 ~ /^[0-9]/')
plot data using 3:xtic(1) title "phase 1: fold (rank 0: its replay)" ls 1, \
     '' using 4 title "phase 2: MPI_Exscan" ls 2, \
     '' using 5 title "phase 3: replay" ls 3, \
     '' using 0:2:(sprintf("%.2fx (eq. 17: %.1fx)", $6, $1 > 1 ? ($1 + 0.4) / 2.4 : 1)) with labels center offset 0,0.8 font ",9" notitle
