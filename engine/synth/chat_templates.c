/*
 * The chat template each preset's model carries (tokenizer.chat_template), so that
 * `moevm chat` and `moevm serve` talk to a synthetic model in its family's own format. The
 * templates (the .jinja files of engine/synth/templates) are moevm's, written in each
 * family's format with the constructs the families' real templates use;
 * tests/ref/check_jinja.py renders them with Python's jinja2 against engine/chat's
 * interpreter. Qwen2-MoE's is plain ChatML.
 */
#include <string.h>

#include "engine/chat/chat_template.h"
#include "engine/synth/mkmodel.h"

#include "mvm_tmpl_deepseek3.h"
#include "mvm_tmpl_glm45.h"
#include "mvm_tmpl_gpt_oss.h"
#include "mvm_tmpl_minimax_m2.h"
#include "mvm_tmpl_mixtral.h"
#include "mvm_tmpl_olmoe.h"
#include "mvm_tmpl_qwen3.h"

const char *mvm_chat_template_for(const mvm_model_spec *s)
{
    static const struct {
        const char *arch, *text;
    } by_arch[] = {{"llama", mvm_tmpl_mixtral},        {"qwen2moe", mvm_chat_template_chatml},
                   {"qwen3moe", mvm_tmpl_qwen3},       {"olmoe", mvm_tmpl_olmoe},
                   {"deepseek2", mvm_tmpl_deepseek3},  {"glm4moe", mvm_tmpl_glm45},
                   {"minimax-m2", mvm_tmpl_minimax_m2}, {"gpt-oss", mvm_tmpl_gpt_oss}};
    for (size_t i = 0; i < sizeof by_arch / sizeof *by_arch; i++)
        if (strcmp(s->arch, by_arch[i].arch) == 0)
            return by_arch[i].text;
    return NULL;
}
