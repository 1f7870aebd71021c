#!/bin/sh
# A pretend build for the MCP Events example (README "MCP Events"): reports progress, then
# publishes a build.finished event (declared in [[events.types]]) for the branch it was given.
branch="$1"
echo "::progress 1/2 compiling $branch"
sleep 1
echo "::progress 2/2 testing $branch"
sleep 1
echo "::event build.finished {\"branch\": \"$branch\", \"status\": \"passed\"}"
echo "built $branch"
