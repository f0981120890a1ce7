/* 3-D pooling over (D, H, W) volumes. Forward kernels take a tile of outputs per work-item,
 * backward kernels a tile of input elements: dimension 0 walks W, 1 walks H, 2 the
 * (batch, channel, depth) rows of the output (forward) or the input (backward); their
 * `_plane` twins for a CPU take an output plane (forward) or a volume (backward). Volume
 * offsets are 64-bit; offsets inside a volume are pos_t (-DCLPOOL_LARGE_PLANE for a
 * volume, or a view's span inside one, of 2^31 elements or more). */

#include "clpool.h"
#include "plane.h"

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

/* The gradient view avg_pool3d_backward reads (clpool.h's VIEW3D) and the channels. */
#define GRAD_VIEW3D_SIZES VIEW3D(grad_out), int C

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

/* Tiles: a work-item takes CLPOOL_3D_DEPTHS x CLPOOL_ROWS x CLPOOL_COLS outputs (forward)
 * or input elements (backward) of one volume, from depth d0 = slab * CLPOOL_3D_DEPTHS, z =
 * volume * slabs + slab along dimension 2. A forward work-item walks the input its windows
 * tap once, in (d, h, w) order, folding each element into every window of the tile that
 * taps it (each window sees its taps in its own order); a backward one loads each
 * candidate window (and computes its divisor) once for its tile, adding in ascending
 * output order as a work-item per element did. The host builds GPU programs with the
 * window sizes as constants and -DCLPOOL_UNROLL: a walk over fewer than SHORT_SPAN offsets
 * of an axis then visits every offset (a constant trip count: it unrolls and its tap tests
 * fold) and skips those outside the axis; otherwise it visits those taps_inside() gives.
 * A CPU's builds take tiles of one element without unrolling: every tap test and loop over
 * the tile folds away (n == 1), leaving the walk over one window's taps inside the volume
 * (a forward) or over the windows that reach one element (a backward) of a work-item per
 * element (as fast as the per-element kernels that were, under PoCL: [2,16,16,28,28] and
 * [2,64,16,56,56] k3 s2 p1, within 3%). */
#ifndef CLPOOL_3D_DEPTHS
#define CLPOOL_3D_DEPTHS 1
#endif
#define SLABS(n) (((n) + CLPOOL_3D_DEPTHS - 1) / CLPOOL_3D_DEPTHS)
#if defined(CLPOOL_3D_KD) && defined(CLPOOL_UNROLL)
#define UNROLLED3D 1
#else
#define UNROLLED3D 0
#endif
#define WALK_ALL(n, s, k, d)                                                        \
    (UNROLLED3D && (long)((n) - 1) * (s) + (long)((k) - 1) * (d) < SHORT_SPAN)

/* Loops (i, r, c) over the depths, rows and columns of a tile. */
#define FOR_TILE(i, r, c)                                                           \
    UNROLL for (int i = 0; i < CLPOOL_3D_DEPTHS; ++i)                               \
        UNROLL for (int r = 0; r < CLPOOL_ROWS; ++r)                                \
            UNROLL for (int c = 0; c < CLPOOL_COLS; ++c)

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

/* Declares the first output (od0, oh0, ow0) of this forward work-item's tile in `volume`,
 * returning where the tile lies past the output. */
#define FORWARD_TILE3D(od0, oh0, ow0, volume)                                       \
    FORWARD_TILE(oh0, ow0, OH, OW);                                                 \
    SPLIT_ROW((long)get_global_id(2), SLABS(OD), volume, slab_);                    \
    int od0 = slab_ * CLPOOL_3D_DEPTHS

/* The forward walk over the input of the tile of windows starting at (ds, hs, ws) in the
 * volume xp: FOLD for each element v, at offset `at` in the volume, and each window
 * (i, r, c) of the tile that taps it. With -DCLPOOL_VEC4 (the host's choice on a GPU, as
 * for the 2-D forwards: clpool.h's LOAD_ROW) a row's columns load as vload4 chunks
 * (bfloat16 with -DCLPOOL_VEC8: chunks of 8). */
#define WALK_TILE3D(xp, ds, hs, ws, FOLD)                                           \
    tap_range wd_ = tile_walk(ds, CLPOOL_3D_DEPTHS, sd, kd, dd, D),                 \
              wh_ = tile_walk(hs, CLPOOL_ROWS, sh, kh, dh, H),                      \
              ww_ = tile_walk(ws, CLPOOL_COLS, sw, kw, dw, W);                      \
    UNROLL for (int q_ = wd_.first; q_ < wd_.end; q_ += wd_.step) {                 \
        if (no_tap(q_, ds, CLPOOL_3D_DEPTHS, sd, kd, dd, D))                        \
            continue;                                                               \
        pos_t depth_ = (pos_t)((ds) + q_) * H + (hs);                               \
        UNROLL for (int t_ = wh_.first; t_ < wh_.end; t_ += wh_.step) {             \
            if (no_tap(t_, hs, CLPOOL_ROWS, sh, kh, dh, H))                         \
                continue;                                                           \
            pos_t row_ = (depth_ + t_) * W + (ws);                                  \
            LOAD_ROW(seg_, xp, depth_ + t_, W, ws)                                  \
            UNROLL for (int u_ = ww_.first; u_ < ww_.end; u_ += ww_.step) {         \
                if (no_tap(u_, ws, CLPOOL_COLS, sw, kw, dw, W))                     \
                    continue;                                                       \
                pos_t at = row_ + u_;                                               \
                acc_t v = ROW_VALUE(seg_, xp, depth_ + t_, W, ws, u_);              \
                FOR_TILE(i, r, c)                                                   \
                    if (TILE_TAP(q_, i, CLPOOL_3D_DEPTHS, sd, kd, dd)               \
                        && TILE_TAP(t_, r, CLPOOL_ROWS, sh, kh, dh)                 \
                        && TILE_TAP(u_, c, CLPOOL_COLS, sw, kw, dw))                \
                        FOLD;                                                       \
            }                                                                       \
        }                                                                           \
    }

/* Loops (i, r) over the output rows of a forward tile that lie inside the output, each
 * stored at once (STORE_COLS: packed where the host passed -DCLPOOL_PACK). */
#define FOR_TILE_ROWS(i, r, od0, oh0)                                               \
    for (int i = 0; i < CLPOOL_3D_DEPTHS && (od0) + i < OD; ++i)                    \
        for (int r = 0; r < CLPOOL_ROWS && (oh0) + r < OH; ++r)
#define TILE_OUTPUT3D(volume, od, oh, ow) ((((volume) * OD + (od)) * OH + (oh)) * OW + (ow))

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
    FORWARD_TILE3D(od0, oh0, ow0, volume);
    __global const elem_t *xp = x + volume * D * H * W;
    int ds = od0 * sd - pd, hs = oh0 * sh - ph, ws = ow0 * sw - pw;
    acc_t best[CLPOOL_3D_DEPTHS][CLPOOL_ROWS][CLPOOL_COLS];
    pos_t best_i[CLPOOL_3D_DEPTHS][CLPOOL_ROWS][CLPOOL_COLS];
    FOR_TILE(i, r, c) {
        best[i][r][c] = -INFINITY;
        best_i[i][r][c] = -1;
    }
    WALK_TILE3D(xp, ds, hs, ws,
                if (FIRST_TAP(best_i[i][r][c]) || v > best[i][r][c] || isnan(v)) {
                    best[i][r][c] = v;
                    best_i[i][r][c] = at;
                })
    FOR_TILE_ROWS(i, r, od0, oh0) {
        long o = TILE_OUTPUT3D(volume, od0 + i, oh0 + r, ow0);
        STORE_COLS(out, o, best[i][r], min(CLPOOL_COLS, OW - ow0));
#ifndef CLPOOL_NO_INDICES
        STORE_INDEX_COLS(indices, o, best_i[i][r], min(CLPOOL_COLS, OW - ow0));
#endif
    }
}

/* The forwards for a CPU, as max_pool2d_forward_plane: one work-item per output plane
 * (volume, od), 16 outputs of a row at a time where their windows lie inside the row (a
 * work-item per output did not vectorize under PoCL: max_pool3d k3 s2 p1 of
 * [2,64,16,56,56] took 31 ms on this project's Intel CPU, PyTorch 24 ms). */
__kernel void max_pool3d_forward_plane(__global const elem_t *restrict x,
                                       __global elem_t *restrict out,
                                       __global index_t *restrict indices,
                                       MAX_POOL3D_SIZES)
{
    FIX_WINDOW3D();
    FIX_DILATION3D();
    long z = get_global_id(0), volume = z / OD;
    __global const elem_t *xp = x + volume * D * H * W;
    depth_taps dt = depth_taps_3d((int)(z - volume * OD) * sd - pd, kd, dd, D);
    FOR_PLANE_WINDOWS(z * OH * OW, (kw - 1) * dw + 1,
        max_window(xp, out, indices, o, dt, H, W, hs, ws, kh, kw, dh, dw),
        max_window16(xp, out, indices, o, dt, H, W, hs, ws, kh, kw, sw, dh, dw))
}

