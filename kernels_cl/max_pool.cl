/* Max pooling. A work-item handles CLPOOL_ROWS x CLPOOL_COLS outputs (forward) or inputs
 * (backward): the forward loads each input element of their windows once and folds it
 * into every window that taps it; the backward gathers row by row (on the H200 that beat
 * loading each candidate window once for all rows: 713 against 1,161 us on
 * [128,64,128,128] k3 s1), each candidate window once for the work-item's columns. */

#include "clpool.h"
#include "plane.h"

/* The sizes every max pooling kernel takes: the plane's, the output's, then the window's
 * in the order of shapes.Window.args(). A kernel and its `_plane` twin take the same
 * arguments. */
#define MAX_POOL_SIZES                                                              \
    int H, int W, int OH, int OW, int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw

/* Declares the maxima best[rows][cols] (of type acc) and their indices best_i (of type
 * pos) of a forward tile before its first tap: -inf and -1. */
#define START_MAX_TILE(best, best_i, acc, pos, rows, cols)                          \
    acc best[rows][cols];                                                           \
    pos best_i[rows][cols];                                                         \
    UNROLL for (int r_ = 0; r_ < (rows); ++r_)                                      \
        UNROLL for (int c_ = 0; c_ < (cols); ++c_) {                                \
            best[r_][c_] = -INFINITY;                                               \
            best_i[r_][c_] = -1;                                                    \
        }
/* With -DCLPOOL_NAN_APART (values only: the host's choice for planes of one row on a GPU,
 * where it paid) a forward tile takes the greater of its maximum and each tap, and keeps
 * each window's last NaN apart in best_i, putting it back before the store: the same
 * value, bit for bit (on the H200, max_pool1d k3 s2 of [64,256,4096]: 156.1 -> 117.9 us;
 * 2-D windows gained nothing, k3 s1 lost: 326 -> 358 us). */
#if defined(CLPOOL_NO_INDICES) && defined(CLPOOL_NAN_APART)
typedef acc_t tile_index_t;
#define FOLD_TILE(best, nan, v, at)                                                 \
    {                                                                               \
        (best) = (v) > (best) ? (v) : (best);                                       \
        (nan) = isnan(v) ? (v) : (nan);                                             \
    }
#define NAN_BACK(best, nan)                                                         \
    UNROLL for (int c_ = 0; c_ < CLPOOL_COLS; ++c_)                                 \
        (best)[c_] = isnan((nan)[c_]) ? (nan)[c_] : (best)[c_];
#else
typedef pos_t tile_index_t;
#define FOLD_TILE FOLD_MAX
#define NAN_BACK(best, nan)
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

    START_MAX_TILE(best, best_i, acc_t, tile_index_t, CLPOOL_ROWS, CLPOOL_COLS);
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
                        FOLD_TILE(best[r][c], best_i[r][c], v, at)
        }
    }
    for (int r = 0; r < CLPOOL_ROWS && oh0 + r < OH; ++r) {
        long o = (plane * OH + oh0 + r) * OW + ow0;
        NAN_BACK(best[r], best_i[r])
        STORE_COLS(out, o, best[r], min(CLPOOL_COLS, OW - ow0))
#ifndef CLPOOL_NO_INDICES
        STORE_INDEX_COLS(indices, o, best_i[r], min(CLPOOL_COLS, OW - ow0))
#endif
    }
}

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
    depth_taps dt = depth_taps_2d();
    FOR_PLANE_WINDOWS(plane * OH * OW, (kw - 1) * dw + 1,
        max_window(xp, out, indices, o, dt, H, W, hs, ws, kh, kw, dh, dw),
        max_window16(xp, out, indices, o, dt, H, W, hs, ws, kh, kw, sw, dh, dw))
}

