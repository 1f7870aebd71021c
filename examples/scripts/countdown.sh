#!/bin/sh
# Counts down, one line per second, reporting progress through the mcp-tasks line protocol.
set -eu
total=${1:-60}
i=0
echo "::status counting down from $total"
while [ "$i" -lt "$total" ]; do
  left=$((total - i))
  echo "$left"
  i=$((i + 1))
  echo "::progress $i/$total $left seconds to go"
  sleep 1
done
echo "liftoff after $total seconds"
