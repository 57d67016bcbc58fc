# Reading `moevm sim`'s tables, for gap.sh and foresight.sh (sourced):
#   hit FILE LABEL       the hit rate (%) of the row whose label starts with LABEL
#   closed HIT LRU BOUND the share of the LRU-to-bound gap that HIT closes, 2 decimals
hit() { awk -v l="$2" 'index($0, l) == 1 { print $(NF - 10); exit }' "$1"; }
closed() {
    awk -v h="$1" -v a="$2" -v b="$3" 'BEGIN { printf "%.2f", (b > a ? (h - a) / (b - a) : 0) }'
}
