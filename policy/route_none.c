/*
 * route "none": the router's choice stands (docs/policies.md). The exact model: no expert is
 * ever swapped for a resident one, whatever the residency. It takes no parameters.
 */
#include <stddef.h>

#include "policy/modules.h"

static mvm_status none_create(const mvm_pinit *init, void **self)
{
    static const char *const known[] = {NULL};
    *self = NULL; /* stateless */
    return mvm_pparams_check(&init->params, known, "route none");
}

static void none_destroy(void *self)
{
    (void)self;
}

static uint32_t none_route(void *self, const mvm_pview *v, mvm_pstep *step)
{
    (void)self;
    (void)v;
    (void)step;
    return 0;
}

const mvm_route_ops mvm_route_none = {
    .name = "none",
    .about = "no substitution: every token computes the experts its router selected",
    .create = none_create,
    .destroy = none_destroy,
    .route = none_route,
};
