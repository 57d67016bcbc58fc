/*
 * Transparent huge pages for the host homes: the kernel's settings as read
 * (mvm_topo_huge_page_in), the plan of which pages take them (mvm_host_huge_plan), and the
 * advice a host-backend space gives its homes, seen in /proc/self/smaps (madvise's "hg"
 * flag on the mappings, which the kernel records whatever its settings). The settings are a
 * stand-in directory (mvm_topo_thp_dir), so the advice is tested on machines whose own
 * shmem_enabled is "never".
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "moevm/moevm.h"
#include "vmm/backend.h"
#include "vmm/topo.h"

#define MIB (1u << 20)

static char dir[] = "/tmp/moevm-thp-XXXXXX";

static void write_setting(const char *name, const char *text)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f && fputs(text, f) >= 0);
    if (f)
        fclose(f);
}

static void test_settings_read(void)
{
    write_setting("hpage_pmd_size", "2097152\n");
    static const struct {
        const char *shmem, *anon;
        size_t shared, anonymous;
    } cases[] = {
        {"always within_size advise [never] deny force\n", "always madvise [never]\n", 0, 0},
        {"always within_size [advise] never deny force\n", "always [madvise] never\n",
         2 * MIB, 2 * MIB},
        {"[always] within_size advise never deny force\n", "[always] madvise never\n",
         2 * MIB, 2 * MIB},
        {"always [within_size] advise never deny force\n", "always madvise never\n", 2 * MIB, 0},
        {"always within_size advise never [deny] force\n", "garbage\n", 0, 0},
        {"always within_size advise never deny [force]\n", "[madvise\n", 2 * MIB, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_setting("shmem_enabled", cases[i].shmem);
        write_setting("enabled", cases[i].anon);
        CHECK(mvm_topo_huge_page_in(dir, 1) == cases[i].shared);
        CHECK(mvm_topo_huge_page_in(dir, 0) == cases[i].anonymous);
    }
    /* no size file, or no such directory: no huge pages */
    char path[128];
    snprintf(path, sizeof path, "%s/hpage_pmd_size", dir);
    unlink(path);
    CHECK(mvm_topo_huge_page_in(dir, 1) == 0);
    CHECK(mvm_topo_huge_page_in("/nonexistent/moevm", 1) == 0);
}

static void test_plan(void)
{
    const size_t h = 2 * MIB;
    const uint64_t lots = UINT64_MAX;
    CHECK(mvm_host_huge_plan(0, 64, 4 * MIB, lots) == MVM_HUGE_NONE);
    CHECK(mvm_host_huge_plan(h, 64, 0, lots) == MVM_HUGE_NONE);
    /* tails of at most an eighth: the view; exact pages waste nothing */
    CHECK(mvm_host_huge_plan(h, 64, 4 * MIB, lots) == MVM_HUGE_VIEW);
    CHECK(mvm_host_huge_plan(h, 64, 4 * MIB - 128 * 1024, lots) == MVM_HUGE_VIEW);
    /* 3.5 of 4 MiB used: a tail of 0.5 MiB is a seventh of 3.5 (over an eighth) */
    CHECK(mvm_host_huge_plan(h, 64, 3 * MIB + MIB / 2, lots) == MVM_HUGE_ITEMS);
    CHECK(mvm_host_huge_plan(h, 64, 2 * MIB + 64 * 1024, lots) == MVM_HUGE_ITEMS);
    /* the view's tails would not fit in memory: the items' whole pages only */
    CHECK(mvm_host_huge_plan(h, 64, 4 * MIB - 128 * 1024, 64ull * 4 * MIB - 1) ==
          MVM_HUGE_ITEMS);
    CHECK(mvm_host_huge_plan(h, 64, 4 * MIB - 128 * 1024, 64ull * 4 * MIB) == MVM_HUGE_VIEW);
    /* too many items for two mappings each, or none a whole huge page */
    CHECK(mvm_host_huge_plan(h, MVM_HUGE_ITEMS_MAX, 3 * MIB, lots) == MVM_HUGE_ITEMS);
    CHECK(mvm_host_huge_plan(h, MVM_HUGE_ITEMS_MAX + 1, 3 * MIB, lots) == MVM_HUGE_NONE);
    CHECK(mvm_host_huge_plan(h, 64, MIB, lots) == MVM_HUGE_NONE);
    CHECK(mvm_host_huge_plan(h, MVM_HUGE_ITEMS_MAX + 1, 4 * MIB, lots) == MVM_HUGE_VIEW);
}

/* Whether the mapping holding addr is advised for huge pages (VmFlags "hg"); -1: none
 * found. */
static int advised(const void *addr)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int in = 0, found = -1;
    uintptr_t a = (uintptr_t)addr;
    while (f && found < 0 && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = a >= lo && a < hi;
        else if (in && strncmp(line, "VmFlags:", 8) == 0)
            found = strstr(line, " hg") != NULL;
    }
    if (f)
        fclose(f);
    return found;
}

/* A host space of 2 x 3 experts of `bytes` in 2 MiB pages, filled with a pattern of its own
 * and read back through the homes and the experts' addresses. */
