#!/bin/sh
# Counts the lines of the files under a folder, one entry per second so the progress is visible.
set -eu
dir=${1:?usage: count-lines.sh FOLDER}
[ -d "$dir" ] || { echo "not a folder: $dir" >&2; exit 2; }
files=$(find "$dir" -maxdepth 1 -type f | sort)
total=$(printf '%s\n' "$files" | grep -c . || true)
[ "$total" -gt 0 ] || { echo "no files in $dir"; exit 0; }
n=0
sum=0
echo "::status scanning $total files in $dir"
for f in $files; do
  lines=$(wc -l < "$f")
  sum=$((sum + lines))
  n=$((n + 1))
  echo "$lines $f"
  echo "::progress $n/$total $(basename "$f")"
  sleep 1
done
echo "total: $sum lines in $n files"
