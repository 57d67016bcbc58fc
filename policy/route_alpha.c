/*
 * α for a TPOT budget (SMoE, §V-C, Eq. 5; see route_alpha.h). The paper fits "a
 * low-degree polynomial" to measured (α, TPOT) and does "a simple one-dimensional search"
 * for the smallest α meeting the budget. Here the fit is ordinary least squares in the
 * variable u = (α - mid)/half that maps the measured range onto [-1, 1] (which keeps the normal
 * equations well conditioned at these degrees), and the search is exact rather than a grid:
 * between consecutive critical points the fitted polynomial is monotone, so the first
 * monotone piece whose right end meets the budget holds the answer, found by bisection.
 * A fit that is not monotone (noise, a too-high degree) is thus still searched correctly.
 */
#include "policy/route_alpha.h"

#include <math.h>

#include "vmm/error.h"

#define NC (MVM_ALPHA_FIT_MAX_DEGREE + 1)

static double poly(const double *c, uint32_t deg, double u)
{
    double y = c[deg];
    for (uint32_t i = deg; i-- > 0;)
        y = y * u + c[i];
    return y;
}

/* The point of [lo, hi] where p - y changes sign (p(lo) and p(hi) on opposite sides of y),
 * to the last bit; the returned point is on hi's side. */
static double bisect(const double *c, uint32_t deg, double y, double lo, double hi)
{
    int lo_above = poly(c, deg, lo) > y;
    for (int i = 0; i < 200; i++) {
        double mid = 0.5 * (lo + hi);
        if (mid <= lo || mid >= hi)
            break;
        if ((poly(c, deg, mid) > y) == lo_above)
            lo = mid;
        else
            hi = mid;
    }
    return hi;
}

static uint32_t crossings(const double *c, uint32_t deg, double lo, double hi, double *out);

/* The ends of the pieces of [lo, hi] on which p is monotone: lo, the points where p'
 * changes sign, hi. Returns their count. */
static uint32_t pieces(const double *c, uint32_t deg, double lo, double hi, double *pts)
{
    double d[NC];
    uint32_t m = 0;
    if (deg > 0) {
        for (uint32_t i = 1; i <= deg; i++)
            d[i - 1] = c[i] * i;
        m = crossings(d, deg - 1, lo, hi, pts + 1);
    }
    pts[0] = lo;
    pts[m + 1] = hi;
    return m + 2;
}

/* The sorted points in (lo, hi) where p crosses zero; returns their count. Each monotone
 * piece holds at most one (recursion on the derivative). Touching zero without crossing
 * is not reported, and need not be: pieces() only splits where p turns. */
static uint32_t crossings(const double *c, uint32_t deg, double lo, double hi, double *out)
{
    double pts[NC + 1];
    uint32_t np = pieces(c, deg, lo, hi, pts), n = 0;
    for (uint32_t i = 0; i + 1 < np; i++) {
        double a = poly(c, deg, pts[i]), b = poly(c, deg, pts[i + 1]);
        if ((a < 0 && b > 0) || (a > 0 && b < 0))
            out[n++] = bisect(c, deg, 0, pts[i], pts[i + 1]);
    }
    return n;
}

/* Least squares in u = (x - mid)/half through the normal equations, solved by Gaussian
 * elimination with partial pivoting. Returns 0 when the system is singular. */