/* Loops over the windows (od, oh, ow) that can reach this work-item's tile, in ascending
 * output order: window numbers a, b, e in td, th, tw; TILE_OUTPUT is its output's offset
 * in the volume. Unrolled, the loops run over constant counts, past those windows. */
#define FOR_TILE_WINDOWS(a, b, e, td, th, tw)                                       \
    UNROLL for (int a = 0; a < (td).count; ++a)                                     \
        UNROLL for (int b = 0; b < (th).count; ++b)                                 \
            UNROLL for (int e = 0; e < (tw).count; ++e)                             \
                if (!UNROLLED3D                                                     \
                    || (INSIDE((td).first + a, (td).end) && INSIDE((th).first + b, (th).end) \
                        && INSIDE((tw).first + e, (tw).end)))
#define TILE_OUTPUT(a, b, e, td, th, tw)                                            \
    ((((pos_t)(td).first + (a)) * OH + (th).first + (b)) * OW + (tw).first + (e))
/* The same offset in a view of strides s_sd, s_sh and s_sw (pos_t, by prefix s_). */
#define TILE_VIEW(a, b, e, td, th, tw, s_)                                          \
    (((td).first + (a)) * s_##sd + ((th).first + (b)) * s_##sh + ((tw).first + (e)) * s_##sw)

/* Declares the first element (id0, ih0, iw0) of this backward work-item's tile in
 * `volume`, returning where the tile lies past the input. */
#define BACKWARD_TILE3D(id0, ih0, iw0, volume)                                      \
    int iw0 = tile_start(0, CLPOOL_COLS, W), ih0 = tile_start(1, CLPOOL_ROWS, H);   \
    if (iw0 >= W || ih0 >= H)                                                       \
        return;                                                                     \
    SPLIT_ROW((long)get_global_id(2), SLABS(D), volume, slab_);                     \
    int id0 = slab_ * CLPOOL_3D_DEPTHS

/* Stores g[i][r][c] of a backward tile at the elements inside the volume, a row at once
 * (STORE_COLS). */
#define STORE_TILE3D(g, volume, id0, ih0, iw0)                                      \
    for (int i = 0; i < CLPOOL_3D_DEPTHS && (id0) + i < D; ++i)                     \
        for (int r = 0; r < CLPOOL_ROWS && (ih0) + r < H; ++r)                      \
            STORE_COLS(grad_x, (volume) * D * H * W + (((pos_t)(id0) + i) * H + (ih0) + r) * W \
                                   + (iw0), g[i][r], min(CLPOOL_COLS, W - (iw0)))

/* grad_x[e] = sum, in ascending output order, of grad_out over the windows that can
 * contain e and whose index names e. An index naming no element of the volume matches
 * nothing. */
__kernel void max_pool3d_backward(__global const elem_t *restrict grad_out,
                                  __global const index_t *restrict indices,
                                  __global elem_t *restrict grad_x,
                                  MAX_POOL3D_SIZES)
{
    FIX_WINDOW3D();
    FIX_DILATION3D();
    BACKWARD_TILE3D(id0, ih0, iw0, volume);
    long first = volume * OD * OH * OW;
    __global const elem_t *gp = grad_out + first;
    __global const index_t *ip = indices + first;
    int span_d = (kd - 1) * dd + 1, span_h = (kh - 1) * dh + 1, span_w = (kw - 1) * dw + 1;
    tile_windows td = windows_of_tile(id0, CLPOOL_3D_DEPTHS, D, sd, pd, span_d, OD),
                 th = windows_of_tile(ih0, CLPOOL_ROWS, H, sh, ph, span_h, OH),
                 tw = windows_of_tile(iw0, CLPOOL_COLS, W, sw, pw, span_w, OW);
    pos_t self = ((pos_t)id0 * H + ih0) * W + iw0;
    acc_t g[CLPOOL_3D_DEPTHS][CLPOOL_ROWS][CLPOOL_COLS];
    FOR_TILE(i, r, c)
        g[i][r][c] = 0;
    FOR_TILE_WINDOWS(a, b, e, td, th, tw) {
        pos_t o = TILE_OUTPUT(a, b, e, td, th, tw);
        acc_t v = LOAD(gp, o);
        /* the tile's element that the index names, (i * H + r) * W + c, where it names
         * one (unsigned: any index, no overflow) */
        uindex_t named = (uindex_t)ip[o] - (uindex_t)self;
        FOR_TILE(i, r, c)
            if (COVERS(td, i, a, CLPOOL_3D_DEPTHS, sd, span_d)
                && COVERS(th, r, b, CLPOOL_ROWS, sh, span_h)
                && COVERS(tw, c, e, CLPOOL_COLS, sw, span_w)
                && named == ((uindex_t)i * H + r) * W + c)
                g[i][r][c] += v;
    }
    STORE_TILE3D(g, volume, id0, ih0, iw0);
}

/* Divisors: at most the window's elements, fewer than 2^31 where its sizes are constants
 * (32-bit arithmetic then; the per-element kernels a CPU once ran apart from the tiles
 * were 13% slower so under PoCL, its tiles of one are not: avg_pool3d and its backward
 * within 2% of 64-bit divisors, [2,16,16,28,28] k3 s2 p1). */
#if defined(CLPOOL_3D_KD) && CLPOOL_3D_KD * CLPOOL_3D_KH * CLPOOL_3D_KW < 2147483647
typedef int divisor_t;
#else
typedef long divisor_t;
#endif

/* The average pooling divisor of the window starting at (ds, hs, ws) in padded
 * coordinates, as ATen's avg_pool3d computes it; 0 for a window with no element (whose
 * output is 0). A non-zero divisor_override is every window's divisor, as in clpool.h's
 * avg_divisor, and -DCLPOOL_AVG_DIVISOR makes it a build constant (on the H200,
 * avg_pool3d_backward k3 s2 p1 of [8,64,16,56,56] 47.6 -> 35.1 us). */
inline divisor_t avg_divisor3d(int ds, int hs, int ws, AVG_POOL3D_SIZES)
{
#ifdef CLPOOL_AVG_DIVISOR
    return CLPOOL_AVG_DIVISOR;
#else
    if (divisor_override != 0)
        return divisor_override;
    int de = min(ds + kd, D + pd), he = min(hs + kh, H + ph), we = min(ws + kw, W + pw);
    if (count_include_pad)
        return (divisor_t)(de - ds) * (he - hs) * (we - ws);
    return (divisor_t)max(min(de, D) - max(ds, 0), 0) * max(min(he, H) - max(hs, 0), 0)
           * max(min(we, W) - max(ws, 0), 0);
#endif
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
    FORWARD_TILE3D(od0, oh0, ow0, volume);
    __global const elem_t *xp = x + volume * D * H * W;
    int ds = od0 * sd - pd, hs = oh0 * sh - ph, ws = ow0 * sw - pw;
    acc_t sum[CLPOOL_3D_DEPTHS][CLPOOL_ROWS][CLPOOL_COLS];
    FOR_TILE(i, r, c)
        sum[i][r][c] = 0;
    WALK_TILE3D(xp, ds, hs, ws, sum[i][r][c] += v)
    acc_t avg[CLPOOL_3D_DEPTHS][CLPOOL_ROWS][CLPOOL_COLS];
#ifdef CLPOOL_AVG_DIVISOR
    AVERAGES(FOR_TILE(i, r, c), avg[i][r][c], sum[i][r][c])
#else
    FOR_TILE(i, r, c) {
        divisor_t div = avg_divisor3d(ds + i * sd, hs + r * sh, ws + c * sw, AVG_POOL3D_ARGS);
        avg[i][r][c] = div ? plus_zero(sum[i][r][c] / (acc_t)div) : (acc_t)0;
    }
#endif
    FOR_TILE_ROWS(i, r, od0, oh0)
        STORE_COLS(out, TILE_OUTPUT3D(volume, od0 + i, oh0 + r, ow0), avg[i][r],
                   min(CLPOOL_COLS, OW - ow0));
}

/* The forward for a CPU, as max_pool3d_forward_plane. */
__kernel void avg_pool3d_forward_plane(__global const elem_t *restrict x,
                                       __global elem_t *restrict out,
                                       AVG_POOL3D_SIZES)
{
    FIX_WINDOW3D();
    long z = get_global_id(0), volume = z / OD;
    __global const elem_t *xp = x + volume * D * H * W;
    int ds = (int)(z - volume * OD) * sd - pd;
    depth_taps dt = depth_taps_3d(ds, kd, 1, D);
    FOR_PLANE_WINDOWS(z * OH * OW, kw,
        avg_window(xp, out, o, dt, H, W, hs, ws, kh, kw,
                   (acc_t)avg_divisor3d(ds, hs, ws, AVG_POOL3D_ARGS)),
        avg_window16(xp, out, o, dt, H, W, hs, ws, kh, kw, sw,
                     (acc_t)avg_divisor3d(ds, hs, ws, AVG_POOL3D_ARGS)))
}

/* grad_x[e] = sum, in ascending output order, of grad_out / divisor over the windows
 * containing e (the forward's divisors). With -DCLPOOL_GRAD_VIEW grad_out is read through
 * its strides, offsets inside a volume in pos_t as the host's extents allow: a GPU's
 * channels-last gradient, whose C-contiguous grad_x this tile stores in rows (NDHWC
 * [8,64,16,56,56] k3 s2 p1 on the H200: 129.1 us through avg_pool3d_backward_strided's
 * local tile, 94.0 here); without it, C-contiguous from offset 0 (NCDHW read through its
 * strides: 49.6 -> 51.7 us). */
__kernel void avg_pool3d_backward(__global const elem_t *restrict grad_out,
                                  __global elem_t *restrict grad_x,
                                  AVG_POOL3D_SIZES, GRAD_VIEW3D_SIZES)
{
    FIX_WINDOW3D();
    BACKWARD_TILE3D(id0, ih0, iw0, volume);
#ifdef CLPOOL_GRAD_VIEW
    int ch;
    long image = split_row(volume, C, &ch);
    __global const elem_t *gp = grad_out + AT3D(grad_out, image, ch, 0, 0, 0);
    pos_t g_sd = grad_out_sd, g_sh = grad_out_sh, g_sw = grad_out_sw;
#else
    __global const elem_t *gp = grad_out + volume * OD * OH * OW;
    pos_t g_sd = (pos_t)OH * OW, g_sh = OW, g_sw = 1;
#endif
    tile_windows td = windows_of_tile(id0, CLPOOL_3D_DEPTHS, D, sd, pd, kd, OD),
                 th = windows_of_tile(ih0, CLPOOL_ROWS, H, sh, ph, kh, OH),
                 tw = windows_of_tile(iw0, CLPOOL_COLS, W, sw, pw, kw, OW);
    acc_t g[CLPOOL_3D_DEPTHS][CLPOOL_ROWS][CLPOOL_COLS];
    FOR_TILE(i, r, c)
        g[i][r][c] = 0;
    FOR_TILE_WINDOWS(a, b, e, td, th, tw) {
        divisor_t div = avg_divisor3d((td.first + a) * sd - pd, (th.first + b) * sh - ph,
                                      (tw.first + e) * sw - pw, AVG_POOL3D_ARGS);
        acc_t v = plus_zero(LOAD(gp, TILE_VIEW(a, b, e, td, th, tw, g_)) / (acc_t)div);
        FOR_TILE(i, r, c)
            if (COVERS(td, i, a, CLPOOL_3D_DEPTHS, sd, kd) && COVERS(th, r, b, CLPOOL_ROWS, sh, kh)
                && COVERS(tw, c, e, CLPOOL_COLS, sw, kw))
                g[i][r][c] += v;
    }
    STORE_TILE3D(g, volume, id0, ih0, iw0);
}

/* The backward kernels for a CPU, as max_pool2d_backward_plane and
 * avg_pool2d_backward_plane: one work-item per volume (the max: per band of its depths
 * where volumes are fewer than cores, Policy.plane_bands) adds each window's gradient (max:
 * at the element its index names, where that lies inside the volume and the window's span,
 * as the gathers count it; average: its share at each element inside the volume) in
 * ascending output order, into depths cleared just before the first window reaches them:
 * each element then sums the same terms in the same order as the gathers above, bit for
 * bit. Same arguments as the gathers. */

/* Depths from .. to - 1 of volume p (of planes of HW elements) = 0; returns max(from, to). */
inline int clear_depths(__global elem_t *p, pos_t HW, int from, int to)
{
    if (to > from)
        add_to_row(p, 0, from * HW, to * HW, 0, 1, 1);
    return max(from, to);
}

__kernel void max_pool3d_backward_plane(__global const elem_t *restrict grad_out,
                                        __global const index_t *restrict indices,
                                        __global elem_t *restrict grad_x,
                                        MAX_POOL3D_SIZES)
{
    FIX_WINDOW3D();
    FIX_DILATION3D();
    long volume = get_global_id(0);
    pos_t HW = (pos_t)H * W, ODHW = (pos_t)OD * OH * OW;
    __global const elem_t *gp = grad_out + volume * ODHW;
    __global const index_t *ip = indices + volume * ODHW;
    __global elem_t *xp = grad_x + volume * D * HW;
    int2 depths = plane_band(D);
    int q0 = depths.x, q1 = depths.y;
    int span_d = (kd - 1) * dd + 1, span_h = (kh - 1) * dh + 1, span_w = (kw - 1) * dw + 1;
    int cleared = q0;
    for (int od = 0; od < OD && od * sd - pd < q1; ++od) {
        int z0 = od * sd - pd;
        if (z0 + span_d <= q0)
            continue;
        cleared = clear_depths(xp, HW, cleared, min(z0 + span_d, q1));
        index_t lo = (index_t)max(z0, q0) * HW, hi = (index_t)min(z0 + span_d, q1) * HW;
        for (int oh = 0; oh < OH; ++oh) {
            int y0 = oh * sh - ph;
            ADD_MAX_GRADS_ROW(((pos_t)od * OH + oh) * OW, -pw)
        }
    }
    clear_depths(xp, HW, cleared, q1);
}

__kernel void avg_pool3d_backward_plane(__global const elem_t *restrict grad_out,
                                        __global elem_t *restrict grad_x,
                                        AVG_POOL3D_SIZES)
{
    FIX_WINDOW3D();
    long volume = get_global_id(0);
    pos_t HW = (pos_t)H * W;
    __global const elem_t *gp = grad_out + volume * OD * OH * OW;
    __global elem_t *xp = grad_x + volume * D * HW;
    int cleared = 0;
    int2 vec = vector_outputs(W, OW, sw, pw, kw);
    for (int od = 0; od < OD; ++od) {
        int ds = od * sd - pd, d0 = max(ds, 0), d1 = min(ds + kd, D);
        cleared = clear_depths(xp, HW, cleared, d1);
        for (int oh = 0; oh < OH; ++oh) {
            int hs = oh * sh - ph, h0 = max(hs, 0), h1 = min(hs + kh, H);
            for (int ow = 0; ow < OW; ++ow) {
                int ws = ow * sw - pw, w0 = max(ws, 0), w1 = min(ws + kw, W);
                if (d0 >= d1 || h0 >= h1 || w0 >= w1)
                    continue; /* no element (a divisor of 0) */
#ifndef CLPOOL_NO_LANES16
                if (sw <= 2 && kw <= 4 && ow >= vec.x && ow <= vec.y) { /* one divisor */
                    acc16_t v = plus_zero16(
                        LOAD16(gp, ((pos_t)od * OH + oh) * OW + ow)
                        / (acc_t)avg_divisor3d(ds, hs, ws, AVG_POOL3D_ARGS));
                    for (int d = d0; d < d1; ++d)
                        for (int h = h0; h < h1; ++h)
                            add_shares16(xp, (pos_t)d * HW + (pos_t)h * W + ws, sw, kw, v, 0);
                    ow += 15;
                    continue;
                }
#endif
                long div = avg_divisor3d(ds, hs, ws, AVG_POOL3D_ARGS);
                acc_t v = plus_zero(LOAD(gp, ((pos_t)od * OH + oh) * OW + ow) / (acc_t)div);
                for (int d = d0; d < d1; ++d)
                    for (int h = h0; h < h1; ++h)
                        add_to_row(xp, (pos_t)d * HW + (pos_t)h * W, w0, w1, v, 0, kw >= 16);
            }
        }
    }
    clear_depths(xp, HW, cleared, D);
}

/* out = the mean of the cell: its sum / depth / rows / columns, as ATen divides. */
__kernel void adaptive_avg_pool3d_forward(__global const elem_t *restrict x,
                                          __global elem_t *restrict out,
                                          ADAPTIVE_POOL3D_SIZES)
{
    ITEM3D(ow, oh, z, OW, OH);
    SPLIT_ROW(z, OD, volume, od);
    __global const elem_t *xp = x + volume * D * H * W;
    int d0 = cell_start(od, D, OD), d1 = cell_end(od, D, OD);
    int h0 = cell_start(oh, H, OH), h1 = cell_end(oh, H, OH);
    int w0 = cell_start(ow, W, OW), w1 = cell_end(ow, W, OW);
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

/* g[r] = the sum, in output order, of each cell's share LOADED(od, oh, ow) / depth / rows /
 * columns over the cells holding element (d, h + r, w) of a column, for the ROWS rows from
 * h on (those inside the volume; g[ROWS] of type T, each declared 0), each through
 * PLUS_ZERO: PyTorch CPU's shares and order (as adaptive_pool.cl's SUM_SHARES in 2-D).
 * Each cell reaching the rows is loaded and divided once, its share added to the rows it
 * holds (on an H100, NDHWC [8,64,16,56,56] from 7x7x7: 212 us a row, 90 with 4, 77 with
 * 8; the divisions, three a cell, had cost more than the memory). The cells [od0, od1) of
 * d and [ow0, ow1) of w in scope. */
#define SUM_SHARES3D(g, T, ROWS, h, LOADED, PLUS_ZERO)                              \
    for (int od = od0; od < od1; ++od) {                                            \
        acc_t depth = (acc_t)(cell_end(od, D, OD) - cell_start(od, D, OD));         \
        int oh1 = cell_end(min((h) + (ROWS), H) - 1, OH, H);                        \
        for (int oh = cell_start(h, OH, H); oh < oh1; ++oh) {                       \
            int h0 = cell_start(oh, H, OH), h1 = cell_end(oh, H, OH);               \
            for (int ow = ow0; ow < ow1; ++ow) {                                    \
                acc_t cols = (acc_t)(cell_end(ow, W, OW) - cell_start(ow, W, OW));  \
                T v = LOADED(od, oh, ow), share = PLUS_ZERO(v / depth / (acc_t)(h1 - h0) / cols); \
                UNROLL for (int r = 0; r < (ROWS); ++r)                             \
                    if ((h) + r >= h0 && (h) + r < h1)                              \
                        g[r] += share;                                              \
            }                                                                       \
        }                                                                           \
    }

/* grad_x[e] = sum, in ascending output order, of grad_out / depth / rows / columns of
 * each cell containing e; CLPOOL_ROWS rows of a column per work-item (SUM_SHARES3D). */
__kernel void adaptive_avg_pool3d_backward(__global const elem_t *restrict grad_out,
                                           __global elem_t *restrict grad_x,
                                           ADAPTIVE_POOL3D_SIZES)
{
    int iw = get_global_id(0), ih = get_global_id(1) * CLPOOL_ROWS;
    long z = get_global_id(2);
    if (iw >= W || ih >= H)
        return;
    SPLIT_ROW(z, D, volume, id);
    int rows = min(CLPOOL_ROWS, H - ih);
    __global const elem_t *gp = grad_out + volume * OD * OH * OW;
    int od0 = cell_start(id, OD, D), od1 = cell_end(id, OD, D), ow0 = cell_start(iw, OW, W),
        ow1 = cell_end(iw, OW, W);
    acc_t g[CLPOOL_ROWS];
    UNROLL for (int r = 0; r < CLPOOL_ROWS; ++r)
        g[r] = 0;
#define GRAD(od, oh, ow) LOAD(gp, ((pos_t)(od) * OH + (oh)) * OW + (ow))
    SUM_SHARES3D(g, acc_t, CLPOOL_ROWS, ih, GRAD, plus_zero)
#undef GRAD
    pos_t at = ((pos_t)id * H + ih) * W + iw;
    UNROLL for (int r = 0; r < CLPOOL_ROWS; ++r)
        if (r < rows)
            STORE(grad_x, volume * D * H * W + at + (pos_t)r * W, g[r]);
}

/* The backward on a GPU where no axis upsamples: a work-group per slab of a volume (od,
 * oh), the rows (d, h) from those cells' starts to the next cells' (each row in one slab),
 * and chunk of columns (dimension 1), a work-item per column. A row lies in cells od - 1
 * and oh - 1 too where they reach it, or not: a work-item works out each of the four kinds
 * of row's sum of shares in output order (SUM_SHARES3D's shares and sums) and stores its
 * kind's in each row; the gather above divides three times a cell per tile of rows (on an
 * H100, [8,64,16,56,56] from 7x7x7: 103.4 us, 34% of the copy bandwidth; the slabs 70.4
 * us, 50%). */
__kernel void adaptive_avg_pool3d_slab(__global const elem_t *restrict grad_out,
                                       __global elem_t *restrict grad_x, ADAPTIVE_POOL3D_SIZES)
{
    int slab, w = get_group_id(1) * get_local_size(0) + get_local_id(0);
    if (w >= W)
        return;
    long volume = split_row(get_group_id(0), OD * OH, &slab);
    int od = slab / OH, oh = slab - od * OH;
    int d0, d1, h0, h1; /* rows below d_shared (h_shared) lie in cell od - 1 (oh - 1) too */
    int d_shared = owned_cells(od, D, OD, &d0, &d1), h_shared = owned_cells(oh, H, OH, &h0, &h1);
    __global const elem_t *gp = grad_out + volume * OD * OH * OW;
    __global elem_t *xp = grad_x + volume * ((pos_t)D * H * W);
    int ow0, ow1;
    cells_at(w, W, OW, &ow0, &ow1);
    /* the sums of rows in cell od only, in od and oh - 1, in od - 1 and oh, in all */
    acc_t only = 0, up_h = 0, up_d = 0, both = 0;
    for (int qd = max(od - 1, 0); qd <= od; ++qd) {
        acc_t depth = (acc_t)(cell_end(qd, D, OD) - cell_start(qd, D, OD));
        for (int qh = max(oh - 1, 0); qh <= oh; ++qh) {
            acc_t rows = (acc_t)(cell_end(qh, H, OH) - cell_start(qh, H, OH));
            for (int ow = ow0; ow < ow1; ++ow) {
                acc_t cols = (acc_t)(cell_end(ow, W, OW) - cell_start(ow, W, OW));
                acc_t v = LOAD(gp, ((pos_t)qd * OH + qh) * OW + ow);
                acc_t share = plus_zero(v / depth / rows / cols);
                both += share;
                up_h += qd == od ? share : 0;
                up_d += qh == oh ? share : 0;
                only += qd == od && qh == oh ? share : 0;
            }
        }
    }
    for (int d = d0; d < d1; ++d)
        for (int h = h0; h < h1; ++h) {
            acc_t in_d = h < h_shared ? both : up_d, in_od = h < h_shared ? up_h : only;
            STORE(xp, ((pos_t)d * H + h) * W + w, d < d_shared ? in_d : in_od);
        }
}

/* ---- The 3-D _strided kernels: inputs of any 5-D strides and offset, results written
 * through their own strides (channels-last-3d where PyTorch's are), in the same order of
 * sums as the kernels above, so the same results bit for bit. Element (n, c, d, h, w) of an
 * input view v lies at v_offset + n * v_sn + c * v_sc + d * v_sd + h * v_sh + w * v_sw of its
 * buffer (AT3D), of a result view r at the same without the offset (AT3D_OUT), in elements.
 * C is the channels. channels_inner 0: dimension 0 walks W, 1 H, 2 the (n, c, d) rows of
 * the result; else dimension 0 walks C by channels_inner channels per work-item, 1 W and 2
 * the (n, d, h) rows, so that neighbouring work-items take neighbouring channels of one
 * voxel (contiguous in channels-last-3d memory: coalesced loads and stores). The host takes
 * 4 channels per work-item where they are contiguous in every view and C % 4 == 0 (or in
 * the views alone, with a GPU's tile: TILED_VOXEL), else 1 (clpool.h's load_lanes and
 * store_lanes, as elements: vload4, not aligned vectors). */
#define STRIDED3D_FORWARD_SIZES VIEW3D(x), STRIDES3D(out), int C, int channels_inner
#define STRIDED3D_BACKWARD_SIZES VIEW3D(grad_out), STRIDES3D(grad_x), int C, int channels_inner
/* The strides of the indices max_pool3d_backward_strided reads, as an input view. */
#define INDICES3D_VIEW_SIZES VIEW3D(indices)
/* Whether input view v and result view r are aligned to 4 elements (as clpool.h's
 * ALIGNED4): their 4 channels then load and store as aligned vectors. */
#define ALIGNED4_3D(v, r)                                                           \
    ((((v##_offset) | (v##_sn) | (v##_sd) | (v##_sh) | (v##_sw) | (r##_sn) | (r##_sd) \
       | (r##_sh) | (r##_sw)) & 3) == 0)
/* The offset of (d, h, w) inside a view's (n, c) volume. */
#define IN_VOLUME(v, d, h, w)                                                       \
    ((long)(d) * v##_sd + (long)(h) * v##_sh + (long)(w) * v##_sw)
/* Loops (od, oh, ow), in output order, over the windows of spans span_d x span_h x
 * span_w that reach element e of a _strided backward. */
#define FOR_WINDOWS_REACHING(e, span_d, span_h, span_w)                             \
    window_range rd_ = windows_reaching((e).d, 1, D, sd, pd, span_d, OD),           \
                 rh_ = windows_reaching((e).h, 1, H, sh, ph, span_h, OH),           \
                 rw_ = windows_reaching((e).w, 1, W, sw, pw, span_w, OW);           \
    for (int od = rd_.first; od < rd_.end; ++od)                                    \
        for (int oh = rh_.first; oh < rh_.end; ++oh)                                \
            for (int ow = rw_.first; ow < rw_.end; ++ow)

typedef struct {
    long n;
    int c, d, h, w;
} voxel_t;

/* The voxel (n, c, d, h, w) of an (N, C, D, H, W) result that the work-item of global id
 * (x, y, z) computes (the first of its channels; with channels_inner, the first of a tile
 * of `rows` along H by `pixels` along W); false past the result. The kernels pass the
 * ids: PoCL 3.0 left get_global_id() in this function unresolved ("undefined symbol
 * _group_id_x" at the first launch). */
inline int strided_voxel(voxel_t *v, int x, int y, long z, int C, int D, int H, int W,
                         int channels_inner, int rows, int pixels)
{
    if (channels_inner) {
        SPLIT_ROW(z, (H - 1) / rows + 1, nd, band);
        SPLIT_ROW(nd, D, n, d);
        v->n = n;
        v->c = x * channels_inner;
        v->d = d;
        v->h = band * rows;
        v->w = y * pixels;
    } else {
        SPLIT_ROW(z, D, nc, d);
        SPLIT_ROW(nc, C, n, c);
        v->n = n;
        v->c = c;
        v->d = d;
        v->h = y;
        v->w = x;
    }
    return v->c < C && v->h < H && v->w < W;
}
/* Declares voxel v of this work-item (the first of a tile of `rows` x `pixels`) and
 * returns from the kernel past the result. */
#define STRIDED_TILE(v, C, D, H, W, rows, pixels)                                   \
    voxel_t v;                                                                      \
    if (!strided_voxel(&v, get_global_id(0), get_global_id(1), get_global_id(2), C, D, H, \
                       W, channels_inner, rows, pixels))                            \
        return
#define STRIDED_VOXEL(v, C, D, H, W) STRIDED_TILE(v, C, D, H, W, 1, 1)

/* The channels per work-item of channels_inner (0 counts as 1). */
inline int lanes_of(int channels_inner) { return channels_inner == 4 ? 4 : 1; }

/* A GPU's tile (host: -DCLPOOL_TILE3D_X=x -DCLPOOL_TILE3D_Y=y, work-groups of x by y
 * work-items, channels_inner == 4), for a kernel whose views have their channels contiguous
 * and whose result has not (avg_pool3d's NDHWC input, its C-contiguous result): the
 * work-group's 4x channels by y elements along W go through local memory, stored W
 * innermost, so that both the loads and the stores are coalesced. TILE3D_DECLARE declares
 * the tile, at the kernel's outermost scope; TILED_VOXEL declares voxel v (the first of
 * `rows` along H), v_inside and the lanes (4), without returning past the result (every
 * work-item reaches the barriers: STORE_VOXEL_IF). Without a tile they are nothing and
 * STRIDED_TILE with v_inside 1. */
#ifdef CLPOOL_TILE3D_X
#define TILE3D_DECLARE() __local acc_t tile[4 * CLPOOL_TILE3D_X * (CLPOOL_TILE3D_Y + 1)]
#define TILED_VOXEL(v, C, D, H, W, rows)                                            \
    voxel_t v;                                                                      \
    int v##_inside = strided_voxel(&v, get_global_id(0), get_global_id(1),         \
                                   get_global_id(2), C, D, H, W, channels_inner, rows, 1); \
    const int lanes = 4

/* Stores the 4 channels `v` of each work-item (local ids lx, ly) of the work-group whose
 * first element is `at0` of p (channels `sc` apart, elements along W `sw` apart), the first
 * `nc` channels and `nw` elements of it inside the result, through `tile` (free again on
 * return, for the next row). */
inline void store_tile3d(__global elem_t *p, __local acc_t *tile, acc4_t v, int lx, int ly,
                         long at0, long sc, long sw, int nc, int nw)
{
    const int Y = CLPOOL_TILE3D_Y + 1; /* a row of the tile, padded against bank conflicts */
    __local acc_t *t = tile + 4 * lx * Y + ly;
    t[0] = v.x;
    t[Y] = v.y;
    t[2 * Y] = v.z;
    t[3 * Y] = v.w;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = ly * CLPOOL_TILE3D_X + lx; i < 4 * CLPOOL_TILE3D_X * CLPOOL_TILE3D_Y;
         i += CLPOOL_TILE3D_X * CLPOOL_TILE3D_Y) {
        int c = i / CLPOOL_TILE3D_Y, w = i % CLPOOL_TILE3D_Y;
        if (c < nc && w < nw)
            STORE(p, at0 + c * sc + w * sw, tile[c * Y + w]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}
/* Stores the lanes r of voxel v, at row h, of result view `out`, of C channels and W
 * elements along W, where `live` (the same in a work-group): through the tile, whose
 * barriers every work-item reaches either way (PoCL 3.1's work-groups never ended where a
 * whole group skipped them: a backward's last rows past H, in an unrolled loop). */
#define STORE_VOXEL_IF(live, out, v, h, r, lanes, C, W)                             \
    store_tile3d(out, tile, r, get_local_id(0), get_local_id(1),                    \
                 AT3D_OUT(out, v.n, v.c - 4 * (int)get_local_id(0), v.d, h,          \
                          v.w - (int)get_local_id(1)),                              \
                 out##_sc, out##_sw, (live) ? C - v.c + 4 * (int)get_local_id(0) : 0, \
                 (W) - v.w + (int)get_local_id(1))
#else
#define TILE3D_DECLARE() (void)0
#define TILED_VOXEL(v, C, D, H, W, rows)                                            \
    STRIDED_TILE(v, C, D, H, W, rows, 1);                                           \
    const int v##_inside = 1, lanes = lanes_of(channels_inner)
#define STORE_VOXEL_IF(live, out, v, h, r, lanes, C, W)                             \
    do {                                                                            \
        if (live)                                                                   \
            store_lanes(out, AT3D_OUT(out, v.n, v.c, v.d, h, v.w), r, lanes, 0);    \
    } while (0)
#endif
#define STORE_VOXEL(out, v, h, r, lanes, C, W) STORE_VOXEL_IF(1, out, v, h, r, lanes, C, W)
/* A backward's column of gradients (adaptive_avg_pool3d_backward_strided's):
 * TILED_VOXEL's voxel v, the first of CLPOOL_CL_ROWS along H, of which `rows` lie inside
 * the result (the same in a work-group), and their sums g, 0. */
#define TILED_COLUMN(v, g, rows, C, D, H, W)                                        \
    TILED_VOXEL(v, C, D, H, W, CLPOOL_CL_ROWS);                                     \
    int rows = min(CLPOOL_CL_ROWS, (H) - v.h);                                      \
    acc4_t g[CLPOOL_CL_ROWS];                                                       \
    UNROLL for (int r_ = 0; r_ < CLPOOL_CL_ROWS; ++r_)                              \
        g[r_] = 0
/* Stores TILED_COLUMN's sums g of voxel v in result view `out`: each row through
 * STORE_VOXEL_IF, a row past the result too (it stores nothing, but takes the barriers). */
#define STORE_COLUMN(out, v, g, rows, C, W)                                         \
    UNROLL for (int r_ = 0; r_ < CLPOOL_CL_ROWS; ++r_)                              \
        STORE_VOXEL_IF(r_ < (rows), out, v, v.h + r_, g[r_], lanes, C, W)

/* Fold tap v at `at` into (best, best_i) in one lane: NaN wins (the last NaN keeps its
 * index), ties keep the first tap; the caller starts best_i at the window's first tap
 * inside the volume, which sets it (a -inf there is no greater than the -inf before). */
#define FOLD_LANE(best, best_i, v, at)                                              \
    if ((v) > (best) || isnan(v)) {                                                 \
        (best) = (v);                                                               \
        (best_i) = (at);                                                            \
    }

/* The flat index (d * H + h) * W + w of the first tap inside the volume of a window
 * whose taps inside are ti, tj, tk (taps_within), or -1 where it has none. */
inline pos_t first_tap3d(int2 ti, int2 tj, int2 tk, int ds, int hs, int ws, int dd, int dh,
                         int dw, int H, int W)
{
    if (ti.x >= ti.y || tj.x >= tj.y || tk.x >= tk.y)
        return -1;
    return ((pos_t)(ds + ti.x * dd) * H + hs + tj.x * dh) * W + ws + tk.x * dw;
}

/* Fold tap v (lanes of neighbouring channels) at flat index `at` into best and its
 * indices i0..i3 (FOLD_LANE in each lane). */
#define FOLD_LANES(best, i0, i1, i2, i3, v, at)                                      \
    FOLD_LANE((best).x, i0, (v).x, at)                                              \
    FOLD_LANE((best).y, i1, (v).y, at)                                              \
    FOLD_LANE((best).z, i2, (v).z, at)                                              \
    FOLD_LANE((best).w, i3, (v).w, at)

/* Store the maxima of `lanes` channels at `at` of out and their indices at the same
 * offset of indices (not with -DCLPOOL_NO_INDICES). */
#ifdef CLPOOL_NO_INDICES
#define STORE_MAX_LANES(out, indices, at, best, i0, i1, i2, i3, lanes)              \
    store_lanes(out, at, best, lanes, 0)
#else
#define STORE_MAX_LANES(out, indices, at, best, i0, i1, i2, i3, lanes)              \
    store_lanes(out, at, best, lanes, 0);                                           \
    (indices)[at] = (index_t)(i0);                                                  \
    if ((lanes) == 4) {                                                             \
        (indices)[(at) + 1] = (index_t)(i1);                                        \
        (indices)[(at) + 2] = (index_t)(i2);                                        \
        (indices)[(at) + 3] = (index_t)(i3);                                        \
    }
#endif

#ifndef CLPOOL_NO_LANES16
/* A CPU's channels-last max pooling (channels_inner == 16, plane.h): the max and index of
 * each window of an output row whose windows start at (ds, hs), 16 channels at a time,
 * the taps in (d, h, w) window order (FOLD_MAX16, from the first tap inside the volume,
 * as FOLD_LANE). */
inline void max_row3d16(__global const elem_t *xp, __global elem_t *out,
                        __global index_t *indices, long at, long out_sw, int2 ch, int D, int H,
                        int W, int OW, int ds, int hs, int kd, int kh, int kw, int sw, int pw,
                        int dd, int dh, int dw, long x_sd, long x_sh, long x_sw)
{
    int2 ti = taps_within(ds, kd, dd, D), tj = taps_within(hs, kh, dh, H);
    for (int ow = 0; ow < OW; ++ow, at += out_sw) {
        int ws = ow * sw - pw;
        int2 tk = taps_within(ws, kw, dw, W);
        pos_t first = first_tap3d(ti, tj, tk, ds, hs, ws, dd, dh, dw, H, W);
        for (int c = ch.x; c < ch.y; c += 16) {
            acc16_t best = -INFINITY;
            pos16_t best_i = first;
            for (int i = ti.x; i < ti.y; ++i)
                for (int j = tj.x; j < tj.y; ++j)
                    for (int k = tk.x; k < tk.y; ++k) {
                        int d = ds + i * dd, h = hs + j * dh, w = ws + k * dw;
                        long tap = (long)d * x_sd + (long)h * x_sh + (long)w * x_sw;
                        acc16_t v = LOAD16(xp, tap + c);
                        FOLD_MAX16(best, best_i, v, ((pos_t)d * H + h) * W + w)
                    }
            STORE16(out, at + c, best);
#ifndef CLPOOL_NO_INDICES
            STORE_INDEX16(indices, at + c, best_i);
#endif
        }
    }
}

/* The gradient of each element of input row (d, h), 16 channels at a time: the gradients
 * of the windows that can contain it whose index names it, added in output order. */
inline void max_gather_row3d16(__global const elem_t *gp, __global const index_t *ip,
                               __global elem_t *grad_x, long at, long out_sw, int2 ch, int W,
                               long self, window_range rd, window_range rh, int sw, int pw,
                               int span_w, int OW, long g_sd, long g_sh, long g_sw, long i_sd,
                               long i_sh, long i_sw)
{
    for (int w = 0; w < W; ++w, at += out_sw, ++self) {
        window_range rw = windows_reaching(w, 1, W, sw, pw, span_w, OW);
        for (int c = ch.x; c < ch.y; c += 16) {
            acc16_t g = 0;
            for (int od = rd.first; od < rd.end; ++od)
                for (int oh = rh.first; oh < rh.end; ++oh)
                    for (int ow = rw.first; ow < rw.end; ++ow) {
                        long go = (long)od * g_sd + (long)oh * g_sh + (long)ow * g_sw;
                        long io = (long)od * i_sd + (long)oh * i_sh + (long)ow * i_sw;
                        g += named16(gp, go + c, ip, io + c, self);
                    }
            STORE16(grad_x, at + c, g);
        }
    }
}
#endif

/* max_pool3d_forward for an input of any strides, the results (and indices, of the same
 * strides) through out's strides: the taps in (d, h, w) window order inside the volume;
 * indices stay flat in the (D, H, W) volume. A CPU takes a row of outputs, 16 channels a
 * lane, with channels_inner == 16 (max_row3d16). */
__kernel void max_pool3d_forward_strided(__global const elem_t *restrict x,
                                         __global elem_t *restrict out,
                                         __global index_t *restrict indices,
                                         STRIDED3D_FORWARD_SIZES, MAX_POOL3D_SIZES)
{
    FIX_WINDOW3D();
    FIX_DILATION3D();
#ifndef CLPOOL_NO_LANES16
    if (channels_inner == 16) { /* a CPU: output row (od, oh) of image n */
        SPLIT_ROW(get_global_id(2), OH, nd, oh);
        SPLIT_ROW(nd, OD, n, od);
        max_row3d16(x + AT3D(x, n, 0, 0, 0, 0), out, indices, AT3D_OUT(out, n, 0, od, oh, 0),
                    out_sw, row16_channels(C), D, H, W, OW, od * sd - pd, oh * sh - ph, kd, kh,
                    kw, sw, pw, dd, dh, dw, x_sd, x_sh, x_sw);
        return;
    }
#endif
    STRIDED_VOXEL(o, C, OD, OH, OW);
    int lanes = lanes_of(channels_inner);
    __global const elem_t *xp = x + AT3D(x, o.n, o.c, 0, 0, 0);
    int ds = o.d * sd - pd, hs = o.h * sh - ph, ws = o.w * sw - pw;
    int2 ti = taps_within(ds, kd, dd, D), tj = taps_within(hs, kh, dh, H),
         tk = taps_within(ws, kw, dw, W);
    pos_t first = first_tap3d(ti, tj, tk, ds, hs, ws, dd, dh, dw, H, W);
    acc4_t best = -INFINITY;
    pos_t i0 = first, i1 = first, i2 = first, i3 = first;
    for (int i = ti.x; i < ti.y; ++i) {
        int d = ds + i * dd;
        for (int j = tj.x; j < tj.y; ++j) {
            int h = hs + j * dh;
            for (int k = tk.x; k < tk.y; ++k) {
                int w = ws + k * dw;
                acc4_t v = load_lanes(xp, IN_VOLUME(x, d, h, w), lanes, 0);
                FOLD_LANES(best, i0, i1, i2, i3, v, ((pos_t)d * H + h) * W + w)
            }
        }
    }
    long at = AT3D_OUT(out, o.n, o.c, o.d, o.h, o.w);
    STORE_MAX_LANES(out, indices, at, best, i0, i1, i2, i3, lanes);
}

/* max_pool3d_backward for grad_out and indices of any strides, grad_x through its own: an
 * input element gathers, in ascending output order, grad_out over the windows that can
 * contain it and whose index names it (an index naming no element of the volume matches
 * nothing); a CPU a row of them, 16 channels a lane, with channels_inner == 16; with
 * channels_inner == 4, 4 channels of a tile of elements of a depth (clpool.h's
 * max_gather4, as max_pool2d_backward_strided's). */
__kernel void max_pool3d_backward_strided(__global const elem_t *restrict grad_out,
                                          __global const index_t *restrict indices,
                                          __global elem_t *restrict grad_x,
                                          STRIDED3D_BACKWARD_SIZES, INDICES3D_VIEW_SIZES,
                                          MAX_POOL3D_SIZES)
{
    FIX_WINDOW3D();
    FIX_DILATION3D();
#ifndef CLPOOL_NO_LANES16
    if (channels_inner == 16) { /* a CPU: input row (d, h) of image n */
        SPLIT_ROW(get_global_id(2), H, nd, h);
        SPLIT_ROW(nd, D, n, d);
        window_range rd = windows_reaching(d, 1, D, sd, pd, (kd - 1) * dd + 1, OD),
                     rh = windows_reaching(h, 1, H, sh, ph, (kh - 1) * dh + 1, OH);
        max_gather_row3d16(grad_out + AT3D(grad_out, n, 0, 0, 0, 0),
                           indices + AT3D(indices, n, 0, 0, 0, 0), grad_x,
                           AT3D_OUT(grad_x, n, 0, d, h, 0), grad_x_sw, row16_channels(C), W,
                           ((long)d * H + h) * W, rd, rh, sw, pw, (kw - 1) * dw + 1, OW,
                           grad_out_sd, grad_out_sh, grad_out_sw, indices_sd, indices_sh,
                           indices_sw);
        return;
    }
#endif
    int span_d = (kd - 1) * dd + 1, span_h = (kh - 1) * dh + 1, span_w = (kw - 1) * dw + 1;
    if (channels_inner == 4) { /* a tile of CLPOOL_CL_ROWS x CLPOOL_CL_PIX of a depth */
        STRIDED_TILE(e, C, D, H, W, CLPOOL_CL_ROWS, CLPOOL_CL_PIX);
        int rows = min(CLPOOL_CL_ROWS, H - e.h), pixels = min(CLPOOL_CL_PIX, W - e.w);
        max_gather4(grad_out + AT3D(grad_out, e.n, e.c, 0, 0, 0),
                    indices + AT3D(indices, e.n, e.c, 0, 0, 0), grad_x,
                    AT3D_OUT(grad_x, e.n, e.c, e.d, e.h, e.w), grad_x_sh, grad_x_sw, rows,
                    pixels, e.d, e.h, e.w, windows_reaching(e.d, 1, D, sd, pd, span_d, OD),
                    windows_reaching(e.h, rows, H, sh, ph, span_h, OH),
                    windows_reaching(e.w, pixels, W, sw, pw, span_w, OW), H, W, sh, sw, ph, pw,
                    span_h, span_w, grad_out_sd, grad_out_sh, grad_out_sw, indices_sd,
                    indices_sh, indices_sw, ALIGNED4_3D(grad_out, grad_x),
                    ALIGNED4_3D(indices, indices));
        return;
    }
    STRIDED_VOXEL(e, C, D, H, W);
    __global const elem_t *gp = grad_out + AT3D(grad_out, e.n, e.c, 0, 0, 0);
    __global const index_t *ip = indices + AT3D(indices, e.n, e.c, 0, 0, 0);
    pos_t self = ((pos_t)e.d * H + e.h) * W + e.w;
    acc_t g = 0;
    FOR_WINDOWS_REACHING(e, span_d, span_h, span_w)
        g += ip[IN_VOLUME(indices, od, oh, ow)] == self
                 ? LOAD(gp, IN_VOLUME(grad_out, od, oh, ow)) : (acc_t)0;
    STORE(grad_x, AT3D_OUT(grad_x, e.n, e.c, e.d, e.h, e.w), g);
}

#ifndef CLPOOL_NO_LANES16
/* 16 channels' results for element w of a row of W, from `at`: channels `sc` apart, the
 * row's elements `step` apart. One vector store where the channels are contiguous. Into a
 * C-contiguous result of channels-last inputs (avg_pool3d's output, its backward's
 * gradient), whole runs of 16 elements wait in `block` and go out as one vector per
 * channel once complete: 16 streams of single elements a plane apart fall in the same
 * cache sets (the backward of [2,64,16,56,56] k3 s2 p1 on an Intel Xeon: Debian's PoCL
 * 11.4-11.9 -> 3.4-3.6 ms, PyPI's 12.3 -> 6.0; the forward 7.6 -> 1.07 ms and 8.8-9.3 ->
 * 2.46); the row's last partial run, one store each. */
inline void store16_channels(__global elem_t *p, long at, long sc, long step, int w, int W,
                             acc16_t v, acc_t *block)
{
    if (sc == 1) {
        STORE16(p, at, v);
        return;
    }
    acc_t lane[16];
    if (step == 1 && (w | 15) < W) {
        vstore16(v, w & 15, block);
        if ((w & 15) == 15)
            for (int k = 0; k < 16; ++k) {
                for (int j = 0; j < 16; ++j)
                    lane[j] = block[j * 16 + k];
                STORE16(p, at - 15 + k * sc, vload16(0, lane));
            }
        return;
    }
    vstore16(v, 0, lane);
    for (int k = 0; k < 16; ++k)
        STORE(p, at + k * sc, lane[k]);
}
#endif

/* avg_pool3d_forward for an input of any strides, out through its own strides (a GPU's
 * tile: TILED_VOXEL); a CPU takes an output row (od, oh) of an image, 16 channels a lane,
 * with channels_inner == 16 (x's channels contiguous, out's any: store16_channels); a
 * quotient that underflows to -0 is +0, as PyTorch's (plus_zero). */
__kernel void avg_pool3d_forward_strided(__global const elem_t *restrict x,
                                         __global elem_t *restrict out,
                                         STRIDED3D_FORWARD_SIZES, AVG_POOL3D_SIZES)
{
    TILE3D_DECLARE();
    FIX_WINDOW3D();
#ifndef CLPOOL_NO_LANES16
    if (channels_inner == 16) {
        SPLIT_ROW(get_global_id(2), OH, nd, oh);
        SPLIT_ROW(nd, OD, n, od);
        __global const elem_t *xp = x + AT3D(x, n, 0, 0, 0, 0);
        int ds = od * sd - pd, hs = oh * sh - ph;
        int d1 = min(ds + kd, D), h1 = min(hs + kh, H);
        int2 ch = row16_channels(C);
        for (int c = ch.x; c < ch.y; c += 16) {
            long at = AT3D_OUT(out, n, c, od, oh, 0);
            acc_t block[16 * 16];
            for (int ow = 0; ow < OW; ++ow, at += out_sw) {
                int ws = ow * sw - pw, w1 = min(ws + kw, W);
                acc16_t sum = 0;
                for (int d = max(ds, 0); d < d1; ++d)
                    for (int h = max(hs, 0); h < h1; ++h)
                        for (int w = max(ws, 0); w < w1; ++w)
                            sum += LOAD16(xp, IN_VOLUME(x, d, h, w) + c);
                divisor_t div = avg_divisor3d(ds, hs, ws, AVG_POOL3D_ARGS);
                acc16_t avg = div ? plus_zero16(sum / (acc_t)div) : (acc16_t)0;
                store16_channels(out, at, out_sc, out_sw, ow, OW, avg, block);
            }
        }
        return;
    }
#endif
    TILED_VOXEL(o, C, OD, OH, OW, 1);
    acc4_t avg = 0;
    if (o_inside) {
        __global const elem_t *xp = x + AT3D(x, o.n, o.c, 0, 0, 0);
        int ds = o.d * sd - pd, hs = o.h * sh - ph, ws = o.w * sw - pw;
        int d1 = min(ds + kd, D), h1 = min(hs + kh, H), w1 = min(ws + kw, W);
        acc4_t sum = 0;
        for (int d = max(ds, 0); d < d1; ++d)
            for (int h = max(hs, 0); h < h1; ++h)
                for (int w = max(ws, 0); w < w1; ++w)
                    sum += load_lanes(xp, IN_VOLUME(x, d, h, w), lanes, 0);
        long div = avg_divisor3d(ds, hs, ws, AVG_POOL3D_ARGS);
        avg = div ? plus_zero4(sum / (acc_t)div) : (acc4_t)0;
    }
    STORE_VOXEL(out, o, o.h, avg, lanes, C, OW);
}

/* avg_pool3d_backward for grad_out of any strides on a CPU (a GPU reads it with
 * avg_pool3d_backward's tile), grad_x through its own: an input row (d, h) of an image,
 * 16 channels a lane, with channels_inner == 16 (grad_out's channels contiguous, grad_x's
 * any), else an element per work-item (4 channels where it takes 4): each element's shares
 * in output order, added to +0 (a -0 share leaves +0 on a CPU: no plus_zero). */
__kernel void avg_pool3d_backward_strided(__global const elem_t *restrict grad_out,
                                          __global elem_t *restrict grad_x,
                                          STRIDED3D_BACKWARD_SIZES, AVG_POOL3D_SIZES)
{
    FIX_WINDOW3D();
#ifndef CLPOOL_NO_LANES16
    if (channels_inner == 16) {
        SPLIT_ROW(get_global_id(2), H, nd, h);
        SPLIT_ROW(nd, D, n, d);
        window_range rd = windows_reaching(d, 1, D, sd, pd, kd, OD),
                     rh = windows_reaching(h, 1, H, sh, ph, kh, OH);
        __global const elem_t *gp = grad_out + AT3D(grad_out, n, 0, 0, 0, 0);
        int2 ch = row16_channels(C);
        /* a run of 16 channels along the row, then the next (a C-contiguous grad_x: 16
         * streams of stores, not C; [2,64,16,56,56] k3 s2 p1 on Debian's PoCL 13.9 -> 10.2
         * ms, on Intel's runtime 16.3 -> 10.3) */
        for (int c = ch.x; c < ch.y; c += 16) {
            long at = AT3D_OUT(grad_x, n, c, d, h, 0);
            acc_t block[16 * 16];
            for (int w = 0; w < W; ++w, at += grad_x_sw) {
                window_range rw = windows_reaching(w, 1, W, sw, pw, kw, OW);
                acc16_t g = 0;
                for (int od = rd.first; od < rd.end; ++od)
                    for (int oh = rh.first; oh < rh.end; ++oh)
                        for (int ow = rw.first; ow < rw.end; ++ow) {
                            divisor_t div = avg_divisor3d(od * sd - pd, oh * sh - ph,
                                                          ow * sw - pw, AVG_POOL3D_ARGS);
                            g += LOAD16(gp, IN_VOLUME(grad_out, od, oh, ow) + c) / (acc_t)div;
                        }
                store16_channels(grad_x, at, grad_x_sc, grad_x_sw, w, W, g, block);
            }
        }
        return;
    }
#endif
    STRIDED_VOXEL(e, C, D, H, W);
    int lanes = lanes_of(channels_inner);
    __global const elem_t *gp = grad_out + AT3D(grad_out, e.n, e.c, 0, 0, 0);
    acc4_t g = 0;
    FOR_WINDOWS_REACHING(e, kd, kh, kw) {
        long div = avg_divisor3d(od * sd - pd, oh * sh - ph, ow * sw - pw, AVG_POOL3D_ARGS);
        g += plus_zero4(load_lanes(gp, IN_VOLUME(grad_out, od, oh, ow), lanes, 0) / (acc_t)div);
    }
    store_lanes(grad_x, AT3D_OUT(grad_x, e.n, e.c, e.d, e.h, e.w), g, lanes, 0);
}

/* Declares xp (the (n, c) volume of x of output voxel o) and the bounds [d0, d1) x [h0, h1)
 * x [w0, w1) of o's cell. */
#define CELL_OF(o)                                                                  \
    __global const elem_t *xp = x + AT3D(x, o.n, o.c, 0, 0, 0);                     \
    int d0 = cell_start(o.d, D, OD), d1 = cell_end(o.d, D, OD);                     \
    int h0 = cell_start(o.h, H, OH), h1 = cell_end(o.h, H, OH);                     \
    int w0 = cell_start(o.w, W, OW), w1 = cell_end(o.w, W, OW)

/* adaptive_avg_pool3d_forward for an input of any strides, out through its own strides (a
 * GPU's tile: TILED_VOXEL). */
__kernel void adaptive_avg_pool3d_forward_strided(__global const elem_t *restrict x,
                                                  __global elem_t *restrict out,
                                                  STRIDED3D_FORWARD_SIZES,
                                                  ADAPTIVE_POOL3D_SIZES)
{
    TILE3D_DECLARE();
    TILED_VOXEL(o, C, OD, OH, OW, 1);
    acc4_t avg = 0;
    if (o_inside) {
        CELL_OF(o);
        acc4_t sum = 0;
        for (int d = d0; d < d1; ++d)
            for (int h = h0; h < h1; ++h)
                for (int w = w0; w < w1; ++w)
                    sum += load_lanes(xp, IN_VOLUME(x, d, h, w), lanes, 0);
        avg = sum / (acc_t)(d1 - d0) / (acc_t)(h1 - h0) / (acc_t)(w1 - w0);
    }
    STORE_VOXEL(out, o, o.h, avg, lanes, C, OW);
}

/* The backward for a CPU, grad_out of any strides: one work-item per volume clears it,
 * then adds each cell's grad_out / depth / rows / columns to its elements, in output order
 * (PyTorch's CPU algorithm; adaptive_avg_pool3d_backward works out every element's cells:
 * [2,64,16,56,56] from 7x7x7 took 100 ms on this project's CPU, against PyTorch's 1.5). */
#define ADAPTIVE_POOL3D_PLANE_SIZES ADAPTIVE_POOL3D_SIZES, VIEW3D(grad_out), int C
__kernel void adaptive_avg_pool3d_backward_plane(__global const elem_t *restrict grad_out,
                                                 __global elem_t *restrict grad_x,
                                                 ADAPTIVE_POOL3D_PLANE_SIZES)
{
    long volume = get_global_id(0);
    pos_t HW = (pos_t)H * W;
    __global const elem_t *gp = grad_out + AT3D(grad_out, volume / C, volume % C, 0, 0, 0);
    __global elem_t *xp = grad_x + volume * D * HW;
    int cleared = 0;
    for (int od = 0; od < OD; ++od) {
        int d0 = cell_start(od, D, OD), d1 = cell_end(od, D, OD);
        cleared = clear_depths(xp, HW, cleared, d1);
        for (int oh = 0; oh < OH; ++oh) {
            int h0 = cell_start(oh, H, OH), h1 = cell_end(oh, H, OH);
            for (int ow = 0; ow < OW; ++ow) {
                int w0 = cell_start(ow, W, OW), w1 = cell_end(ow, W, OW);
                acc_t v = plus_zero(LOAD(gp, IN_VOLUME(grad_out, od, oh, ow)) / (acc_t)(d1 - d0)
                                    / (acc_t)(h1 - h0) / (acc_t)(w1 - w0));
                for (int d = d0; d < d1; ++d)
                    for (int h = h0; h < h1; ++h)
                        add_to_row(xp, (pos_t)d * HW + (pos_t)h * W, w0, w1, v, 0, w1 - w0 >= 16);
            }
        }
    }
    clear_depths(xp, HW, cleared, D);
}

/* adaptive_avg_pool3d_backward for grad_out of any strides, grad_x through its own (a
 * GPU's tile: TILED_VOXEL); a CPU takes a row (n, d, h) of the gradient, 16 channels a lane,
 * with channels_inner == 16 (where the kernel above does not run: bfloat16, few volumes). */
__kernel void adaptive_avg_pool3d_backward_strided(__global const elem_t *restrict grad_out,
                                                   __global elem_t *restrict grad_x,
                                                   STRIDED3D_BACKWARD_SIZES,
                                                   ADAPTIVE_POOL3D_SIZES)
{
    TILE3D_DECLARE();
#ifndef CLPOOL_NO_LANES16
    if (channels_inner == 16) {
        SPLIT_ROW(get_global_id(2), H, nd, h);
        SPLIT_ROW(nd, D, n, d);
        int od0, od1, ow0, ow1;
        cells_at(d, D, OD, &od0, &od1);
        __global const elem_t *gp = grad_out + AT3D(grad_out, n, 0, 0, 0, 0);
        int2 ch = row16_channels(C);
        for (int c = ch.x; c < ch.y; c += 16) {
            long at = AT3D_OUT(grad_x, n, c, d, h, 0);
            acc_t block[16 * 16];
            acc16_t g[1];
            /* the shares are worked out once for each run of columns in the same cells */
            for (int w = 0, next = 0; w < W; ++w, at += grad_x_sw) {
                if (w == next) {
                    next = cells_at(w, W, OW, &ow0, &ow1);
                    g[0] = 0;
#define GRAD(od, oh, ow) LOAD16(gp, IN_VOLUME(grad_out, od, oh, ow) + c)
#define AS_IS(v) (v) /* a -0 share leaves +0 on a CPU: no plus_zero */
                    SUM_SHARES3D(g, acc16_t, 1, h, GRAD, AS_IS)
#undef AS_IS
#undef GRAD
                }
                store16_channels(grad_x, at, grad_x_sc, grad_x_sw, w, W, g[0], block);
            }
        }
        return;
    }
#endif
    /* CLPOOL_CL_ROWS rows a work-item (SUM_SHARES3D) */
    TILED_COLUMN(e, g, rows, C, D, H, W);
    if (e_inside) {
        __global const elem_t *gp = grad_out + AT3D(grad_out, e.n, e.c, 0, 0, 0);
        int od0 = cell_start(e.d, OD, D), od1 = cell_end(e.d, OD, D),
            ow0 = cell_start(e.w, OW, W), ow1 = cell_end(e.w, OW, W);
#define GRAD(od, oh, ow) load_lanes(gp, IN_VOLUME(grad_out, od, oh, ow), lanes, 0)
        SUM_SHARES3D(g, acc4_t, CLPOOL_CL_ROWS, e.h, GRAD, plus_zero4)
#undef GRAD
    }
    STORE_COLUMN(grad_x, e, g, rows, C, W);
}

/* adaptive_max_pool3d_forward (adaptive_max_pool.cl) for an input of any strides, out and
 * indices through out's strides: the maximum of each cell in (d, h, w) order (NaN wins,
 * the last NaN keeps its index, ties keep the first; a cell of -inf gives its first
 * element), indices flat in the (D, H, W) volume. */
__kernel void adaptive_max_pool3d_forward_strided(__global const elem_t *restrict x,
                                                  __global elem_t *restrict out,
                                                  __global index_t *restrict indices,
                                                  STRIDED3D_FORWARD_SIZES,
                                                  ADAPTIVE_POOL3D_SIZES)
{
    STRIDED_VOXEL(o, C, OD, OH, OW);
    int lanes = lanes_of(channels_inner);
    CELL_OF(o);
    acc4_t best = -INFINITY;
    pos_t i0 = ((pos_t)d0 * H + h0) * W + w0, i1 = i0, i2 = i0, i3 = i0;
    for (int d = d0; d < d1; ++d)
        for (int h = h0; h < h1; ++h)
            for (int w = w0; w < w1; ++w) {
                acc4_t v = load_lanes(xp, IN_VOLUME(x, d, h, w), lanes, 0);
                FOLD_LANES(best, i0, i1, i2, i3, v, ((pos_t)d * H + h) * W + w)
            }
    long at = AT3D_OUT(out, o.n, o.c, o.d, o.h, o.w);
    STORE_MAX_LANES(out, indices, at, best, i0, i1, i2, i3, lanes);
}
