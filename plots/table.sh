#!/bin/sh
# table.sh FILE COLUMNS [CONDITION] -- a Markdown table from a plots/data file, for docs/.
#   COLUMNS: comma-separated column names from the file's header line (e.g. stage,T,median_ms)
#   CONDITION: an awk condition on the row, using those names as v["name"] (default: all rows)
# Used inside generated blocks of docs (common/refresh_docs.sh), so tables are never typed by hand.
set -eu
file=$1
columns=$2
condition=${3:-1}
awk -v columns="$columns" -v file="$file" '
/^# machine: / { machine = substr($0, 12) }
/^# made by: / { made = substr($0, 12) }
/^#/ { next }
!header { for (i = 1; i <= NF; i++) index_of[$i] = i; header = 1
          n = split(columns, wanted, ",")
          line = "|"; rule = "|"
          for (c = 1; c <= n; c++) { line = line " " wanted[c] " |"; rule = rule " --- |" }
          print line; print rule; next }
{ for (name in index_of) v[name] = $(index_of[name])
  if (!('"$condition"')) next
  line = "|"
  for (c = 1; c <= n; c++) line = line " " v[wanted[c]] " |"
  print line }
END { printf "\nData: `%s`, measured on %s (%s).\n", file, machine, made }
' "$file"
