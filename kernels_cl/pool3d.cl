/* 3-D pooling over (D, H, W) volumes. Forward kernels take one work-item per output,
 * backward kernels one per input element: dimension 0 walks W, 1 walks H, 2 the
 * (batch, channel, depth) rows of the output (forward) or the input (backward). Volume
 * offsets are 64-bit; offsets inside a volume are pos_t (-DCLPOOL_LARGE_PLANE for a
 * volume of 2^31 elements or more). */

#include "clpool.h"

/* The sizes every 3-D max pooling kernel takes: the volume's, the output's, then the
 * window's (kernel, stride, padding, dilation), each as (d, h, w). */
#define MAX_POOL3D_SIZES                                                            \
    int D, int H, int W, int OD, int OH, int OW, int kd, int kh, int kw, int sd,    \
    int sh, int sw, int pd, int ph, int pw, int dd, int dh, int dw

/* The sizes of the 3-D average pooling kernels: as MAX_POOL3D_SIZES without dilation,
 * then the divisor rule. */
#define AVG_POOL3D_SIZES                                                            \
    int D, int H, int W, int OD, int OH, int OW, int kd, int kh, int kw, int sd,    \
    int sh, int sw, int pd, int ph, int pw, int count_include_pad, int divisor_override

/* The sizes of the 3-D adaptive average pooling kernels. */
#define ADAPTIVE_POOL3D_SIZES                                                       \
    int D, int H, int W, int OD, int OH, int OW

/* Declares (ow, oh, z) of this work-item, z the (volume, depth) row along dimension 2,
 * and returns where (ow, oh) lies past the W x H extent. */
#define ITEM3D(ow, oh, z, W, H)                                                     \
    int ow = get_global_id(0), oh = get_global_id(1);                               \
    long z = get_global_id(2);                                                      \
    if (ow >= (W) || oh >= (H))                                                     \
        return

/* Splits row z of `n` planes per volume into its volume and its plane i: in 32 bits with
 * -DCLPOOL_ROWS32 (fewer than 2^32 rows; 64-bit division is slow on GPUs). */
#ifdef CLPOOL_ROWS32
#define SPLIT_ROW(z, n, volume, i)                                                  \
    long volume = (uint)(z) / (uint)(n);                                            \
    int i = (int)((uint)(z) - (uint)volume * (uint)(n))
#else
#define SPLIT_ROW(z, n, volume, i)                                                  \
    long volume = (z) / (n);                                                        \
    int i = (int)((z) - volume * (n))
#endif

/* Window sizes are kernel arguments; with -DCLPOOL_3D_KD=.. -DCLPOOL_3D_KH=..
 * -DCLPOOL_3D_KW=.. and likewise _SD.. (stride), _PD.. (padding) and, for max pooling,
 * _DD.. (dilation) they become compile-time constants (divisions by a constant stride
 * are cheap). Names of their own: clpool.h's CLPOOL_KH.. switch on 2-D code paths. */
#ifdef CLPOOL_3D_KD
#define FIX_WINDOW3D()                                                              \
    (kd = CLPOOL_3D_KD, kh = CLPOOL_3D_KH, kw = CLPOOL_3D_KW, sd = CLPOOL_3D_SD,    \
     sh = CLPOOL_3D_SH, sw = CLPOOL_3D_SW, pd = CLPOOL_3D_PD, ph = CLPOOL_3D_PH,    \
     pw = CLPOOL_3D_PW)
#define FIX_DILATION3D() (dd = CLPOOL_3D_DD, dh = CLPOOL_3D_DH, dw = CLPOOL_3D_DW)
#else
#define FIX_WINDOW3D() ((void)0)
#define FIX_DILATION3D() ((void)0)
#endif

/* The first tap inside the volume sets the index (then a window of -inf names its
 * first element); values only: no index to set. */
#ifdef CLPOOL_NO_INDICES
#define FIRST_TAP(best_i) 0
#else
#define FIRST_TAP(best_i) ((best_i) < 0)
#endif

