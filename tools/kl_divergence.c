/* The KL divergence of `moevm perplexity` (kl_divergence.h): llama.cpp's file and
 * statistics, its arithmetic kept (float where it computes in float) so that the two
 * programs' numbers can be set side by side. */
#include "tools/kl_divergence.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/error.h"

static const char magic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};

/* -1, the message naming the file (and the system's reason, where there is one). */
static int fail(const mvm_kld_file *k, const char *what)
{
    (void)mvm_fail(MVM_ERR_INVALID, "%s: %s%s%s", k->path, what, errno ? ": " : "",
                   errno ? strerror(errno) : "");
    return -1;
}

static size_t row_width(uint32_t n_vocab) { return 2 * (((size_t)n_vocab + 1) / 2) + 4; }

int mvm_kld_create(mvm_kld_file *k, const char *path, uint32_t n_ctx, uint32_t n_vocab,
                   uint32_t n_chunk, const int32_t *tokens)
{
    *k = (mvm_kld_file){.path = path, .n_ctx = n_ctx, .n_vocab = n_vocab, .n_chunk = n_chunk,
                        .nv = row_width(n_vocab), .writing = 1};
    errno = 0;
    if (!(k->row = calloc(k->nv, sizeof *k->row)))
        return fail(k, "no memory for a row of log-probabilities");
    if (!(k->f = fopen(path, "wb")))
        return fail(k, "cannot create it");
    const int32_t head[3] = {(int32_t)n_ctx, (int32_t)n_vocab, (int32_t)n_chunk};
    if (fwrite(magic, 1, 8, k->f) != 8 || fwrite(head, sizeof head, 1, k->f) != 1 ||
        fwrite(tokens, sizeof *tokens, (size_t)n_chunk * n_ctx, k->f) !=
            (size_t)n_chunk * n_ctx)
        return fail(k, "cannot write it");
    return 0;
}

/* llama.cpp's rounding of a non-negative float below 2^22 to the nearest integer (ties to
 * even), bit for bit. */
