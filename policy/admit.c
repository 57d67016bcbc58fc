/* Admission into the device cache (admit.h). */
#include "policy/admit.h"

bool mvm_admit(const mvm_evict_ops *ev, void *self, const mvm_pview *v, uint32_t x,
               uint32_t need, uint32_t *cand, uint32_t n)
{
    if (v->used_pages + need <= v->capacity_pages)
        return true;
    if (n == 0)
        return false; /* nothing it may evict: no room can be made */
    cand[n] = x;
    uint32_t pick = ev->victim(self, v, x / v->shape->n_experts, cand, n + 1);
    return pick != n;
}
