# Sourced by bench/cpu's scripts that set moevm against a llama.cpp tool on one model file
# (depth.sh, perplexity.sh), from the repository's root, with `me` (the script's name),
# `model` and `tool` (llama-bench, llama-perplexity) set: moevm built, llama.cpp's CPU
# build made where the tool is missing, its libraries found, a scratch `tmp` removed at
# exit, and the machine's line that every result in docs/perf/cpu.md starts with.
bin=.llamacpp/build-cpu/bin
die() { echo "$me: $*" >&2; exit 1; }
[ -f "$model" ] || die "$model: no such file"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target moevm_cli >/dev/null
[ -x "$bin/$tool" ] || bash bench/llamacpp/build.sh cpu
export LD_LIBRARY_PATH=$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "== $(date -u +%Y-%m-%d) $(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
