/* Presets and cost files by name (cost_load.h). */
#include "policy/cost_load.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "policy/policy_options.h"
#include "vmm/error.h"
#include "vmm/options.h"

/* A cost file is a dozen fields; anything larger is not one. */
#define MAX_COST_FILE 16384

mvm_status mvm_machine_load(const char *spec, const char *what, mvm_machine *out)
{
    int from_env = !spec;
    if (from_env) {
        mvm_option_value v;
        mvm_status st = mvm_option_read(&mvm_opt_cost, &v);
        if (st != MVM_OK)
            return st;
        spec = v.s;
    }
    const mvm_machine *preset = mvm_machine_preset(spec);
    if (preset) {
        *out = *preset;
        return MVM_OK;
    }
    char label[512]; /* "MOEVM_COST=x" or "--cost x" */
    snprintf(label, sizeof label, "%s%s%s", from_env ? "MOEVM_COST" : what ? what : "cost",
             from_env ? "=" : " ", spec);
    if (!spec[0])
        return mvm_fail(MVM_ERR_INVALID, "%s: empty; give a preset (%s) or a cost file", label,
                        mvm_machine_preset_names());
    FILE *f = fopen(spec, "rb");
    if (!f)
        return mvm_fail(MVM_ERR_INVALID, "%s: neither a preset (%s) nor a readable file: %s",
                        label, mvm_machine_preset_names(), strerror(errno));
    char text[MAX_COST_FILE + 1];
    size_t n = fread(text, 1, MAX_COST_FILE, f);
    int err = ferror(f), big = n == MAX_COST_FILE && fgetc(f) != EOF;
    fclose(f);
    if (err)
        return mvm_fail(MVM_ERR_INVALID, "%s: read error (a directory?)", label);
    if (big)
        return mvm_fail(MVM_ERR_INVALID, "%s: larger than a cost file can be (16 KiB)", label);
    text[n] = '\0';
    return mvm_machine_parse_json(text, label, out);
}