static int nearest_int(float f)
{
    float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

int mvm_kld_write_row(mvm_kld_file *k, const float *logits)
{
    float max = logits[0], min = logits[0];
    for (uint32_t i = 1; i < k->n_vocab; i++) {
        max = logits[i] > max ? logits[i] : max;
        min = logits[i] < min ? logits[i] : min;
    }
    min = min > max - 16 ? min : max - 16;
    double sum = 0;
    for (uint32_t i = 0; i < k->n_vocab; i++)
        sum += expf(logits[i] - max);
    const float log_sum = (float)log(sum), scale = (max - min) / 65535.f;
    const float head[2] = {scale, min - max - log_sum};
    memcpy(k->row, head, sizeof head);
    uint16_t *q = k->row + 4;
    const float inv = scale ? 1 / scale : 0;
    for (uint32_t i = 0; i < k->n_vocab; i++)
        q[i] = scale && logits[i] > min ? (uint16_t)nearest_int(inv * (logits[i] - min)) : 0;
    errno = 0;
    return fwrite(k->row, sizeof *k->row, k->nv, k->f) == k->nv ? 0 : fail(k, "cannot write it");
}

int mvm_kld_open(mvm_kld_file *k, const char *path)
{
    *k = (mvm_kld_file){.path = path};
    char m[8];
    int32_t head[3];
    errno = 0;
    if (!(k->f = fopen(path, "rb")))
        return fail(k, "cannot open it");
    errno = 0;
    if (fread(m, 1, 8, k->f) != 8 || memcmp(m, magic, 8) != 0)
        return fail(k, "not a file of log-probabilities (llama-perplexity's "
                       "--kl-divergence-base writes them, and so does moevm's)");
    if (fread(head, sizeof head, 1, k->f) != 1)
        return fail(k, "cut short in its header");
    if (head[0] < 3 || head[0] > (1 << 22) || head[1] < 1 || head[1] > (1 << 24) ||
        head[2] < 1 || head[2] > (1 << 24))
        return fail(k, "its header's context, vocabulary or chunk count is out of range");
    k->n_ctx = (uint32_t)head[0], k->n_vocab = (uint32_t)head[1], k->n_chunk = (uint32_t)head[2];
    k->nv = row_width(k->n_vocab);
    const size_t n = (size_t)k->n_chunk * k->n_ctx;
    /* the tokens it says it holds must be there before they are allocated for */
    long end = fseek(k->f, 0, SEEK_END) == 0 ? ftell(k->f) : -1;
    if (end < 0 || fseek(k->f, 20, SEEK_SET) != 0)
        return fail(k, "cannot read it");
    if ((uint64_t)end < 20 + 4 * (uint64_t)n)
        return fail(k, "cut short in its tokens");
    if (!(k->tokens = malloc(n * sizeof *k->tokens)) ||
        !(k->row = malloc(k->nv * sizeof *k->row)))
        return fail(k, "no memory for its tokens");
    if (fread(k->tokens, sizeof *k->tokens, n, k->f) != n)
        return fail(k, "cut short in its tokens");
    return 0;
}

int mvm_kld_check_vocab(const mvm_kld_file *k, uint32_t n_vocab)
{
    if (k->n_vocab != n_vocab)
        return mvm_fail(MVM_ERR_INVALID, "%s: a vocabulary of %u tokens; the model's has %u "
                        "(another model's base)", k->path, k->n_vocab, n_vocab), -1;
    errno = 0;
    for (size_t i = 0; i < (size_t)k->n_chunk * k->n_ctx; i++)
        if (k->tokens[i] < 0 || (uint32_t)k->tokens[i] >= n_vocab)
            return fail(k, "a token outside the vocabulary");
    return 0;
}

int mvm_kld_read_row(mvm_kld_file *k)
{
    errno = 0;
    return fread(k->row, sizeof *k->row, k->nv, k->f) == k->nv
               ? 0
               : fail(k, "cut short: fewer rows than its chunks score");
}

int mvm_kld_close(mvm_kld_file *k, int keep)
{
    int bad = 0;
    errno = 0;
    if (k->f && fclose(k->f) != 0)
        bad = fail(k, "cannot write it");
    if (k->f && k->writing && (bad || !keep))
        remove(k->path); /* the run's error said why */
    free(k->tokens), free(k->row);
    k->f = NULL, k->tokens = NULL, k->row = NULL;
    return bad;
}

/* ---- the statistics ------------------------------------------------------------------ */

int mvm_kld_init(mvm_kld *s, size_t n)
{
    *s = (mvm_kld){.cap = n};
    s->kld = malloc(n * sizeof *s->kld);
    s->p_diff = malloc(n * sizeof *s->p_diff);
    return s->kld && s->p_diff ? 0 : -1;
}

void mvm_kld_free(mvm_kld *s) { free(s->kld), free(s->p_diff); }

double mvm_kld_sum_exp(const float *logits, uint32_t n, float *max, uint32_t *top)
{
    *max = logits[0], *top = 0;
    for (uint32_t i = 1; i < n; i++)
        if (logits[i] > *max)
            *max = logits[i], *top = i;
    double sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += expf(logits[i] - *max);
    return sum;
}

double mvm_kld_add(mvm_kld *s, const float *logits, uint32_t n_vocab, const uint16_t *base,
                   int32_t target)
{
    float max;
    uint32_t top;
    const float log_sum = (float)log(mvm_kld_sum_exp(logits, n_vocab, &max, &top));
    float head[2];
    memcpy(head, base, sizeof head);
    const float scale = head[0], min_lp = head[1];
    const uint16_t *q = base + 4;
    const float nll = max + log_sum - logits[target], nll_base = -(scale * q[target] + min_lp);
    s->sum_nll += nll, s->sum_nll2 += nll * nll;
    s->sum_nll_base += nll_base, s->sum_nll_base2 += nll_base * nll_base;
    s->sum_nll_nll_base += nll * nll_base;
    const float norm = max + log_sum;
    double kld = 0;
    uint32_t top_base = 0;
    float lp_top = 0;
    for (uint32_t i = 0; i < n_vocab; i++) {
        const float lp = scale * q[i] + min_lp;
        if (i == 0 || lp > lp_top)
            lp_top = lp, top_base = i;
        if (lp > -16.f)
            kld += expf(lp) * (lp - logits[i] + norm);
    }
    const float p_diff = expf(-nll) - expf(-nll_base);
    s->sum_kld += kld, s->sum_kld2 += kld * kld;
    s->sum_p_diff += p_diff, s->sum_p_diff2 += (double)p_diff * p_diff;
    s->sum_p_diff4 += (double)p_diff * p_diff * p_diff * p_diff;
    s->n_same_top += top == top_base;
    if (s->count < s->cap)
        s->kld[s->count] = (float)kld, s->p_diff[s->count] = p_diff;
    s->count++;
    return nll;
}

/* The mean of a quantity and its standard error, from its sum and its squares' sum. */
static void mean_err(double sum, double sum2, uint64_t n, double *mean, double *err)
{
    *mean = n ? sum / (double)n : 0;
    const double var = n ? sum2 / (double)n - *mean * *mean : 0;
    *err = var > 0 && n > 10 ? sqrt(var / (double)(n - 1)) : 0;
}

static double covariance(const mvm_kld *s)
{
    const double n = (double)s->count;
    return s->count < 10 ? 0
                         : (s->sum_nll_nll_base / n - s->sum_nll / n * (s->sum_nll_base / n)) /
                               (n - 1);
}

void mvm_kld_print_chunk(const mvm_kld *s, uint32_t chunk)
{
    if (chunk == 1)
        printf("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence"
               "              \xce\x94p RMS            Same top p\n");
    double lp, lpe, lb, lbe, kl, kle, mse, msee;
    mean_err(s->sum_nll, s->sum_nll2, s->count, &lp, &lpe);
    mean_err(s->sum_nll_base, s->sum_nll_base2, s->count, &lb, &lbe);
    mean_err(s->sum_kld, s->sum_kld2, s->count, &kl, &kle);
    mean_err(s->sum_p_diff2, s->sum_p_diff4, s->count, &mse, &msee);
    /* the errors' sum can round below 0 where the two models are one */
    const double ratio_err = sqrt(fmax(0, lpe * lpe + lbe * lbe - 2 * covariance(s)));
    const double rms = sqrt(mse), top = (double)s->n_same_top / (double)s->count;
    printf("%4u    %9.4f \xc2\xb1 %9.4f    %10.5f \xc2\xb1 %10.5f    %10.5f \xc2\xb1 %10.5f"
           "    %6.3f \xc2\xb1 %6.3f %%    %6.3f \xc2\xb1 %6.3f %%\n",
           chunk, exp(lp), exp(lp) * lpe, lp - lb, ratio_err, kl, kle, 100 * rms,
           rms > 0 ? 100 * 0.5 / rms * msee : 0, 100 * top,
           s->count > 1 ? 100 * sqrt(top * (1 - top) / (double)(s->count - 1)) : 0);
}

static int by_value(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* llama.cpp's percentile: linear between the two nearest of the sorted values. */
static float percentile(const float *v, size_t n, float fraction)
{
    if (fraction <= 0)
        return v[0];
    if (fraction >= 1)
        return v[n - 1];
    float p = fraction * (float)(n - 1);
    const size_t i = (size_t)p;
    p -= (float)i;
    return (1 - p) * v[i] + p * v[i + 1 < n ? i + 1 : n - 1];
}

static float median(const float *v, size_t n)
{
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2] + v[n / 2 - 1]);
}

