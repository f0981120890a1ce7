/* Max pooling. A work-item handles CLPOOL_ROWS x CLPOOL_COLS outputs (forward) or inputs
 * (backward): the forward loads each input element of their windows once and folds it
 * into every window that taps it; the backward gathers row by row (on the H200 that beat
 * loading each candidate window once for all rows: 713 against 1,161 us on
 * [128,64,128,128] k3 s1), each candidate window once for the work-item's columns. */

#include "clpool.h"

/* The sizes every max pooling kernel takes: the plane's, the output's, then the window's
 * in the order of shapes.Window.args(). A kernel and its `_plane` twin take the same
 * arguments. */
#define MAX_POOL_SIZES                                                              \
    int H, int W, int OH, int OW, int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw

/* Fold tap v at `at` into (best, best_i): NaN wins (the last NaN in window order keeps
 * its index, as in PyTorch), ties keep the first element in row-major window order,
 * and the first tap inside the plane sets the index. */
#ifdef CLPOOL_NO_INDICES /* values only: the first tap needs no special case */
#define FOLD_MAX(best, best_i, v, at)                                               \
    if ((v) > (best) || isnan(v))                                                   \
        (best) = (v);
#define FOLD_MAX16(best, best_i, v, at)                                             \
    (best) = select((best), (v), isgreater((v), (best)) | isnan(v));
#else
#define FOLD_MAX(best, best_i, v, at)                                               \
    if ((best_i) < 0 || (v) > (best) || isnan(v)) {                                 \
        (best) = (v);                                                               \
        (best_i) = (at);                                                            \
    }
/* FOLD_MAX of 16 lanes, except that the first tap sets no index where it is -inf */
#define FOLD_MAX16(best, best_i, v, at)                                             \
    (best_i) = select((best_i), (at), AS_POS16(isgreater((v), (best)) | isnan(v))); \
    (best) = select((best), (v), isgreater((v), (best)) | isnan(v));
#endif

/* out = max over the window; a window with no element gives -inf and index -1.
 * max_pool2d builds with -DCLPOOL_NO_INDICES and passes a placeholder for `indices`:
 * a null pointer or a run-time flag there made Intel's CPU compiler give up
 * vectorizing (3x slower on this project's CPU, BENCHMARKS.md). */