/* Tiles: a forward work-item takes CLPOOL_ROWS x CLPOOL_COLS outputs of one output depth
 * and walks the input their windows tap once, in (d, h, w) order, folding each element
 * into every window of the tile that taps it (each window sees its taps in its own
 * order); a backward work-item takes CLPOOL_COLS input columns of CLPOOL_ROWS rows and
 * loads each candidate window (and computes its divisor) once for them, adding in
 * ascending output order as a work-item per element did. The host builds GPU programs
 * with the window sizes as constants and -DCLPOOL_UNROLL: a walk over fewer than
 * SHORT_SPAN offsets of an axis then visits every offset (a constant trip count: it
 * unrolls and its tap tests fold) and skips those outside the axis; otherwise it visits
 * those taps_inside() gives. */
#if defined(CLPOOL_3D_KD) && defined(CLPOOL_UNROLL)
#define WALK_ALL(n, s, k, d) ((long)((n) - 1) * (s) + (long)((k) - 1) * (d) < SHORT_SPAN)
#else
#define WALK_ALL(n, s, k, d) 0
#endif

/* The offsets, from `start` along an axis of `size`, that the walk over the input of a
 * tile's n windows (stride s, k taps, dilation d) visits. */
inline tap_range tile_walk(int start, int n, int s, int k, int d, int size)
{
    if (WALK_ALL(n, s, k, d)) {
        tap_range r = {0, (n - 1) * s + (k - 1) * d + 1, 1};
        return r;
    }
    return taps_inside(start, n, s, k, d, size);
}

/* True where visited offset t is no tap of the tile inside the axis. */
inline int no_tap(int t, int start, int n, int s, int k, int d, int size)
{
    if (WALK_ALL(n, s, k, d))
        return !INSIDE(start + t, size) || !any_tap(t, n, s, (k - 1) * d + 1, d);
    return n > 1 && !any_tap(t, n, s, (k - 1) * d + 1, d);
}

/* True when visited offset t is a tap of window i of the tile's n. */
#define TILE_TAP(t, i, n, s, k, d) ((n) == 1 || TAP(t, i, s, ((k) - 1) * (d) + 1, d))

/* The forward walk over the input of the tile of windows starting at (ds, hs, ws) in the
 * volume xp: FOLD for each element v, at offset `at` in the volume, and each window
 * (r, c) of the tile that taps it. */
#define WALK_TILE3D(xp, ds, hs, ws, FOLD)                                           \
    tap_range wd_ = tile_walk(ds, 1, sd, kd, dd, D),                                \
              wh_ = tile_walk(hs, CLPOOL_ROWS, sh, kh, dh, H),                      \
              ww_ = tile_walk(ws, CLPOOL_COLS, sw, kw, dw, W);                      \
    UNROLL for (int q_ = wd_.first; q_ < wd_.end; q_ += wd_.step) {                 \
        if (no_tap(q_, ds, 1, sd, kd, dd, D))                                       \
            continue;                                                               \
        pos_t depth_ = (pos_t)((ds) + q_) * H + (hs);                               \
        UNROLL for (int t_ = wh_.first; t_ < wh_.end; t_ += wh_.step) {             \
            if (no_tap(t_, hs, CLPOOL_ROWS, sh, kh, dh, H))                         \
                continue;                                                           \
            pos_t row_ = (depth_ + t_) * W + (ws);                                  \
            UNROLL for (int u_ = ww_.first; u_ < ww_.end; u_ += ww_.step) {         \
                if (no_tap(u_, ws, CLPOOL_COLS, sw, kw, dw, W))                     \
                    continue;                                                       \
                pos_t at = row_ + u_;                                               \
                acc_t v = LOAD(xp, at);                                             \
                UNROLL for (int r = 0; r < CLPOOL_ROWS; ++r)                        \
                    UNROLL for (int c = 0; c < CLPOOL_COLS; ++c)                    \
                        if (TILE_TAP(t_, r, CLPOOL_ROWS, sh, kh, dh)                \
                            && TILE_TAP(u_, c, CLPOOL_COLS, sw, kw, dw))            \
                            FOLD;                                                   \
            }                                                                       \
        }                                                                           \
    }

/* out = max over the window, NaN winning (the last NaN in window order keeps its index,
 * as in PyTorch) and ties keeping the first element in (d, h, w) window order; a window
 * with no element gives -inf and index -1. max_pool3d builds with -DCLPOOL_NO_INDICES
 * and passes a placeholder for `indices`. */