/* Lines of percentiles of the sorted v[0..n), labelled as llama.cpp's ("99.9%", " 5.0%"):
 * KLD values, or Δp in percent. */
static void quantiles(const float *v, size_t n, const float *fr, size_t k, int kld)
{
    for (size_t i = 0; i < k; i++) {
        const float x = percentile(v, n, fr[i]);
        if (kld)
            printf("%4.1f%%   KLD: %10.6f\n", 100 * fr[i], x);
        else
            printf("%4.1f%%   \xce\x94p: %6.3f%%\n", 100 * fr[i], 100 * x);
    }
}

void mvm_kld_print_summary(mvm_kld *s)
{
    const size_t n = s->count < s->cap ? (size_t)s->count : s->cap;
    if (s->count < 100) { /* as llama.cpp: no statistics of so few values */
        printf("(%llu positions: too few for the statistics; give more chunks)\n",
               (unsigned long long)s->count);
        return;
    }
    qsort(s->kld, n, sizeof *s->kld, by_value);
    qsort(s->p_diff, n, sizeof *s->p_diff, by_value);
    double lp, lpe, lb, lbe, kl, kle, pd, pde, mse, msee;
    mean_err(s->sum_nll, s->sum_nll2, s->count, &lp, &lpe);
    mean_err(s->sum_nll_base, s->sum_nll_base2, s->count, &lb, &lbe);
    const double cov = covariance(s), ppl = exp(lp), ppl_base = exp(lb);
    const double ratio_err = sqrt(fmax(0, lpe * lpe + lbe * lbe - 2 * cov));
    printf("====== Perplexity statistics ======\n");
    printf("Mean PPL(Q)                   : %10.6f \xc2\xb1 %10.6f\n", ppl, ppl * lpe);
    printf("Mean PPL(base)                : %10.6f \xc2\xb1 %10.6f\n", ppl_base, ppl_base * lbe);
    printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100 * cov / (lpe * lbe));
    printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f \xc2\xb1 %10.6f\n", lp - lb, ratio_err);
    printf("Mean PPL(Q)/PPL(base)         : %10.6f \xc2\xb1 %10.6f\n", exp(lp - lb),
           exp(lp - lb) * ratio_err);
    const double diff_err = sqrt(fmax(0, ppl * lpe * ppl * lpe +
                                         ppl_base * lbe * ppl_base * lbe -
                                         2 * ppl * ppl_base * cov));
    printf("Mean PPL(Q)-PPL(base)         : %10.6f \xc2\xb1 %10.6f\n\n", ppl - ppl_base,
           diff_err);
    mean_err(s->sum_kld, s->sum_kld2, s->count, &kl, &kle);
    printf("====== KL divergence statistics ======\n");
    printf("Mean    KLD: %10.6f \xc2\xb1 %10.6f\n", kl, kle);
    printf("Maximum KLD: %10.6f\n", s->kld[n - 1]);
    quantiles(s->kld, n, (const float[]){.999f, .99f, .95f, .9f}, 4, 1);
    printf("Median  KLD: %10.6f\n", median(s->kld, n));
    quantiles(s->kld, n, (const float[]){.1f, .05f, .01f, .001f}, 4, 1);
    printf("Minimum KLD: %10.6f\n\n", s->kld[0]);
    mean_err(s->sum_p_diff, s->sum_p_diff2, s->count, &pd, &pde);
    printf("====== Token probability statistics ======\n");
    printf("Mean    \xce\x94p: %6.3f \xc2\xb1 %5.3f %%\n", 100 * pd, 100 * pde);
    printf("Maximum \xce\x94p: %6.3f%%\n", 100 * s->p_diff[n - 1]);
    quantiles(s->p_diff, n, (const float[]){.999f, .99f, .95f, .9f, .75f}, 5, 0);
    printf("Median  \xce\x94p: %6.3f%%\n", 100 * median(s->p_diff, n));
    quantiles(s->p_diff, n, (const float[]){.25f, .1f, .05f, .01f, .001f}, 5, 0);
    printf("Minimum \xce\x94p: %6.3f%%\n", 100 * s->p_diff[0]);
    mean_err(s->sum_p_diff2, s->sum_p_diff4, s->count, &mse, &msee);
    const double rms = sqrt(mse), top = (double)s->n_same_top / (double)s->count;
    printf("RMS \xce\x94p    : %6.3f \xc2\xb1 %5.3f %%\n", 100 * rms,
           rms > 0 ? 100 * 0.5 / rms * msee : 0);
    printf("Same top p: %6.3f \xc2\xb1 %5.3f %%\n", 100 * top,
           100 * sqrt(top * (1 - top) / (double)(s->count - 1)));
}
