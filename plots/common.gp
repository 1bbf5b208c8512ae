# common.gp -- shared look of every figure (loaded by each script)
set terminal pngcairo size 960,620 enhanced font 'DejaVu Sans,11'
set grid lc rgb '#dddddd'
set key outside right top box opaque
set datafile missing '-'
set style line 1 lc rgb '#1b9e77' lw 2 pt 7
set style line 2 lc rgb '#d95f02' lw 2 pt 5
set style line 3 lc rgb '#7570b3' lw 2 pt 9
set style line 4 lc rgb '#e7298a' lw 2 pt 11
set style line 5 lc rgb '#66a61e' lw 2 pt 13
set style line 6 lc rgb '#444444' lw 2 pt 3 dt 2
# rows(file, condition): the rows of a data file that satisfy an awk condition, as a gnuplot
# data source; filtering (instead of NaN for other rows) keeps each curve's line unbroken.
rows(file, condition) = sprintf("< awk 'NR > 1 && !/^#/ && %s' %s", condition, file)
# first_column(s): the rows whose first column is s (a stage's name, a shape)
first_column(s) = sprintf("$1 == \"%s\"", s)
stage(s) = first_column(s)