/* grad_x[i] = sum, in ascending output order, of grad_out over the windows that can
 * contain i and whose index names i. An index naming no element of the plane matches
 * nothing. Each window that reaches the work-item's tile is loaded once for all of it,
 * as the 3-D backward does: with the window sizes and padding constant, which element a
 * window covers folds at build time (windows_of_tile). */
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
    int ih0 = tile_start(1, CLPOOL_ROWS, H);
    int span_h = (kh - 1) * dh + 1, span_w = (kw - 1) * dw + 1;
    tile_windows th = windows_of_tile(ih0, CLPOOL_ROWS, H, sh, ph, span_h, OH),
                 tw = windows_of_tile(iw0, CLPOOL_COLS, W, sw, pw, span_w, OW);
    pos_t self = (pos_t)ih0 * W + iw0;
    acc_t g[CLPOOL_ROWS][CLPOOL_COLS];
    UNROLL for (int r = 0; r < CLPOOL_ROWS; ++r)
        UNROLL for (int c = 0; c < CLPOOL_COLS; ++c)
            g[r][c] = 0;
    UNROLL for (int a = 0; a < th.count; ++a) {
        int oh = th.first + a;
        if (!INSIDE(oh, th.end))
            continue;
        UNROLL for (int b = 0; b < tw.count; ++b) {
            int ow = tw.first + b;
            if (!INSIDE(ow, tw.end))
                continue;
            pos_t o = (pos_t)oh * OW + ow;
            acc_t v = LOAD(gp, o);
            /* the tile's element that the index names, r * W + c, where it names one
             * (unsigned: any index, no overflow) */
            uindex_t named = (uindex_t)ip[o] - (uindex_t)self;
            UNROLL for (int r = 0; r < CLPOOL_ROWS; ++r)
                if (COVERS(th, r, a, CLPOOL_ROWS, sh, span_h))
                    UNROLL for (int c = 0; c < CLPOOL_COLS; ++c)
                        if (COVERS(tw, c, b, CLPOOL_COLS, sw, span_w)
                            && named == (uindex_t)r * W + c)
                            g[r][c] += v;
        }
    }
    for (int r = 0; r < CLPOOL_ROWS && ih0 + r < H; ++r)
        STORE_COLS(grad_x, plane * H * W + self + (pos_t)r * W, g[r], min(CLPOOL_COLS, W - iw0))
}

/* The backward for a CPU: one work-item per plane, or per band of its rows where planes
 * are fewer than cores (Policy.plane_bands), adds each gradient at the element its index
 * names, in output order (into rows cleared just before), skipping an index outside its
 * window or the band (checked 16 windows at a time: plane.h). That is the gather
 * above (the same sums in the same order) as plain loops, PyTorch's CPU algorithm: a CPU
 * gathering pays a vector gather per candidate window (BENCHMARKS.md). */
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
    pos_t HW = (pos_t)H * W;
    int2 rows = plane_band(H);
    int r0 = rows.x, r1 = rows.y;
    index_t lo = (pos_t)r0 * W, hi = (pos_t)r1 * W; /* one depth: the band's rows */
    int z0 = 0, span_d = 1, span_h = (kh - 1) * dh + 1, span_w = (kw - 1) * dw + 1;
    int cleared = r0;
    for (int oh = 0; oh < OH && oh * sh - ph < r1; ++oh) {
        int y0 = oh * sh - ph;
        if (y0 + span_h <= r0)
            continue;
        cleared = clear_rows(xp, W, cleared, min(y0 + span_h, r1));
        ADD_MAX_GRADS_ROW((pos_t)oh * OW, -pw)
    }
    clear_rows(xp, W, cleared, r1);
}

#if CLPOOL_DTYPE == 64
typedef long4 mask4_t; /* what isgreater() of two acc4_t gives */
#else
typedef int4 mask4_t;
#endif

#define STORE_INDEX4U(p, i, v) vstore4(CONVERT_INDEX4(v), 0, (p) + (i))
#ifdef CLPOOL_LARGE_PLANE
typedef long4 pos4_t;
#else
typedef int4 pos4_t;
#endif

