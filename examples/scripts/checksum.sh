#!/bin/sh
# Prints the SHA-256 and size of one file.
set -eu
f=${1:?usage: checksum.sh FILE}
echo "::status hashing $f"
size=$(wc -c < "$f")
sum=$(sha256sum "$f" | cut -d' ' -f1)
echo "::progress 1/1"
echo "$sum  $f ($size bytes)"