__kernel void max_pool2d_forward(__global const elem_t *restrict x,
                                 __global elem_t *restrict out,
                                 __global index_t *restrict indices,
                                 MAX_POOL_SIZES)
{
    FIX_WINDOW();
    FORWARD_TILE(oh0, ow0, OH, OW);
    long plane = PLANE_ID();
    __global const elem_t *xp = x + plane * H * W;
    int hs = oh0 * sh - ph, ws = ow0 * sw - pw;
    int span_h = (kh - 1) * dh + 1, span_w = (kw - 1) * dw + 1;

    acc_t best[CLPOOL_ROWS][CLPOOL_COLS];
    pos_t best_i[CLPOOL_ROWS][CLPOOL_COLS];
    UNROLL for (int r = 0; r < CLPOOL_ROWS; ++r)
        UNROLL for (int c = 0; c < CLPOOL_COLS; ++c) {
            best[r][c] = -INFINITY;
            best_i[r][c] = -1;
        }
    /* Row-major over the tile's input, so each window sees its taps in its own row-major
     * order; an element no window taps (a dilation gap) is not loaded. Offsets outside the
     * plane are not visited either, except in a short constant span (SHORT_ROWS). */
#if !SHORT_COLS
    tap_range cols = taps_inside(ws, CLPOOL_COLS, sw, kw, dw, W);
#endif
#if SHORT_ROWS
    UNROLL for (int t = 0; t < (CLPOOL_ROWS - 1) * sh + span_h; ++t) {
#else
    tap_range rows = taps_inside(hs, CLPOOL_ROWS, sh, kh, dh, H);
    for (int t = rows.first; t < rows.end; t += rows.step) {
#endif
        int h = hs + t;
        if (!any_tap(t, CLPOOL_ROWS, sh, span_h, dh) || !INSIDE(h, H))
            continue;
        LOAD_ROW(seg, xp, h, W, ws)
#if SHORT_COLS
        UNROLL for (int u = 0; u < (CLPOOL_COLS - 1) * sw + span_w; ++u) {
#else
        for (int u = cols.first; u < cols.end; u += cols.step) {
#endif
            int w = ws + u;
            if (!any_tap(u, CLPOOL_COLS, sw, span_w, dw) || !INSIDE(w, W))
                continue;
            pos_t at = (pos_t)h * W + w;
            acc_t v = ROW_VALUE(seg, xp, h, W, ws, u);
            UNROLL for (int r = 0; r < CLPOOL_ROWS; ++r)
                UNROLL for (int c = 0; c < CLPOOL_COLS; ++c)
                    if (TAP(t, r, sh, span_h, dh) && TAP(u, c, sw, span_w, dw))
                        FOLD_MAX(best[r][c], best_i[r][c], v, at)
        }
    }
    for (int r = 0; r < CLPOOL_ROWS && oh0 + r < OH; ++r) {
        long o = (plane * OH + oh0 + r) * OW + ow0;
        STORE_COLS(out, o, best[r], min(CLPOOL_COLS, OW - ow0))
#ifndef CLPOOL_NO_INDICES
        for (int c = 0; c < CLPOOL_COLS && ow0 + c < OW; ++c)
            indices[o + c] = (index_t)best_i[r][c];
#endif
    }
}

/* The max of one window starting at (hs, ws), stored at out[o] (and its index): its taps
 * inside the plane only. */
inline void max_window(__global const elem_t *xp, __global elem_t *out,
                       __global index_t *indices, long o, int H, int W, int hs, int ws,
                       int kh, int kw, int dh, int dw)
{
    acc_t best = -INFINITY;
    pos_t best_i = -1;
    int2 ti = taps_within(hs, kh, dh, H), tj = taps_within(ws, kw, dw, W);
    for (int i = ti.x; i < ti.y; ++i) {
        int h = hs + i * dh;
        for (int j = tj.x; j < tj.y; ++j) {
            pos_t at = (pos_t)h * W + ws + j * dw;
            FOLD_MAX(best, best_i, LOAD(xp, at), at)
        }
    }
    STORE(out, o, best);
#ifndef CLPOOL_NO_INDICES
    indices[o] = (index_t)best_i;
#endif
}

#ifndef CLPOOL_NO_LANES16
/* max_window for the 16 windows starting at (hs, ws + k * sw), k < 16, whose columns all
 * lie inside the row, as 16-lane vectors. Where every tap is -inf the first tap keeps the
 * index. */
inline void max_window16(__global const elem_t *xp, __global elem_t *out,
                         __global index_t *indices, long o, int H, int W, int hs, int ws,
                         int kh, int kw, int sw, int dh, int dw)
{
    const pos16_t lanes = (pos16_t)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    acc16_t best = -INFINITY;
    pos16_t best_i = -1, first_i = -1;
    int2 ti = taps_within(hs, kh, dh, H);
    for (int i = ti.x; i < ti.y; ++i) {
        int h = hs + i * dh;
        if (first_i.s0 < 0)
            first_i = (pos_t)h * W + ws + lanes * sw;
        for (int j = 0; j < kw; ++j) {
            pos_t at = (pos_t)h * W + ws + j * dw;
            acc16_t v = load16_strided(xp, at, sw);
            FOLD_MAX16(best, best_i, v, at + lanes * sw)
        }
    }
    STORE16(out, o, best);
#ifndef CLPOOL_NO_INDICES
    STORE_INDEX16(indices, o, select(best_i, first_i, best_i < 0));
#endif
}
#endif

/* The forward for a CPU: one work-item per plane, 16 outputs of a row at a time where
 * their windows lie inside the row (PoCL vectorizes only across the work-items of a
 * group, and not the forward above: max k3 s2 of [8,64,112,112] took 41 ms there; one
 * output at a time, Intel's runtime took 12 ms for k3 s3 of [8,64,111,97], 1.2 ms so). */
__kernel void max_pool2d_forward_plane(__global const elem_t *restrict x,
                                       __global elem_t *restrict out,
                                       __global index_t *restrict indices,
                                       MAX_POOL_SIZES)
{
    FIX_WINDOW();
    long plane = get_global_id(0);
    __global const elem_t *xp = x + plane * H * W;
    int2 vec = vector_outputs(W, OW, sw, pw, (kw - 1) * dw + 1);
    for (int oh = 0; oh < OH; ++oh) {
        int hs = oh * sh - ph;
        long o = (plane * OH + oh) * OW;
        FOR_EACH_OUTPUT(ow, OW, vec.x, vec.y,
            max_window(xp, out, indices, o + ow, H, W, hs, ow * sw - pw, kh, kw, dh, dw),
            max_window16(xp, out, indices, o + ow, H, W, hs, ow * sw - pw, kh, kw, sw, dh,
                         dw))
    }
}

/* grad_x[i] = sum of grad_out over the windows that can contain i and whose index
 * names i. An index naming no element of the plane matches nothing. Gradients are
 * loaded whether they match or not, so that the loads issue together; each candidate
 * window is loaded once for the work-item's columns. */
__kernel void max_pool2d_backward(__global const elem_t *restrict grad_out,
                                  __global const index_t *restrict indices,
                                  __global elem_t *restrict grad_x,
                                  MAX_POOL_SIZES)
{
    FIX_WINDOW();
    int iw0 = tile_start(0, CLPOOL_COLS, W);
    if (iw0 >= W)
        return;
    long plane = PLANE_ID();
    __global const elem_t *gp = grad_out + plane * OH * OW;
    __global const index_t *ip = indices + plane * OH * OW;
    int span_w = (kw - 1) * dw + 1;
    window_range cols = windows_reaching(iw0, CLPOOL_COLS, W, sw, pw, span_w, OW);
    FOR_EACH_ROW(ih, H) {
        pos_t self = (pos_t)ih * W + iw0;
        window_range rows = windows_reaching(ih, 1, H, sh, ph, (kh - 1) * dh + 1, OH);
        acc_t g[CLPOOL_COLS];
        UNROLL for (int c = 0; c < CLPOOL_COLS; ++c)
            g[c] = 0;
        UNROLL for (int a = 0; a < windows_to_visit(rows); ++a) {
            int oh = rows.first + a;
            UNROLL for (int b = 0; b < windows_to_visit(cols); ++b) {
                int ow = cols.first + b;
                if (oh >= rows.end || ow >= cols.end)
                    continue;
                pos_t o = (pos_t)oh * OW + ow;
                acc_t v = LOAD(gp, o);
                index_t at = ip[o];
                int left = iw0 - (ow * sw - pw); /* column iw0 in window ow */
                UNROLL for (int c = 0; c < CLPOOL_COLS; ++c)
                    g[c] += at == self + c && INSIDE(left + c, span_w) ? v : (acc_t)0;
            }
        }
        STORE_COLS(grad_x, plane * H * W + self, g, min(CLPOOL_COLS, W - iw0))
    }
}

/* The backward for a CPU: one work-item per plane adds each gradient at the element its
 * index names, in output order (into rows cleared just before), skipping an index outside
 * its window or the plane. That is the gather above (the same sums in the same order) as plain loops,
 * PyTorch's CPU algorithm: a CPU gathering pays a vector gather per candidate window
 * (BENCHMARKS.md). */
__kernel void max_pool2d_backward_plane(__global const elem_t *restrict grad_out,
                                        __global const index_t *restrict indices,
                                        __global elem_t *restrict grad_x,
                                        MAX_POOL_SIZES)
{
    FIX_WINDOW();
    long plane = get_global_id(0);
    __global const elem_t *gp = grad_out + plane * OH * OW;
    __global const index_t *ip = indices + plane * OH * OW;
    __global elem_t *xp = grad_x + plane * H * W;
    int span_h = (kh - 1) * dh + 1, span_w = (kw - 1) * dw + 1;
    int cleared = 0;
    for (int oh = 0; oh < OH; ++oh) {
        cleared = clear_rows(xp, W, cleared, min(oh * sh - ph + span_h, H));
        for (int ow = 0; ow < OW; ++ow) {
            pos_t o = (pos_t)oh * OW + ow;
            index_t at = ip[o];
            if (at < 0 || at >= (index_t)H * W)
                continue;
            /* a names an element of the plane, so pos_t holds it: a 32-bit division
             * unless the plane is larger (64-bit: max bwd k3 s2 2.5 ms against 1.5 on
             * this project's CPU) */
            pos_t a = (pos_t)at, ih = a / W;
            if (INSIDE(ih - (oh * sh - ph), span_h)
                && INSIDE(a - ih * W - (ow * sw - pw), span_w))
                STORE(xp, a, LOAD(xp, a) + LOAD(gp, o));
        }
    }
    clear_rows(xp, W, cleared, H);
}

#if CLPOOL_DTYPE == 64
typedef long4 mask4_t; /* what isgreater() of two acc4_t gives */
#else
typedef int4 mask4_t;
#endif

/* The max of one window starting at (hs, ws) over 4 channels contiguous in x, out and
 * indices (channels-last), from xp and at `at`: FOLD_MAX in 4 lanes, as vectors. Every
 * lane's index starts at the window's first tap inside the plane, which FOLD_MAX's first
 * tap sets (a -inf there is no greater than the -inf before it). */
inline void max_window4(__global const elem_t *xp, __global elem_t *out,
                        __global index_t *indices, long at, int H, int W, int hs, int ws,
                        int kh, int kw, int dh, int dw, long x_sh, long x_sw)
{
    acc4_t best = -INFINITY;
    int2 ti = taps_within(hs, kh, dh, H), tj = taps_within(ws, kw, dw, W);
    pos_t first = ti.x < ti.y && tj.x < tj.y ? (pos_t)(hs + ti.x * dh) * W + ws + tj.x * dw : -1;
    pos_t i0 = first, i1 = first, i2 = first, i3 = first;
    for (int i = ti.x; i < ti.y; ++i) {
        int h = hs + i * dh;
        for (int j = tj.x; j < tj.y; ++j) {
            int w = ws + j * dw;
            acc4_t v = LOAD4(xp, (long)h * x_sh + (long)w * x_sw);
            mask4_t m = isgreater(v, best) | isnan(v);
            best = select(best, v, m);
            pos_t a = (pos_t)h * W + w;
            i0 = m.x ? a : i0;
            i1 = m.y ? a : i1;
            i2 = m.z ? a : i2;
            i3 = m.w ? a : i3;
        }
    }
    STORE(out, at, best.x);
    STORE(out, at + 1, best.y);
    STORE(out, at + 2, best.z);
    STORE(out, at + 3, best.w);
#ifndef CLPOOL_NO_INDICES
    indices[at] = (index_t)i0;
    indices[at + 1] = (index_t)i1;
    indices[at + 2] = (index_t)i2;
    indices[at + 3] = (index_t)i3;
#endif
}

/* max_pool2d_forward for an input of any strides, the results written through out's
 * strides (indices has the same): one output per work-item, its taps in row-major window
 * order inside the plane; indices stay flat in the (H, W) plane, h * W + w. With
 * channels_inner == 4 (channels contiguous in x and the results, C a multiple of 4) a
 * work-item takes 4 channels of an output pixel in vectors (max_window4): a CPU compiler
 * does not vectorize the scalar fold across work-items (PoCL: [8,64,56,56] k3 s2 20 ms
 * scalar). */
__kernel void max_pool2d_forward_strided(__global const elem_t *restrict x,
                                         __global elem_t *restrict out,
                                         __global index_t *restrict indices,
                                         STRIDED_FORWARD_SIZES, MAX_POOL_SIZES)
{
    FIX_WINDOW();
    item_t o;
    if (!strided_item(&o, C, OH, OW, channels_inner))
        return;
    __global const elem_t *xp = x + AT(x, o.n, o.c, 0, 0);
    int hs = o.h * sh - ph, ws = o.w * sw - pw;
    if (channels_inner == 4) {
        max_window4(xp, out, indices, AT_OUT(out, o.n, o.c, o.h, o.w), H, W, hs, ws, kh, kw,
                    dh, dw, x_sh, x_sw);
        return;
    }
    acc_t best = -INFINITY;
    pos_t best_i = -1;
    int2 ti = taps_within(hs, kh, dh, H), tj = taps_within(ws, kw, dw, W);
    for (int i = ti.x; i < ti.y; ++i) {
        int h = hs + i * dh;
        for (int j = tj.x; j < tj.y; ++j) {
            int w = ws + j * dw;
            acc_t v = LOAD(xp, (long)h * x_sh + (long)w * x_sw);
            FOLD_MAX(best, best_i, v, (pos_t)h * W + w)
        }
    }
    long at = AT_OUT(out, o.n, o.c, o.h, o.w);
    STORE(out, at, best);
#ifndef CLPOOL_NO_INDICES
    indices[at] = (index_t)best_i;
#endif
}

/* The strides of the indices a strided backward reads, as an input view. */
#define INDICES_VIEW_SIZES                                                          \
    long indices_offset, long indices_sn, long indices_sc, long indices_sh, long indices_sw

/* max_pool2d_backward for grad_out and indices of any strides, grad_x written through its
 * own: one input element per work-item (4 channels with channels_inner == 4, see
 * load_lanes) gathers, in output order, the gradients of the windows whose index names it
 * (an index outside its window or the plane matches nothing), as the kernels above. */
__kernel void max_pool2d_backward_strided(__global const elem_t *restrict grad_out,
                                          __global const index_t *restrict indices,
                                          __global elem_t *restrict grad_x,
                                          STRIDED_BACKWARD_SIZES, INDICES_VIEW_SIZES,
                                          MAX_POOL_SIZES)
{
    FIX_WINDOW();
    item_t e;
    if (!strided_item(&e, C, H, W, channels_inner))
        return;
    int span_h = (kh - 1) * dh + 1, span_w = (kw - 1) * dw + 1;
    window_range rows = windows_reaching(e.h, 1, H, sh, ph, span_h, OH);
    window_range cols = windows_reaching(e.w, 1, W, sw, pw, span_w, OW);
    pos_t self = (pos_t)e.h * W + e.w;
    int lanes = channels_inner == 4 ? 4 : 1;
    acc4_t g = 0;
    for (int oh = rows.first; oh < rows.end; ++oh)
        for (int ow = cols.first; ow < cols.end; ++ow) {
            acc4_t v = load_lanes(grad_out, AT(grad_out, e.n, e.c, oh, ow), lanes);
            __global const index_t *at = indices + AT(indices, e.n, e.c, oh, ow);
            int inside = INSIDE(e.w - (ow * sw - pw), span_w);
            g.x += inside && at[0] == self ? v.x : (acc_t)0;
            if (lanes == 4) {
                g.y += inside && at[1] == self ? v.y : (acc_t)0;
                g.z += inside && at[2] == self ? v.z : (acc_t)0;
                g.w += inside && at[3] == self ? v.w : (acc_t)0;
            }
        }
    store_lanes(grad_x, AT_OUT(grad_x, e.n, e.c, e.h, e.w), g, lanes);
}
