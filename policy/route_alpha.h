/*
 * Choosing SMoE's substitution threshold α for a latency budget (§V-C, Eq. 5): min A(α)
 * s.t. T(α) <= R. TPOT falls roughly linearly with α (the paper's Fig. 10) and accuracy loss
 * is taken to grow with α, so the answer is the smallest α whose fitted TPOT meets the
 * budget.
 */
#ifndef MVM_POLICY_ROUTE_ALPHA_H
#define MVM_POLICY_ROUTE_ALPHA_H

#include <stdint.h>

#include "moevm/moevm.h"

/* Largest polynomial degree accepted (the paper asks for a low-degree fit). */
#define MVM_ALPHA_FIT_MAX_DEGREE 6

/* Fits TPOT(α) by least squares with a polynomial of `degree` to the n measured pairs
 * (alpha[i], tpot[i]) and writes to *alpha_out the smallest α within the measured range
 * [min alpha, max alpha] whose fitted TPOT is <= budget (the fit is not trusted outside
 * the measurements, so it never extrapolates). Errors: MVM_ERR_INVALID for fewer than
 * degree+1 distinct α values, a degree above MVM_ALPHA_FIT_MAX_DEGREE, or a non-finite
 * input; MVM_ERR_RANGE when the budget is unreachable: the fitted TPOT stays above it over
 * the whole measured range (the message gives the best fitted TPOT and where). */
mvm_status mvm_importance_alpha_for_budget(const double *alpha, const double *tpot, uint32_t n,
                                           uint32_t degree, double budget, double *alpha_out);

#endif