static int fit(const double *x, const double *y, uint32_t n, uint32_t deg, double mid,
               double half, double *c)
{
    const uint32_t m = deg + 1;
    double a[NC][NC + 1] = {{0}};
    for (uint32_t k = 0; k < n; k++) {
        double u = (x[k] - mid) / half, pi = 1;
        for (uint32_t i = 0; i < m; i++, pi *= u) {
            double pj = 1;
            for (uint32_t j = 0; j < m; j++, pj *= u)
                a[i][j] += pi * pj;
            a[i][m] += pi * y[k];
        }
    }
    for (uint32_t col = 0; col < m; col++) {
        uint32_t p = col;
        for (uint32_t r = col + 1; r < m; r++)
            if (fabs(a[r][col]) > fabs(a[p][col]))
                p = r;
        if (!(fabs(a[p][col]) > 1e-12 * fabs(a[0][0])))
            return 0;
        for (uint32_t j = 0; j <= m; j++) {
            double t = a[col][j];
            a[col][j] = a[p][j];
            a[p][j] = t;
        }
        for (uint32_t r = 0; r < m; r++) {
            if (r == col)
                continue;
            double f = a[r][col] / a[col][col];
            for (uint32_t j = col; j <= m; j++)
                a[r][j] -= f * a[col][j];
        }
    }
    for (uint32_t i = 0; i < m; i++)
        c[i] = a[i][m] / a[i][i];
    return 1;
}

static uint32_t distinct(const double *x, uint32_t n)
{
    uint32_t d = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = 0;
        while (j < i && x[j] != x[i])
            j++;
        d += j == i;
    }
    return d;
}

mvm_status mvm_importance_alpha_for_budget(const double *alpha, const double *tpot, uint32_t n,
                                           uint32_t degree, double budget, double *alpha_out)
{
    if (!alpha || !tpot || !alpha_out)
        return mvm_fail(MVM_ERR_INVALID, "alpha for budget: NULL argument");
    if (degree > MVM_ALPHA_FIT_MAX_DEGREE)
        return mvm_fail(MVM_ERR_INVALID, "alpha for budget: degree %u is above %d", degree,
                        MVM_ALPHA_FIT_MAX_DEGREE);
    if (!isfinite(budget))
        return mvm_fail(MVM_ERR_INVALID, "alpha for budget: the budget is not a finite number");
    double lo = INFINITY, hi = -INFINITY;
    for (uint32_t i = 0; i < n; i++) {
        if (!isfinite(alpha[i]) || !isfinite(tpot[i]))
            return mvm_fail(MVM_ERR_INVALID, "alpha for budget: point %u is not finite", i);
        lo = fmin(lo, alpha[i]);
        hi = fmax(hi, alpha[i]);
    }
    uint32_t nd = distinct(alpha, n);
    if (nd < degree + 1)
        return mvm_fail(MVM_ERR_INVALID,
                        "alpha for budget: too few points: %u distinct alpha values, a degree "
                        "%u fit needs %u", nd, degree, degree + 1);
    double mid = 0.5 * (lo + hi), half = hi > lo ? 0.5 * (hi - lo) : 1, c[NC];
    if (!fit(alpha, tpot, n, degree, mid, half, c))
        return mvm_fail(MVM_ERR_INVALID, "alpha for budget: the degree %u fit is singular",
                        degree);
    /* The monotone pieces of the fit over the measured range: u in [-1, 1], or the single
     * point u = 0 when every measurement has the same α (a degree-0 fit). */
    double ulo = (lo - mid) / half, uhi = (hi - mid) / half, pts[NC + 1];
    uint32_t np = pieces(c, degree, ulo, uhi, pts);
    if (poly(c, degree, ulo) <= budget) {
        *alpha_out = lo;
        return MVM_OK;
    }
    double best = pts[0];
    for (uint32_t i = 0; i + 1 < np; i++) {
        if (poly(c, degree, pts[i + 1]) <= budget) {
            *alpha_out = mid + half * bisect(c, degree, budget, pts[i], pts[i + 1]);
            return MVM_OK;
        }
        if (poly(c, degree, pts[i + 1]) < poly(c, degree, best))
            best = pts[i + 1];
    }
    return mvm_fail(MVM_ERR_RANGE,
                    "alpha for budget: budget %g is unreachable: the fitted TPOT is at best %g "
                    "(at alpha %g) over the measured alpha range [%g, %g]",
                    budget, poly(c, degree, best), mid + half * best, lo, hi);
}
