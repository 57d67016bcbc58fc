/* `moevm info`: what moevm sees on this machine — topology, the CPU kernels' SIMD level, the
 * backend it would use, the page size and budget, HOST_NUMA support on CUDA, and the options
 * in effect. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "engine/api/threads.h"
#include "kernels/cpu/kernels.h"
#include "moevm/moevm.h"
#include "tools/cli.h"
#include "vmm/options.h"
#include "vmm/topo.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: moevm info\n"
               "  what moevm sees here: topology, SIMD level, backend, device, page size,\n"
               "  budget, where homes live, memory, and the MOEVM_* options in effect\n");
}

int mvm_cmd_info(int argc, char **argv)
{
    mvm_cli_iter it = {.cmd = "info", .usage = usage, .argc = argc, .argv = argv};
    int next = mvm_cli_next(&it); /* no options but --help */
    if (next != MVM_CLI_END)
        return next;
    printf("moevm %s\n", mvm_version());

    /* A one-page probe space shows what a real space would get: backend, device, page
     * size, where homes live and whether non-resident experts stay readable. */
    mvm_space_desc d;
    if (mvm_space_desc_init(&d) != MVM_OK)
        return mvm_cli_error("info", "options");
    d.n_layers = d.n_experts = 1;
    d.expert_bytes = 1;
    d.device_budget = MVM_BUDGET_AUTO;
    mvm_space *sp;
    if (mvm_space_create(&d, &sp) != MVM_OK)
        return mvm_cli_error("info", "opening the backend");
    mvm_space_info info;
    mvm_space_get_info(sp, &info);
    mvm_space_destroy(sp);

    mvm_topo topo;
    if (mvm_topo_probe(info.pci_bus_id, &topo) != MVM_OK)
        return mvm_cli_error("info", "probing the topology");
    printf("topology:   %s\n", topo.summary);
    enum mvm_simd simd, best = mvm_k_simd_detect();
    if (mvm_threads_simd(&simd) != MVM_OK)
        printf("cpu:        %s (a run would stop there)\n", mvm_last_error());
    else if (simd == best)
        printf("cpu:        %s kernels, the best this CPU has (MOEVM_CPU_SIMD picks a lower "
               "one)\n", mvm_k_simd_name(simd));
    else
        printf("cpu:        %s kernels, as MOEVM_CPU_SIMD asks (the best this CPU has: %s)\n",
               mvm_k_simd_name(simd), mvm_k_simd_name(best));
    printf("backend:    %s\n", info.backend);
    printf("device:     %s\n", info.device);
    printf("page size:  %llu KiB\n", (unsigned long long)(info.page_size >> 10));
    mvm_option_value budget;
    if (mvm_option_read(&mvm_opt_gpu_budget, &budget) != MVM_OK)
        return mvm_cli_error("info", "options");
    if ((uint64_t)budget.i == MVM_BUDGET_AUTO && info.device_free)
        printf("budget:     auto = 90%% of the %llu MiB free on the device less what the "
               "engine's context needs beside the experts, capped at the experts' size\n",
               (unsigned long long)(info.device_free >> 20));
    else if ((uint64_t)budget.i == MVM_BUDGET_AUTO)
        printf("budget:     auto = none on the host backend: the CPU reads experts at their "
               "homes (a budget emulates a device)\n");
    else if (budget.frac > 0)
        printf("budget:     %g%% of the experts' pages\n", budget.frac * 100);
    else
        printf("budget:     %llu MiB\n", (unsigned long long)((uint64_t)budget.i >> 20));
    char node[48] = "interleaved over every NUMA node";
    if (info.numa_node >= 0)
        snprintf(node, sizeof node, "NUMA node %d", info.numa_node);
    printf("host homes: %s; non-resident experts %s\n", node,
           info.home_mapped ? "stay mapped to their host home (readable, slower)"
                            : "are unmapped (must be made resident before use)");
    /* what a model's homes may take (vmm/topo.h's check at load): pinned on a GPU */
    const int pinned = strcmp(info.backend, "cuda") == 0;
    const uint64_t avail = mvm_topo_memory_available(!pinned);
    if (avail != UINT64_MAX)
        printf("memory:     %.1f GiB available for the homes (MemAvailable%s, within the "
               "memory cgroup's limit)\n", (double)avail / 1073741824.0,
               pinned ? " without swap: they are pinned" : " and free swap");
    printf("options:\n");
    mvm_options_print_effective(stdout);
    return 0;
}