/* Fold tap v of 4 channels at `at` into (best, best_i) as FOLD_MAX does, lane by lane: a
 * lane's first tap (best_i < 0) sets its index, a -inf there no greater than the -inf
 * before it. The values in vectors (scalar FOLD_MAX per lane made PoCL's max_pool2d of
 * [2,64,56,56] k3 s2 7x slower: 0.40 -> 3.0 ms). */
#define FOLD_MAX4(best, best_i, v, at)                                              \
    {                                                                               \
        mask4_t m_ = MAX_TAKES(v, best);                                            \
        TAKE_MAX(best, v, m_);                                                      \
        (best_i).x = m_.x || (best_i).x < 0 ? (at) : (best_i).x;                    \
        (best_i).y = m_.y || (best_i).y < 0 ? (at) : (best_i).y;                    \
        (best_i).z = m_.z || (best_i).z < 0 ? (at) : (best_i).z;                    \
        (best_i).w = m_.w || (best_i).w < 0 ? (at) : (best_i).w;                    \
    }

/* The max (and index) of 4 channels contiguous in out and indices (channels-last) at
 * `at`. */
inline void store_max4(__global elem_t *out, __global index_t *indices, long at, acc4_t best,
                       pos4_t best_i, int aligned)
{
    STORE4CL(out, at, best, aligned);
#ifndef CLPOOL_NO_INDICES
    if (aligned)
        *(__global index4_t *)(indices + at) = CONVERT_INDEX4(best_i);
    else
        STORE_INDEX4U(indices, at, best_i);
#endif
}

/* The max of one window starting at (hs, ws) over 4 channels contiguous in x, out and
 * indices (channels-last), from xp (taps at h * x_sh + w * x_sw) into out and indices at
 * `at`: FOLD_MAX4 over its taps inside the plane, in row-major window order. */
inline void max_window4(__global const elem_t *xp, __global elem_t *out,
                        __global index_t *indices, long at, int H, int W, int hs, int ws,
                        int kh, int kw, int dh, int dw, long x_sh, long x_sw, int aligned)
{
    acc4_t best = -INFINITY;
    pos4_t best_i = -1;
    int2 ti = taps_within(hs, kh, dh, H), tj = taps_within(ws, kw, dw, W);
    for (int i = ti.x; i < ti.y; ++i) {
        int h = hs + i * dh;
        for (int j = tj.x; j < tj.y; ++j) {
            int w = ws + j * dw;
            acc4_t v = LOAD4CL(xp, (long)h * x_sh + (long)w * x_sw, aligned);
            FOLD_MAX4(best, best_i, v, (pos_t)h * W + w)
        }
    }
    store_max4(out, indices, at, best, best_i, aligned);
}

/* The CLPOOL_CL_ROWS x CLPOOL_CL_PIX windows of a channels-last forward tile, starting at
 * (hs + r * sh, ws + k * sw), over 4 channels: those of the first `rows` x `pixels`
 * stored from `at`, `step_h` and `step_w` apart. With the window sizes as constants, one
 * pass over the rows of their input, each element loaded once and folded into every
 * window that taps it (each window sees its taps in its own row-major order, those
 * outside the plane skipped): all loads of a row in flight together; else max_window4 for
 * each. */
