/* The engine's MOEVM_* options (engine_options.h). */
#include "engine/forward/engine_options.h"

#include "engine/compute/pool.h"
#include "engine/model/model.h"

#define TEXT_OF(x) #x
#define TEXT(x) TEXT_OF(x)

const mvm_option_desc mvm_opt_threads = {
    "MOEVM_THREADS", MVM_OPT_INT, "0", "0.." TEXT(MVM_POOL_MAX_THREADS),
    "CPU threads of the engine (`moevm run -t`); 0 = one per core near "
    "the GPU (of its NUMA node) on the cuda backend, else one per core"};

const mvm_option_desc mvm_opt_cpu_simd = {
    "MOEVM_CPU_SIMD", MVM_OPT_CHOICE, "auto",
    "auto|avx512vnni|avx512|avxvnni|avx2|dotprod|neon|scalar",
    "SIMD level of the CPU kernels; auto = the best this CPU has (a "
    "level it lacks is an error)"};

const mvm_option_desc mvm_opt_kv_type = {
    "MOEVM_KV_TYPE", MVM_OPT_CHOICE, "f16", "f16|f32|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|iq4_nl",
    "engine: the type of the KV cache's elements (`moevm run "
    "--kv-type`, llama.cpp's -ctk/-ctv); f16 keeps half f32's bytes, "
    "q8_0 27%, q4_0 14% (q8_0 on either backend, but not for "
    "deepseek2's latent rows on the GPU; the other quantized types "
    "and bf16: the CPU backend's); f32 the exact values"};

const mvm_option_desc mvm_opt_admit = {
    "MOEVM_ADMIT", MVM_OPT_CHOICE, "on", "off|on|steps",
    "engine on a GPU: an expert a step ran from its home (on the CPU, or "
    "read in place) is loaded into the device cache in the background "
    "afterwards when the evict module would keep it over its victim, "
    "one a step at most; on: only while no other copy is queued; steps: "
    "whatever is (for MOEVM_BUDGET_ROUTING=in-place, whose steps no load "
    "delays; docs/policies.md)"};

const mvm_option_desc mvm_opt_deterministic = {
    "MOEVM_DETERMINISTIC", MVM_OPT_CHOICE, "off", "off|on",
    "engine: each expert copy completes before the next residency decision, "
    "in order, so hit rates and moves repeat exactly from run to run (tests, "
    "comparisons with `moevm sim`); off lets copies overlap the computation"};

const mvm_option_desc mvm_opt_prefetch = {
    "MOEVM_PREFETCH", MVM_OPT_CHOICE, "top-k", "top-k|window",
    "engine: what the predict module's forecast of the next layer "
    "prefetches: top-k, its top_k most likely experts; window, MoEpic's "
    "(§3.3): every expert it ranks, most likely first, until that layer "
    "routes, when the copies not started are taken back (docs/policies.md)"};

const mvm_option_desc mvm_opt_gpu_profile = {
    "MOEVM_GPU_PROFILE", MVM_OPT_CHOICE, "off", "off|on",
    "engine on a GPU: time every kernel and copy of the device pass and, "
    "when its context ends, print to stderr how long each kind took and "
    "how much of the time the device was busy at all (the rest is the "
    "host's: routing, launches, round trips)"};

const mvm_option_desc mvm_opt_gemm_rows = {
    "MOEVM_GEMM_ROWS", MVM_OPT_INT, "32", "0..1048576",
    "engine on a GPU: a product of at least this many rows (a batch's "
    "tokens, or one expert's tokens in a MoE step) dequantizes its weights "
    "to F16 and multiplies them on the tensor cores with cuBLAS, where "
    "MOEVM_MMQ does not take them; smaller ones, and all of them with 0 or "
    "without cuBLAS, use the integer kernels (decode)"};

const mvm_option_desc mvm_opt_gemm_scratch = {
    "MOEVM_GEMM_SCRATCH", MVM_OPT_SIZE, "128M", NULL,
    "engine on a GPU: device memory for the F16 weights of MOEVM_GEMM_ROWS's "
    "products; a MoE step's experts go in batches of as many as it holds, a "
    "larger matrix or expert in chunks of rows or channel groups (at least "
    "one row or group, whatever this says); a prompt's attention scores "
    "share it (up to as much)"};

const mvm_option_desc mvm_opt_gemm_batch = {
    "MOEVM_GEMM_BATCH", MVM_OPT_CHOICE, "on", "off|on",
    "engine on a GPU: a MoE step's experts on the tensor cores in batches, "
    "six launches a batch, and a prompt's attention as batched products "
    "(on); off, an expert at a time, five launches each, and the attention "
    "kernel (the way before, to compare)"};

