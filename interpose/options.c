/* The interposer's MOEVM_* options (options.h). */
#include "interpose/options.h"

const mvm_option_desc mvm_opt_preload_min = {
    "MOEVM_PRELOAD_MIN", MVM_OPT_SIZE, "2M", NULL,
    "interposer: device allocations of at least this many bytes "
    "become ranges of the managed space; smaller ones stay native"};

const mvm_option_desc mvm_opt_oversubscribe = {
    "MOEVM_OVERSUBSCRIBE", MVM_OPT_SIZE, "0", NULL,
    "interposer: host-backed bytes the program may allocate "
    "beyond MOEVM_GPU_BUDGET (pinned at the first managed "
    "allocation); 0 = none"};

const mvm_option_desc mvm_opt_preload_slices = {
    "MOEVM_PRELOAD_SLICES", MVM_OPT_CHOICE, "on", "off|on",
    "interposer: cut a tensor whose launches point at a stride "
    "of a page or more inside it (the experts of a fused MoE "
    "weight) into slices made resident one by one"};

const mvm_option_desc mvm_opt_preload_prefetch = {
    "MOEVM_PRELOAD_PREFETCH", MVM_OPT_CHOICE, "off", "off|on",
    "interposer: learn the order of the program's launches and copy "
    "the pages the next ones will use while the current ones run "
    "(they land at the next drain); off until a GPU measures it"};

const mvm_option_desc mvm_opt_preload_routing = {
    "MOEVM_PRELOAD_ROUTING", MVM_OPT_CHOICE, "on", "off|on",
    "interposer: cut a fused expert tensor copied from a mapped GGUF "
    "file (llama.cpp's *_exps) into its experts, and before a kernel "
    "launch on its base read the routing ids from the kernel's "
    "arguments (one stream sync) to load only the experts it uses"};

const mvm_option_desc mvm_opt_report = {
    "MOEVM_REPORT", MVM_OPT_STRING, "", NULL,
    "interposer: write a JSON report (allocations by call site, moves, "
    "hit rate, time waited) to this path at exit"};

const mvm_option_desc mvm_opt_report_skip = {
    "MOEVM_REPORT_SKIP", MVM_OPT_STRING, "libcudart,libc10_cuda", NULL,
    "interposer: libraries (comma-separated name prefixes) whose "
    "frames a call site skips, as it skips the interposer's own: "
    "the CUDA runtime and PyTorch's caching allocator, so that "
    "the site names their caller; none: keep every frame"};

static const mvm_option_desc *const list[] = {
    &mvm_opt_preload_min, &mvm_opt_oversubscribe, &mvm_opt_preload_slices,
    &mvm_opt_preload_prefetch, &mvm_opt_preload_routing, &mvm_opt_report, &mvm_opt_report_skip,
};

const mvm_option_table mvm_interpose_options = {list, sizeof list / sizeof *list};