#ifdef CLPOOL_KH
#define CL_SPAN_H ((CLPOOL_CL_ROWS - 1) * CLPOOL_SH + (CLPOOL_KH - 1) * CLPOOL_DH + 1)
#define CL_SPAN_W ((CLPOOL_CL_PIX - 1) * CLPOOL_SW + (CLPOOL_KW - 1) * CLPOOL_DW + 1)
#endif
inline void max_tile4(__global const elem_t *xp, __global elem_t *out,
                      __global index_t *indices, long at, long step_h, long step_w, int rows,
                      int pixels, int H, int W, int hs, int ws, int kh, int kw, int sh, int sw,
                      int dh, int dw, long x_sh, long x_sw, int aligned)
{
#ifdef CLPOOL_KH
    int span_h = (CLPOOL_KH - 1) * CLPOOL_DH + 1, span_w = (CLPOOL_KW - 1) * CLPOOL_DW + 1;
    START_MAX_TILE(best, best_i, acc4_t, pos4_t, CLPOOL_CL_ROWS, CLPOOL_CL_PIX);
    UNROLL for (int t = 0; t < CL_SPAN_H; ++t) {
        int h = hs + t;
        if (!INSIDE(h, H) || !any_tap(t, CLPOOL_CL_ROWS, CLPOOL_SH, span_h, CLPOOL_DH))
            continue;
        long row = (long)h * x_sh + (long)ws * x_sw;
        UNROLL for (int u = 0; u < CL_SPAN_W; ++u) {
            if (!INSIDE(ws + u, W) || !any_tap(u, CLPOOL_CL_PIX, CLPOOL_SW, span_w, CLPOOL_DW))
                continue;
            acc4_t v = LOAD4CL(xp, row + u * x_sw, aligned);
            pos_t a = (pos_t)h * W + ws + u;
            UNROLL for (int r = 0; r < CLPOOL_CL_ROWS; ++r)
                UNROLL for (int k = 0; k < CLPOOL_CL_PIX; ++k)
                    if (TAP(t, r, CLPOOL_SH, span_h, CLPOOL_DH)
                        && TAP(u, k, CLPOOL_SW, span_w, CLPOOL_DW))
                        FOLD_MAX4(best[r][k], best_i[r][k], v, a)
        }
    }
    UNROLL for (int r = 0; r < CLPOOL_CL_ROWS; ++r)
        UNROLL for (int k = 0; k < CLPOOL_CL_PIX; ++k)
            if (r < rows && k < pixels)
                store_max4(out, indices, at + r * step_h + k * step_w, best[r][k],
                           best_i[r][k], aligned);
#else
    for (int r = 0; r < rows; ++r)
        for (int k = 0; k < pixels; ++k)
            max_window4(xp, out, indices, at + r * step_h + k * step_w, H, W, hs + r * sh,
                        ws + k * sw, kh, kw, dh, dw, x_sh, x_sw, aligned);
#endif
}

/* max_pool2d_forward for an input of any strides, the results written through out's
 * strides (indices has the same): one output per work-item, its taps in row-major window
 * order inside the plane; indices stay flat in the (H, W) plane, h * W + w. With
 * channels_inner == 4 (channels contiguous in x and the results, C a multiple of 4) a
 * work-item takes 4 channels of a tile of outputs in vectors (max_tile4): a
 * CPU compiler does not vectorize the scalar fold across work-items (PoCL: [8,64,56,56]
 * k3 s2 20 ms scalar). */
__kernel void max_pool2d_forward_strided(__global const elem_t *restrict x,
                                         __global elem_t *restrict out,
                                         __global index_t *restrict indices,
                                         STRIDED_FORWARD_SIZES, MAX_POOL_SIZES)
{
    FIX_WINDOW();
    item_t o;
#ifndef CLPOOL_NO_LANES16
    if (channels_inner == 16) { /* a CPU: output row o.h of image o.n (plane.h) */
        o.n = split_row(get_global_id(2), OH, &o.h);
        max_row16(x + AT(x, o.n, 0, 0, 0), out, indices, AT_OUT(out, o.n, 0, o.h, 0), out_sw,
                  row16_channels(C), H, W, OW, o.h * sh - ph, kh, kw, sw, pw, dh, dw, x_sh, x_sw);
        return;
    }
#endif
    if (channels_inner == 4) {
        if (nhwc_item(&o, C, OH, OW))
            max_tile4(x + AT(x, o.n, o.c, 0, 0), out, indices, AT_OUT(out, o.n, o.c, o.h, o.w),
                      out_sh, out_sw, min(CLPOOL_CL_ROWS, OH - o.h),
                      min(CLPOOL_CL_PIX, OW - o.w), H, W, o.h * sh - ph, o.w * sw - pw, kh,
                      kw, sh, sw, dh, dw, x_sh, x_sw, ALIGNED4(x, out));
        return;
    }
    if (!strided_item(&o, C, OH, OW, channels_inner))
        return;
    __global const elem_t *xp = x + AT(x, o.n, o.c, 0, 0);
    int hs = o.h * sh - ph, ws = o.w * sw - pw;
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
    STORE_MAX(out, indices, at, best, best_i);
}

