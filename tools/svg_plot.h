/* A line chart as a standalone SVG file, for `moevm sim --sweep` (a person should be able
 * to look at a sweep without a plotting stack). */
#ifndef MVM_TOOLS_SVG_PLOT_H
#define MVM_TOOLS_SVG_PLOT_H

#include <stdint.h>

#include "moevm/moevm.h"

/* n_series lines over the same n_x x values; y is [n_series][n_x]. Axes start at 0 for y
 * and span the x values; ticks at round numbers; a legend with the labels. Written through
 * path.tmp + rename. MVM_ERR_INVALID for n_x < 2 or non-finite values. */
mvm_status mvm_svg_lines(const char *path, const char *title, const char *xlabel,
                         const char *ylabel, const double *x, uint32_t n_x, const double *y,
                         const char *const *labels, uint32_t n_series);

#endif