static mvm_space *make_space(uint64_t bytes, int small_pages)
{
    mvm_space_desc d;
    CHECK_ST(mvm_space_desc_init(&d), MVM_OK);
    d.n_layers = 2;
    d.n_experts = 3;
    d.expert_bytes = bytes;
    d.device_budget_frac = 1;
    d.device_budget = 0;
    d.page_size = 2 * MIB;
    d.backend = MVM_BACKEND_HOST;
    d.small_pages = small_pages;
    mvm_space *sp = NULL;
    CHECK_ST(mvm_space_create(&d, &sp), MVM_OK);
    for (uint32_t l = 0; sp && l < 2; l++)
        for (uint32_t e = 0; e < 3; e++)
            memset(mvm_expert_home(sp, l, e), (int)(l * 3 + e + 1), bytes);
    return sp;
}

static bool reads_back(mvm_space *sp, uint64_t bytes)
{
    bool ok = true;
    for (uint32_t l = 0; l < 2; l++)
        for (uint32_t e = 0; e < 3; e++) {
            const uint8_t *home = mvm_expert_home(sp, l, e), *at = mvm_expert_addr(sp, l, e);
            for (uint64_t i = 0; i < bytes; i += 4096)
                ok = ok && home[i] == l * 3 + e + 1 && at[i] == home[i];
            ok = ok && home[bytes - 1] == l * 3 + e + 1;
        }
    return ok;
}

static size_t home_page(mvm_space *sp)
{
    mvm_space_info info;
    CHECK_ST(mvm_space_get_info(sp, &info), MVM_OK);
    return (size_t)info.home_page;
}

/* Experts whose last page is nearly full: the homes advised as one mapping. */
static void test_view_advised(void)
{
    uint64_t bytes = 4 * MIB - 64 * 1024;
    mvm_space *sp = make_space(bytes, 0);
    if (!sp)
        return;
    CHECK(home_page(sp) == 2 * MIB);
    for (uint32_t e = 0; e < 3; e++) {
        const uint8_t *h = mvm_expert_home(sp, 1, e);
        CHECK(advised(h) == 1 && advised(h + 2 * MIB) == 1 && advised(h + bytes - 1) == 1);
    }
    CHECK(reads_back(sp, bytes));
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
}

/* Experts whose last page is mostly tail: their whole pages advised, the tails' not. */
static void test_items_advised(void)
{
    uint64_t bytes = 2 * MIB + 64 * 1024;
    mvm_space *sp = make_space(bytes, 0);
    if (!sp)
        return;
    CHECK(home_page(sp) == 2 * MIB);
    for (uint32_t l = 0; l < 2; l++)
        for (uint32_t e = 0; e < 3; e++) {
            const uint8_t *h = mvm_expert_home(sp, l, e);
            CHECK(advised(h) == 1 && advised(h + 2 * MIB - 1) == 1);
            CHECK(advised(h + 2 * MIB) == 0 && advised(h + bytes) == 0);
        }
    CHECK(reads_back(sp, bytes));
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
}

/* MOEVM_HUGE_PAGES=off, or the kernel's settings say never: base pages, nothing advised. */
static void test_not_advised(void)
{
    uint64_t bytes = 4 * MIB - 64 * 1024;
    mvm_space *sp = make_space(bytes, 1);
    if (sp) {
        CHECK(home_page(sp) == (size_t)sysconf(_SC_PAGESIZE));
        CHECK(advised(mvm_expert_home(sp, 0, 0)) == 0);
        CHECK(reads_back(sp, bytes));
        CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    }
    write_setting("shmem_enabled", "always within_size advise [never] deny force\n");
    sp = make_space(bytes, 0);
    if (sp) {
        CHECK(home_page(sp) == (size_t)sysconf(_SC_PAGESIZE));
        CHECK(advised(mvm_expert_home(sp, 0, 0)) == 0);
        CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    }
    /* the option's values */
    mvm_space_desc d;
    setenv("MOEVM_HUGE_PAGES", "off", 1);
    CHECK_ST(mvm_space_desc_init(&d), MVM_OK);
    CHECK(d.small_pages == 1);
    setenv("MOEVM_HUGE_PAGES", "on", 1);
    CHECK_ST(mvm_space_desc_init(&d), MVM_OK);
    CHECK(d.small_pages == 0);
    setenv("MOEVM_HUGE_PAGES", "yes", 1);
    CHECK_ST(mvm_space_desc_init(&d), MVM_ERR_OPTION);
    CHECK(strstr(mvm_last_error(), "MOEVM_HUGE_PAGES") != NULL);
    unsetenv("MOEVM_HUGE_PAGES");
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_settings_read);
    RUN(test_plan);
    write_setting("hpage_pmd_size", "2097152\n");
    write_setting("shmem_enabled", "always within_size [advise] never deny force\n");
    mvm_topo_thp_dir = dir;
    RUN(test_view_advised);
    RUN(test_items_advised);
    RUN(test_not_advised);
    static const char *const settings[] = {"enabled", "shmem_enabled", "hpage_pmd_size"};
    for (size_t i = 0; i < 3; i++) {
        char path[128];
        snprintf(path, sizeof path, "%s/%s", dir, settings[i]);
        unlink(path);
    }
    if (rmdir(dir) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    TEST_END();
}