/* max_pool2d_backward for grad_out and indices of any strides, grad_x written through its
 * own: one input element per work-item (4 channels of a tile of them with channels_inner
 * == 4, see max_gather4) gathers, in output order, the gradients of the windows whose index
 * names it (an index outside its window or the plane matches nothing), as the kernels
 * above. */
__kernel void max_pool2d_backward_strided(__global const elem_t *restrict grad_out,
                                          __global const index_t *restrict indices,
                                          __global elem_t *restrict grad_x,
                                          STRIDED_BACKWARD_SIZES, INDICES_VIEW_SIZES,
                                          MAX_POOL_SIZES)
{
    FIX_WINDOW();
    item_t e;
    int span_h = (kh - 1) * dh + 1, span_w = (kw - 1) * dw + 1;
#ifndef CLPOOL_NO_LANES16
    if (channels_inner == 16) { /* a CPU: input row e.h of image e.n (plane.h) */
        e.n = split_row(get_global_id(2), H, &e.h);
        max_gather_row16(grad_out + AT(grad_out, e.n, 0, 0, 0),
                         indices + AT(indices, e.n, 0, 0, 0), grad_x,
                         AT_OUT(grad_x, e.n, 0, e.h, 0), grad_x_sw, row16_channels(C), H, W,
                         OH, OW, e.h, sh, sw, ph, pw, span_h, span_w, grad_out_sh,
                         grad_out_sw, indices_sh, indices_sw);
        return;
    }
#endif
    if (channels_inner == 4) {
        if (!nhwc_item(&e, C, H, W))
            return;
        int rows = min(CLPOOL_CL_ROWS, H - e.h), pixels = min(CLPOOL_CL_PIX, W - e.w);
        max_gather4(grad_out + AT(grad_out, e.n, e.c, 0, 0),
                    indices + AT(indices, e.n, e.c, 0, 0), grad_x,
                    AT_OUT(grad_x, e.n, e.c, e.h, e.w), grad_x_sh, grad_x_sw, rows, pixels, 0,
                    e.h, e.w, one_window(), windows_reaching(e.h, rows, H, sh, ph, span_h, OH),
                    windows_reaching(e.w, pixels, W, sw, pw, span_w, OW), H, W, sh, sw, ph,
                    pw, span_h, span_w, 0, grad_out_sh, grad_out_sw, 0, indices_sh,
                    indices_sw, ALIGNED4(grad_out, grad_x),
                    ((indices_offset | indices_sn | indices_sh | indices_sw) & 3) == 0);
        return;
    }
    if (!strided_item(&e, C, H, W, channels_inner))
        return;
    window_range rows = windows_reaching(e.h, 1, H, sh, ph, span_h, OH);
    window_range cols = windows_reaching(e.w, 1, W, sw, pw, span_w, OW);
    pos_t self = (pos_t)e.h * W + e.w;
    acc_t g = 0;
    for (int oh = rows.first; oh < rows.end; ++oh)
        for (int ow = cols.first; ow < cols.end; ++ow) {
            acc_t v = LOAD(grad_out, AT(grad_out, e.n, e.c, oh, ow));
            index_t at = indices[AT(indices, e.n, e.c, oh, ow)];
            g += INSIDE(e.w - (ow * sw - pw), span_w) && at == self ? v : (acc_t)0;
        }
    STORE(grad_x, AT_OUT(grad_x, e.n, e.c, e.h, e.w), g);
}