__kernel void max_pool3d_forward(__global const elem_t *restrict x,
                                 __global elem_t *restrict out,
                                 __global index_t *restrict indices,
                                 MAX_POOL3D_SIZES)
{
    FIX_WINDOW3D();
    FIX_DILATION3D();
    FORWARD_TILE(oh0, ow0, OH, OW);
    long z = get_global_id(2);
    SPLIT_ROW(z, OD, volume, od);
    __global const elem_t *xp = x + volume * D * H * W;
    int ds = od * sd - pd, hs = oh0 * sh - ph, ws = ow0 * sw - pw;
    acc_t best[CLPOOL_ROWS][CLPOOL_COLS];
    pos_t best_i[CLPOOL_ROWS][CLPOOL_COLS];
    UNROLL for (int r = 0; r < CLPOOL_ROWS; ++r)
        UNROLL for (int c = 0; c < CLPOOL_COLS; ++c) {
            best[r][c] = -INFINITY;
            best_i[r][c] = -1;
        }
    WALK_TILE3D(xp, ds, hs, ws,
                if (FIRST_TAP(best_i[r][c]) || v > best[r][c] || isnan(v)) {
                    best[r][c] = v;
                    best_i[r][c] = at;
                })
    for (int r = 0; r < CLPOOL_ROWS && oh0 + r < OH; ++r)
        for (int c = 0; c < CLPOOL_COLS && ow0 + c < OW; ++c) {
            long o = (z * OH + oh0 + r) * OW + ow0 + c;
            STORE(out, o, best[r][c]);
#ifndef CLPOOL_NO_INDICES
            indices[o] = (index_t)best_i[r][c];
#endif
        }
}

/* grad_x[e] = sum, in ascending output order, of grad_out over the windows that can
 * contain e and whose index names e. An index naming no element of the volume matches
 * nothing. A work-item gathers its rows one by one (as max_pool2d_backward), each
 * candidate window loaded once for its columns. */
__kernel void max_pool3d_backward(__global const elem_t *restrict grad_out,
                                  __global const index_t *restrict indices,
                                  __global elem_t *restrict grad_x,
                                  MAX_POOL3D_SIZES)
{
    FIX_WINDOW3D();
    FIX_DILATION3D();
    int iw0 = tile_start(0, CLPOOL_COLS, W);
    if (iw0 >= W)
        return;
    long z = get_global_id(2);
    SPLIT_ROW(z, D, volume, id);
    long first = volume * OD * OH * OW;
    __global const elem_t *gp = grad_out + first;
    __global const index_t *ip = indices + first;
    int span_w = (kw - 1) * dw + 1;
    window_range rd = windows_reaching(id, 1, D, sd, pd, (kd - 1) * dd + 1, OD),
                 rw = windows_reaching(iw0, CLPOOL_COLS, W, sw, pw, span_w, OW);
    FOR_EACH_ROW(ih, H) {
        pos_t self = ((pos_t)id * H + ih) * W + iw0;
        window_range rh = windows_reaching(ih, 1, H, sh, ph, (kh - 1) * dh + 1, OH);
        acc_t g[CLPOOL_COLS];
        UNROLL for (int c = 0; c < CLPOOL_COLS; ++c)
            g[c] = 0;
        UNROLL for (int a = 0; a < windows_to_visit(rd); ++a)
            UNROLL for (int b = 0; b < windows_to_visit(rh); ++b)
                UNROLL for (int e = 0; e < windows_to_visit(rw); ++e) {
                    int od = rd.first + a, oh = rh.first + b, ow = rw.first + e;
                    if (od >= rd.end || oh >= rh.end || ow >= rw.end)
                        continue;
                    pos_t o = ((pos_t)od * OH + oh) * OW + ow;
                    acc_t v = LOAD(gp, o);
                    index_t at = ip[o];
                    int left = iw0 - (ow * sw - pw); /* column iw0 in window ow */
                    UNROLL for (int c = 0; c < CLPOOL_COLS; ++c)
                        g[c] += at == self + c && INSIDE(left + c, span_w) ? v : (acc_t)0;
                }
        for (int c = 0; c < CLPOOL_COLS && iw0 + c < W; ++c)
            STORE(grad_x, volume * D * H * W + self + c, g[c]);
    }
}

/* Divisors: at most the window's elements, fewer than 2^31 where its sizes are constants
 * (32-bit arithmetic then). */
#if defined(CLPOOL_3D_KD) && CLPOOL_3D_KD * CLPOOL_3D_KH * CLPOOL_3D_KW < 2147483647
typedef int divisor_t;
#else
typedef long divisor_t;
#endif

