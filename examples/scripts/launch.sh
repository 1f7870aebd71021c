#!/bin/sh
# Asks for confirmation (an elicitation through the mcp-tasks line protocol), then counts down.
set -eu
total=${1:-10}
echo "::status waiting for a go"
echo '::ask {"message": "Launch the countdown?", "schema": {"type": "object", "properties": {"go": {"type": "boolean", "title": "Launch?"}}, "required": ["go"]}}'
read -r answer
case "$answer" in
  *'"go":true'*) ;;
  *) echo "not launched: $answer"; exit 0 ;;
esac
i=0
while [ "$i" -lt "$total" ]; do
  i=$((i + 1))
  echo "::progress $i/$total"
  sleep 1
done
echo "launched after $total seconds"
