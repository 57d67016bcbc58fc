/* Expert substitution by the route module (substitute.h). */
#include "engine/forward/substitute.h"

#include <stdlib.h>

#include "policy/choose.h"
#include "vmm/error.h"

struct mvm_substitutor {
    mvm_resid *resid;
    const mvm_route_ops *ops;
    void *self;
    uint64_t count;
};

mvm_status mvm_substitutor_create(mvm_resid *resid, const mvm_route_params *p,
                                  mvm_substitutor **out)
{
    *out = NULL;
    const void *ops = NULL;
    const char *args = NULL;
    mvm_status st = mvm_engine_choose(MVM_ROLE_ROUTE, p->route, p->route_args, &ops, &args);
    if (st != MVM_OK)
        return st;
    mvm_pinit in;
    mvm_resid_pinit(resid, &in);
    in.params.text = args;
    void *self = NULL;
    const mvm_route_ops *ro = ops;
    if ((st = ro->create(&in, &self)) != MVM_OK)
        return st;
    if (ro == mvm_policy_find(MVM_ROLE_ROUTE, "none")) { /* checked its parameters; no more */
        ro->destroy(self);
        return MVM_OK;
    }
    mvm_substitutor *s = calloc(1, sizeof *s);
    if (!s) {
        ro->destroy(self);
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the route module");
    }
    *s = (mvm_substitutor){.resid = resid, .ops = ro, .self = self};
    *out = s;
    return MVM_OK;
}

void mvm_substitutor_destroy(mvm_substitutor *s)
{
    if (!s)
        return;
    s->ops->destroy(s->self);
    free(s);
}

const char *mvm_substitutor_name(const mvm_substitutor *s)
{
    return s ? s->ops->name : "none";
}

uint32_t mvm_substitutor_route(mvm_substitutor *s, mvm_pstep *step)
{
    if (!s)
        return 0;
    uint32_t n = s->ops->route(s->self, mvm_resid_landed_view(s->resid, step->layer), step);
    s->count += n;
    return n;
}

uint64_t mvm_substitutor_count(const mvm_substitutor *s)
{
    return s ? s->count : 0;
}
