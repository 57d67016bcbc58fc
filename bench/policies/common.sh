# The set-up the policy benchmarks share, sourced by each with its arguments:
#   . "$(dirname "$0")/common.sh" "$@"
# From the repository root: $out, the output folder (first argument, default
# docs/perf/policies), made; $moevm, the CLI (second argument, default ./build/moevm),
# checked; $tmp, a scratch folder removed when the script exits.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=${1:-docs/perf/policies}
moevm=${2:-./build/moevm}
[ -x "$moevm" ] || { echo "build first: make build" >&2; exit 1; }
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