const mvm_option_desc mvm_opt_mmq = {
    "MOEVM_MMQ", MVM_OPT_CHOICE, "auto", "auto|off|on|experts",
    "engine on a GPU of compute capability 8.0 or later: on, a step of "
    "several tokens (a prompt) multiplies its Q8_0, MXFP4 (gpt-oss) or "
    "IQ4_NL experts, or the K-quant experts of Q2_K, Q3_K_M, Q4_K_M, Q5_K_M, "
    "Q6_K and IQ4_XS files (Q2_K to Q6_K and IQ4_XS gate, up and down), on the "
    "int8 tensor cores, all of them in two launches whatever their token counts "
    "(kernels/cuda/mmq.cu), and a batch of 9 tokens or more its dense matrices "
    "of those types (attention, shared experts, dense FFNs, the output), in "
    "place of MOEVM_GEMM_ROWS's F16 products and the integer kernels, as "
    "llama.cpp's mul_mat_q does; off, those; experts, the experts alone on "
    "mmq's kernels (the dense matrices as off has them); auto, on for all of "
    "them (on an H200, pp512 2.7x off's for Qwen3-30B-A3B's shape in Q8_0, 1.46x for "
    "OLMoE-1B-7B in Q4_K_M with the experts' alone, docs/perf/offload.md; "
    "the other types and the dense matrices not yet measured)"};

const mvm_option_desc mvm_opt_attn_mma = {
    "MOEVM_ATTN_MMA", MVM_OPT_CHOICE, "off", "auto|off|on",
    "engine on a GPU of compute capability 8.0 or later: on, attention over "
    "an F16 cache runs on the F16 tensor cores (kernels/cuda/attention_mma.cu: "
    "each kv head's rows read once for 16 (query, head) pairs, the CUDA cores' "
    "precision kept) wherever it takes the shape (no window: gpt-oss's "
    "windowed blocks stay); off, on the CUDA cores (kernels/cuda/ops.cu); "
    "auto, on for latent rows (MLA: deepseek2, whose cache ops.cu's kernel "
    "reads 16 times, at under 1% of the bandwidth), off for grouped-query "
    "attention. The default is off until a GPU has run the kernel (checked "
    "so far over the emulator only), then auto"};

const mvm_option_desc mvm_opt_cublas_library = {
    "MOEVM_CUBLAS_LIBRARY", MVM_OPT_STRING, "auto", NULL,
    "engine on a GPU: the cuBLAS library to load for MOEVM_GEMM_ROWS's "
    "products (a name or path for dlopen); auto = the first of "
    "libcublas.so.13, libcublas.so.12 and libcublas.so that loads"};

const mvm_option_desc mvm_opt_device_routing = {
    "MOEVM_DEVICE_ROUTING", MVM_OPT_CHOICE, "graph", "graph|launches|off",
    "engine on a GPU: once every expert is resident (asked for as soon as "
    "the budget holds them all), a decode token routes on the device and "
    "no layer waits for the host (the policies see its steps after it); "
    "graph queues the token as one CUDA graph, updated in place from token "
    "to token; launches queues its kernels one by one; off sends every "
    "layer's routing through the host (engine/forward/forward_cuda_route.c)"};

const mvm_option_desc mvm_opt_prompt_routing = {
    "MOEVM_PROMPT_ROUTING", MVM_OPT_CHOICE, "device", "device|host",
    "engine on a GPU, a prompt batch (several tokens) once every expert is "
    "resident and pinned (as MOEVM_DEVICE_ROUTING's decode): device routes "
    "and groups its rows on the device, so that no layer waits for the "
    "host, and the policies see each layer's step while the next ones "
    "compute; host routes each layer on the host, which waits for the "
    "router's logits; device needs MOEVM_DEVICE_ROUTING on, experts the "
    "kernels take (not cuBLAS's: MOEVM_MMQ on their types, or "
    "MOEVM_GEMM_ROWS=0), else host (engine/forward/forward_cuda_prompt.c)"};

const mvm_option_desc mvm_opt_budget_routing = {
    "MOEVM_BUDGET_ROUTING", MVM_OPT_CHOICE, "host", "host|in-place|read-through",
    "engine on a GPU at a budget (not every expert resident), decode: "
    "host routes each layer on the host, which waits for the router's "
    "logits, then loads the misses or places them by the assign module; "
    "in-place routes the token on the device as MOEVM_DEVICE_ROUTING does "
    "at 100%, the kernels reading each expert that is not resident at its "
    "home in place over the bus, and between tokens the policies see the "
    "token's steps and admission (MOEVM_ADMIT) and the prefetches load "
    "experts for the tokens after; read-through as in-place, but the "
    "kernels store each miss as they read it into a slab set aside, and "
    "it lands after the token with no copy (admission off: every miss "
    "enters while the pool has slabs); both need homes the device can "
    "read and the assign module gpu, else host (on an H200 at 25%: "
    "in-place 0.3x host, read-through 0.86-0.90x, docs/perf/offload.md)"};

