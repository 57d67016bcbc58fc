#!/usr/bin/env bash
# What a ctest run did not check, from its log: the tests skipped whole (exit 77) and the
# checks that passing tests skipped inside ("skip: why" lines), counted by reason. Silent
# when nothing was skipped. Usage: scripts/skip_summary.sh BUILD/Testing/Temporary/LastTest.log
log=${1:?usage: $0 LastTest.log}
[ -f "$log" ] || exit 0
lines=$(grep -ah '^skip: ' "$log" | sort | uniq -c | sort -rn)
[ -n "$lines" ] || exit 0
echo "skipped ($(printf '%s\n' "$lines" | awk '{n += $1} END {print n}') in all, by reason):"
printf '%s\n' "$lines"
