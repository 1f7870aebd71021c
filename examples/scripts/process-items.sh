#!/bin/sh
# Works through ITEMS items, SECONDS each, and resumes where it stopped: after each item it prints
# `::checkpoint {"next": N}`, which mcp-tasks stores with the task; when the task resumes (after a
# restart, a deploy, a hand-off) this script is started again with MCP_TASKS_CHECKPOINT set to the
# last checkpoint and MCP_TASKS_ATTEMPT to the run's number. Each finished item is appended to
# LEDGER (a file, optional) as "item N attempt A": with resuming, every item appears once.
set -eu
items=${1:-10}
seconds=${2:-1}
ledger=${3:-}
attempt=${MCP_TASKS_ATTEMPT:-1}
next=0
if [ -n "${MCP_TASKS_CHECKPOINT:-}" ]; then
  next=$(printf '%s' "$MCP_TASKS_CHECKPOINT" | sed -n 's/.*"next": *\([0-9][0-9]*\).*/\1/p')
  next=${next:-0}
  echo "::status attempt $attempt: resuming at item $next of $items"
fi
first=$next
# Told to stop (a cancel, a hand-off): say where to go on from, then stop.
trap 'echo "::checkpoint {\"next\": $next}"; exit 143' TERM INT
i=$next
while [ "$i" -lt "$items" ]; do
  sleep "$seconds"
  if [ -n "$ledger" ]; then
    echo "item $i attempt $attempt" >> "$ledger"
  fi
  i=$((i + 1))
  next=$i
  echo "::checkpoint {\"next\": $next}"
  echo "::progress $i/$items item $i done (attempt $attempt)"
done
echo "processed $items items; this run (attempt $attempt) did items $first to $((items - 1))"