const mvm_option_desc mvm_opt_load_wait = {
    "MOEVM_LOAD_WAIT", MVM_OPT_CHOICE, "device", "device|host|device-late|device-view",
    "engine on a GPU at a budget, homes unmapped (MOEVM_HOME_MAP=off): how a "
    "step's experts wait for their copies; device: the compute stream waits "
    "for each copy once it is queued and mapped, and the host queues on "
    "(mvm_expert_wait_on), the experts already there first; host: the host "
    "waits for each copy to land before it queues the experts that read it; "
    "device-late: as device, but the step queues nothing until all its "
    "copies are queued and mapped, then its experts in one launch (the "
    "worker's maps then meet an idle device; an experiment, "
    "docs/perf/engine.md); device-view: as device, but a step's kernels read "
    "each miss where its copy lands, the device pool's view of its slab, once "
    "the copy is queued, not once the slab is mapped at the expert's address "
    "(mvm_expert_wait_view: the worker's map leaves the step's path; an "
    "experiment)"};

const mvm_option_desc mvm_opt_device_cpu = {
    "MOEVM_DEVICE_CPU", MVM_OPT_CHOICE, "off", "off|on",
    "engine on a GPU, decode routed on the device at a budget "
    "(MOEVM_BUDGET_ROUTING in-place or read-through): on gives the CPU's "
    "threads the misses they finish before the link would (the cost "
    "model's per-miss times, the CPU's as measured), computed from their "
    "homes while the GPU computes the rest, and the token's kernels wait "
    "for their rows (engine/forward/forward_cuda_cpu.c); with --n-cpu-moe "
    "99 every choice, decode then routed on the device as one graph, not "
    "layer by layer through the host; off until a GPU run has measured it"};

const mvm_option_desc mvm_opt_pack = {
    "MOEVM_PACK", MVM_OPT_CHOICE, "on", "off|on",
    "engine on a GPU whose budget holds every expert (100%, or an automatic "
    "budget the model fits): on lays them back to back, each its own bytes, "
    "where in pages each takes whole 2 MiB pages (Qwen3-30B-A3B's 4.8 MiB "
    "Q8_0 expert took 6); nothing moves then, so pages buy nothing"};

const mvm_option_desc mvm_opt_slots = {
    "MOEVM_SLOTS", MVM_OPT_CHOICE, "off", "off|on",
    "engine on a GPU at a budget (the experts not packed: MOEVM_PACK): on "
    "reads each resident expert where its copy landed, its slab in the "
    "device pool, and never maps it at its own address, so that a move is "
    "its copy alone, without cuMemMap, cuMemSetAccess and cuMemUnmap (each "
    "25-120 us on an H200 while kernels run), in pages of 64 KiB or more, "
    "not 2 MiB (an expert takes about its bytes); whole experts only (a config "
    "module's splits are not made), and a token never routed on the device with "
    "every expert pinned (docs/architecture.md, \"Slots\"). On an H200 at 25% "
    "(Qwen3-30B-A3B's shape, one run) as fast as pages at the same budget with "
    "432 MiB less device memory, 1.14-1.16x their decode at the same memory; off "
    "until a second model and budget are measured"};

const mvm_option_desc mvm_opt_pdl = {
    "MOEVM_PDL", MVM_OPT_CHOICE, "off", "off|on",
    "engine on a GPU of compute capability 9.0 or later: on lets each kernel of a decode "
    "token's CUDA graph start while the one before it finishes (programmatic dependent "
    "launch: its blocks placed and waiting, where the device would otherwise start it only "
    "after, a few microseconds a kernel); every kernel still waits for the one before at its "
    "start (engine/compute/ptx_pdl.c). Older devices ignore it. Off: on an H200 it "
    "decoded no faster (Qwen3-30B-A3B's shape at 100%: 642 against 647 tok/s)"};

static const mvm_option_desc *const list[] = {
    &mvm_opt_threads, &mvm_opt_cpu_simd, &mvm_opt_kv_type, &mvm_opt_admit,
    &mvm_opt_deterministic, &mvm_opt_prefetch, &mvm_opt_expert_tiles, &mvm_opt_gpu_profile,
    &mvm_opt_gemm_rows, &mvm_opt_gemm_scratch, &mvm_opt_gemm_batch, &mvm_opt_mmq,
    &mvm_opt_attn_mma, &mvm_opt_cublas_library,
    &mvm_opt_device_routing, &mvm_opt_prompt_routing, &mvm_opt_budget_routing, &mvm_opt_load_wait, &mvm_opt_device_cpu,
    &mvm_opt_pack, &mvm_opt_slots, &mvm_opt_pdl,
};

const mvm_option_table mvm_engine_options = {list, sizeof list / sizeof *list};