/* The average pooling divisor of the window starting at (ds, hs, ws) in padded
 * coordinates, as ATen's avg_pool3d computes it; 0 for a window with no element (whose
 * output is 0). */
inline divisor_t avg_divisor3d(int ds, int hs, int ws, AVG_POOL3D_SIZES)
{
    if (divisor_override != 0)
        return divisor_override;
    int de = min(ds + kd, D + pd), he = min(hs + kh, H + ph), we = min(ws + kw, W + pw);
    if (count_include_pad)
        return (divisor_t)(de - ds) * (he - hs) * (we - ws);
    return (divisor_t)max(min(de, D) - max(ds, 0), 0) * max(min(he, H) - max(hs, 0), 0)
           * max(min(we, W) - max(ws, 0), 0);
}

#define AVG_POOL3D_ARGS                                                             \
    D, H, W, OD, OH, OW, kd, kh, kw, sd, sh, sw, pd, ph, pw, count_include_pad,     \
    divisor_override

/* out = the sum over the window's elements inside the volume / its divisor. */
__kernel void avg_pool3d_forward(__global const elem_t *restrict x,
                                 __global elem_t *restrict out,
                                 AVG_POOL3D_SIZES)
{
    int dd = 1, dh = 1, dw = 1;
    FIX_WINDOW3D();
    FORWARD_TILE(oh0, ow0, OH, OW);
    long z = get_global_id(2);
    SPLIT_ROW(z, OD, volume, od);
    __global const elem_t *xp = x + volume * D * H * W;
    int ds = od * sd - pd, hs = oh0 * sh - ph, ws = ow0 * sw - pw;
    acc_t sum[CLPOOL_ROWS][CLPOOL_COLS];
    UNROLL for (int r = 0; r < CLPOOL_ROWS; ++r)
        UNROLL for (int c = 0; c < CLPOOL_COLS; ++c)
            sum[r][c] = 0;
    WALK_TILE3D(xp, ds, hs, ws, sum[r][c] += v)
    for (int r = 0; r < CLPOOL_ROWS && oh0 + r < OH; ++r)
        for (int c = 0; c < CLPOOL_COLS && ow0 + c < OW; ++c) {
            divisor_t div = avg_divisor3d(ds, hs + r * sh, ws + c * sw, AVG_POOL3D_ARGS);
            STORE(out, (z * OH + oh0 + r) * OW + ow0 + c,
                  div ? sum[r][c] / (acc_t)div : (acc_t)0);
        }
}

/* grad_x[e] = sum, in ascending output order, of grad_out / divisor over the windows
 * containing e (the forward's divisors). */
__kernel void avg_pool3d_backward(__global const elem_t *restrict grad_out,
                                  __global elem_t *restrict grad_x,
                                  AVG_POOL3D_SIZES)
{
    FIX_WINDOW3D();
    int iw0 = tile_start(0, CLPOOL_COLS, W), ih0 = tile_start(1, CLPOOL_ROWS, H);
    if (iw0 >= W || ih0 >= H)
        return;
    long z = get_global_id(2);
    SPLIT_ROW(z, D, volume, id);
    __global const elem_t *gp = grad_out + volume * OD * OH * OW;
    window_range rd = windows_reaching(id, 1, D, sd, pd, kd, OD),
                 rh = windows_reaching(ih0, CLPOOL_ROWS, H, sh, ph, kh, OH),
                 rw = windows_reaching(iw0, CLPOOL_COLS, W, sw, pw, kw, OW);
    acc_t g[CLPOOL_ROWS][CLPOOL_COLS];
    UNROLL for (int r = 0; r < CLPOOL_ROWS; ++r)
        UNROLL for (int c = 0; c < CLPOOL_COLS; ++c)
            g[r][c] = 0;
    UNROLL for (int a = 0; a < windows_to_visit(rd); ++a)
        UNROLL for (int b = 0; b < windows_to_visit(rh); ++b)
            UNROLL for (int e = 0; e < windows_to_visit(rw); ++e) {
                int od = rd.first + a, oh = rh.first + b, ow = rw.first + e;
                if (od >= rd.end || oh >= rh.end || ow >= rw.end)
                    continue;
                int top = oh * sh - ph, left = ow * sw - pw;
                acc_t v = LOAD(gp, ((pos_t)od * OH + oh) * OW + ow)
                          / (acc_t)avg_divisor3d(od * sd - pd, top, left, AVG_POOL3D_ARGS);
                UNROLL for (int r = 0; r < CLPOOL_ROWS; ++r)
                    UNROLL for (int c = 0; c < CLPOOL_COLS; ++c)
                        g[r][c] += INSIDE(ih0 + r - top, kh) && INSIDE(iw0 + c - left, kw)
                                       ? v : (acc_t)0;
            }
    for (int r = 0; r < CLPOOL_ROWS && ih0 + r < H; ++r)
        for (int c = 0; c < CLPOOL_COLS && iw0 + c < W; ++c)
            STORE(grad_x, volume * D * H * W + ((pos_t)id * H + ih0 + r) * W + iw0 + c,
                  g[r][c]);
}

