/* Line charts as SVG (svg_plot.h). */
#include "tools/svg_plot.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "vmm/error.h"

#define W 760.0
#define H 440.0
#define LEFT 70.0
#define RIGHT 230.0  /* room for the legend */
#define TOP 40.0
#define BOTTOM 60.0

static const char *const colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

/* Text for SVG: &, <, > and quotes escaped. */
static void put_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* A round tick step giving about 5 ticks over span. */
static double tick_step(double span)
{
    double raw = span / 5, mag = pow(10, floor(log10(raw))), r = raw / mag;
    return (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * mag;
}

mvm_status mvm_svg_lines(const char *path, const char *title, const char *xlabel,
                         const char *ylabel, const double *x, uint32_t n_x, const double *y,
                         const char *const *labels, uint32_t n_series)
{
    if (n_x < 2 || n_series == 0)
        return mvm_fail(MVM_ERR_INVALID, "%s: a chart needs 2 or more points and a series", path);
    double x0 = x[0], x1 = x[n_x - 1], ymax = 0;
    for (uint32_t i = 0; i < n_x * n_series; i++) {
        if (!isfinite(y[i]) || (i < n_x && !isfinite(x[i])))
            return mvm_fail(MVM_ERR_INVALID, "%s: non-finite value in the chart", path);
        ymax = fmax(ymax, y[i]);
    }
    if (!(x1 > x0))
        return mvm_fail(MVM_ERR_INVALID, "%s: x values must increase", path);
    double ystep = tick_step(ymax > 0 ? ymax : 1);
    ymax = ceil((ymax > 0 ? ymax : 1) / ystep) * ystep;
    double pw = W - LEFT - RIGHT, ph = H - TOP - BOTTOM;
#define PX(v) (LEFT + ((v) - x0) / (x1 - x0) * pw)
#define PY(v) (TOP + ph - (v) / ymax * ph)
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return mvm_fail(MVM_ERR_INVALID, "%s: cannot create: %s", tmp, strerror(errno));
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
            "fill=\"white\"/>\n<text x=\"%.0f\" y=\"22\" font-size=\"14\">", W, H, LEFT);
    put_text(f, title);
    fprintf(f, "</text>\n");
    double xstep = tick_step(x1 - x0);
    for (double v = ceil(x0 / xstep) * xstep; v <= x1 + 1e-9; v += xstep)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", PX(v), TOP,
                PX(v), TOP + ph, PX(v), TOP + ph + 18, v);
    for (double v = 0; v <= ymax + 1e-12; v += ystep)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", LEFT, PY(v),
                LEFT + pw, PY(v), LEFT - 6, PY(v) + 4, v);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
            "stroke=\"black\"/>\n<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", LEFT, TOP,
            pw, ph, LEFT + pw / 2, H - 15);
    put_text(f, xlabel);
    fprintf(f, "</text>\n<text transform=\"translate(18,%.1f) rotate(-90)\" "
            "text-anchor=\"middle\">", TOP + ph / 2);
    put_text(f, ylabel);
    fprintf(f, "</text>\n");
    for (uint32_t s = 0; s < n_series; s++) {
        const char *c = colours[s % (sizeof colours / sizeof *colours)];
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", c);
        for (uint32_t i = 0; i < n_x; i++)
            fprintf(f, "%.1f,%.1f ", PX(x[i]), PY(y[(size_t)s * n_x + i]));
        fprintf(f, "\"/>\n<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"3\" fill=\"%s\"/>"
                "<text x=\"%.1f\" y=\"%.1f\">", W - RIGHT + 15, TOP + 10 + 18.0 * s, c,
                W - RIGHT + 35, TOP + 15 + 18.0 * s);
        put_text(f, labels[s]);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</svg>\n");
#undef PX
#undef PY
    int bad = ferror(f) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        remove(tmp);
        return mvm_fail(MVM_ERR_INVALID, "%s: writing failed", path);
    }
    return MVM_OK;
}
