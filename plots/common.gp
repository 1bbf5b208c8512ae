# common.gp -- shared look of every figure (loaded by each script). 1280 x 720, a slide's size,
# with fonts large enough to read there. plots/render.sh sets, for each script:
#   machine    the data file's machine line (and, for make bench QUICK=1, the word quick)
#   data_dir   where the script reads its data files
#   data_shown that folder as the reader knows it (plots/data or build/quick/data), for footnotes
#   made       the data file's "made by" line (its command and date)
#   made_short the script of that line and its date, for long ones
#   out_dir    where the PNG goes
if (!exists("machine")) machine = 'machine not given'
if (!exists("made")) made = 'not given'
if (!exists("made_short")) made_short = made
if (!exists("data_dir")) data_dir = 'data'
if (!exists("data_shown")) data_shown = 'plots/data'
if (!exists("out_dir")) out_dir = '.'
set terminal pngcairo size 1280,720 enhanced font 'DejaVu Sans,15'
set grid lc rgb '#dddddd'
set key box opaque
set datafile missing '-'
set style line 1 lc rgb '#1b9e77' lw 2.5 pt 7 ps 1.3
set style line 2 lc rgb '#d95f02' lw 2.5 pt 5 ps 1.3
set style line 3 lc rgb '#7570b3' lw 2.5 pt 9 ps 1.5
set style line 4 lc rgb '#e7298a' lw 2.5 pt 11 ps 1.5
set style line 5 lc rgb '#66a61e' lw 2.5 pt 13 ps 1.5
set style line 6 lc rgb '#444444' lw 2.5 pt 3 dt 2
set style line 7 lc rgb '#e6ab02' lw 2.5 pt 15 ps 1.3
set style line 8 lc rgb '#a6761d' lw 2.5 pt 6 ps 1.3
set style line 9 lc rgb '#1f78b4' lw 2.5 pt 4 ps 1.3
# data(name): a data file's path for the script; shown(name): the same file as the reader names it
data(name) = data_dir.'/'.name
shown(name) = data_shown.'/'.name
# rows(file, condition): the rows of a data file that satisfy an awk condition, as a gnuplot
# data source; filtering (instead of NaN for other rows) keeps each curve's line unbroken.
rows(file, condition) = sprintf("< awk 'NR > 1 && !/^#/ && %s' %s", condition, file)
# count(file, condition, column): how many such rows have a number in that column (a skipped
# point has "-" or "skipped:<why>" there)
count(file, condition, column) = system(sprintf("awk 'NR > 1 && !/^#/ && %s && $%d ~ /^[-+]?[0-9.]+([eE][-+]?[0-9]+)?$/ { n++ } END { print n + 0 }' %s", condition, column, file)) + 0
# curve(file, condition, column): rows(file, condition), or, where no such row has a number in
# that column (a stage not run at any point of a sweep), one point far outside every figure's
# ranges (each column 1e-9), so that gnuplot draws nothing there and warns of nothing
curve(file, condition, column) = count(file, condition, column) > 0 ? rows(file, condition) : \
    "< echo x 1e-9 1e-9 1e-9 1e-9 1e-9 1e-9 1e-9 1e-9 1e-9 1e-9 1e-9 1e-9 1e-9 1e-9 1e-9 1e-9 1e-9 1e-9 1e-9"
# first_column(s): the rows whose first column is s (a stage's name, a shape)
first_column(s) = sprintf("$1 == \"%s\"", s)
stage(s) = first_column(s)
# power_of_two(e): 2^e as a tick label, 1/2^-e below 1 (1/128 reads better than 0.0078125)
power_of_two(e) = e < 0 ? sprintf("1/%d", int(2**(-e))) : sprintf("%d", int(2**e))
# label 100 is the footnote (the data files, how they were made), small and grey in the bottom
# margin; a script gives it its text: set label 100 "data: ..."
set label 100 '' at screen 0.008, screen 0.025 left font ',11' tc rgb '#555555' noenhanced front