/* floor(i*size/n), or the ceiling when `up`: in 32 bits while the product fits (64-bit
 * division is slow on GPUs). Adaptive cell i of n over an axis of `size` spans
 * [cell_first(i, size, n), cell_last(i, size, n)); the cells of n over `size` that contain
 * element i of that axis are cell_first(i, n, size) .. cell_last(i, n, size) - 1. */
inline int scaled(int i, int size, int n, int up)
{
    if (size < 46341 && n < 46341)
        return (int)(((uint)i * (uint)size + (up ? (uint)(n - 1) : 0u)) / (uint)n);
    return (int)(((long)i * size + (up ? n - 1 : 0)) / n);
}
inline int cell_first(int i, int size, int n) { return scaled(i, size, n, 0); }
inline int cell_last(int i, int size, int n) { return scaled(i + 1, size, n, 1); }

/* out = the mean of the cell: its sum / depth / rows / columns, as ATen divides. */
__kernel void adaptive_avg_pool3d_forward(__global const elem_t *restrict x,
                                          __global elem_t *restrict out,
                                          ADAPTIVE_POOL3D_SIZES)
{
    ITEM3D(ow, oh, z, OW, OH);
    SPLIT_ROW(z, OD, volume, od);
    __global const elem_t *xp = x + volume * D * H * W;
    int d0 = cell_first(od, D, OD), d1 = cell_last(od, D, OD);
    int h0 = cell_first(oh, H, OH), h1 = cell_last(oh, H, OH);
    int w0 = cell_first(ow, W, OW), w1 = cell_last(ow, W, OW);
    acc_t sum = 0;
    for (int d = d0; d < d1; ++d)
        for (int h = h0; h < h1; ++h) {
            pos_t row = ((pos_t)d * H + h) * W;
            for (int w = w0; w < w1; ++w)
                sum += LOAD(xp, row + w);
        }
    STORE(out, (z * OH + oh) * OW + ow,
          sum / (acc_t)(d1 - d0) / (acc_t)(h1 - h0) / (acc_t)(w1 - w0));
}

/* grad_x[e] = sum, in ascending output order, of grad_out / depth / rows / columns of
 * each cell containing e. */
__kernel void adaptive_avg_pool3d_backward(__global const elem_t *restrict grad_out,
                                           __global elem_t *restrict grad_x,
                                           ADAPTIVE_POOL3D_SIZES)
{
    ITEM3D(iw, ih, z, W, H);
    SPLIT_ROW(z, D, volume, id);
    __global const elem_t *gp = grad_out + volume * OD * OH * OW;
    int od1 = cell_last(id, OD, D), oh0 = cell_first(ih, OH, H), oh1 = cell_last(ih, OH, H),
        ow0 = cell_first(iw, OW, W), ow1 = cell_last(iw, OW, W);
    acc_t g = 0;
    for (int od = cell_first(id, OD, D); od < od1; ++od) {
        acc_t depth = (acc_t)(cell_last(od, D, OD) - cell_first(od, D, OD));
        for (int oh = oh0; oh < oh1; ++oh) {
            acc_t rows = (acc_t)(cell_last(oh, H, OH) - cell_first(oh, H, OH));
            for (int ow = ow0; ow < ow1; ++ow) {
                acc_t cols = (acc_t)(cell_last(ow, W, OW) - cell_first(ow, W, OW));
                g += LOAD(gp, ((pos_t)od * OH + oh) * OW + ow) / depth / rows / cols;
            }
        }
    }
    STORE(grad_x, volume * D * H * W + ((pos_t)id * H + ih) * W + iw, g);
}
