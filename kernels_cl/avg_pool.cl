/* Average pooling. A work-item handles CLPOOL_ROWS x CLPOOL_COLS outputs (forward) or
 * inputs (backward): the forward loads each input element of their windows once and adds
 * it to every window that covers it; the backward loads each candidate window (and
 * computes its divisor) once for all of them. */

#include "clpool.h"
#include "plane.h"

/* The sizes every average pooling kernel takes: the plane's, the output's, the window's in
 * the order of shapes.Window.avg_args(), then the divisor rule. A kernel and its `_plane`
 * twin take the same arguments. */
#define AVG_POOL_SIZES                                                              \
    int H, int W, int OH, int OW, int kh, int kw, int sh, int sw, int ph, int pw,     \
    int count_include_pad, int divisor_override

__kernel void avg_pool2d_forward(__global const elem_t *restrict x,
                                 __global elem_t *restrict out,
                                 AVG_POOL_SIZES)
{
    int dh = 1, dw = 1;
    FIX_WINDOW();
    FORWARD_TILE(oh0, ow0, OH, OW);
    long plane = PLANE_ID();
    __global const elem_t *xp = x + plane * H * W;
    int hs = oh0 * sh - ph, ws = ow0 * sw - pw;

    acc_t sum[CLPOOL_ROWS][CLPOOL_COLS];
    UNROLL for (int r = 0; r < CLPOOL_ROWS; ++r)
        UNROLL for (int c = 0; c < CLPOOL_COLS; ++c)
            sum[r][c] = 0;
    /* Row-major over the tile's input: each window adds its elements in row-major order,
     * as PyTorch does. Offsets outside the plane are not visited, except in a short
     * constant span (SHORT_ROWS). */
#if !SHORT_COLS
    tap_range cols = taps_inside(ws, CLPOOL_COLS, sw, kw, 1, W);
#endif
#if SHORT_ROWS
    UNROLL for (int t = 0; t < (CLPOOL_ROWS - 1) * sh + kh; ++t) {
#else
    tap_range rows = taps_inside(hs, CLPOOL_ROWS, sh, kh, 1, H);
    for (int t = rows.first; t < rows.end; ++t) {
#endif
        int h = hs + t;
        if (!INSIDE(h, H))
            continue;
        LOAD_ROW(seg, xp, h, W, ws)
#if SHORT_COLS
        UNROLL for (int u = 0; u < (CLPOOL_COLS - 1) * sw + kw; ++u) {
#else
        for (int u = cols.first; u < cols.end; ++u) {
#endif
            if (!INSIDE(ws + u, W))
                continue;
            acc_t v = ROW_VALUE(seg, xp, h, W, ws, u);
            UNROLL for (int r = 0; r < CLPOOL_ROWS; ++r)
                UNROLL for (int c = 0; c < CLPOOL_COLS; ++c)
                    if (TAP(t, r, sh, kh, 1) && TAP(u, c, sw, kw, 1))
                        sum[r][c] += v;
        }
    }
    for (int r = 0; r < CLPOOL_ROWS && oh0 + r < OH; ++r) {
        acc_t avg[CLPOOL_COLS];
#ifdef CLPOOL_AVG_DIVISOR
        AVERAGES(UNROLL for (int c = 0; c < CLPOOL_COLS; ++c), avg[c], sum[r][c])
#else
        UNROLL for (int c = 0; c < CLPOOL_COLS; ++c)
            avg[c] = plus_zero(sum[r][c] / (acc_t)avg_divisor(hs + r * sh, ws + c * sw, kh,
                                                              kw, H, W, ph, pw,
                                                              count_include_pad,
                                                              divisor_override));
#endif
        STORE_COLS(out, (plane * OH + oh0 + r) * OW + ow0, avg, min(CLPOOL_COLS, OW - ow0))
    }
}

/* The forward for a CPU, as max_pool2d_forward_plane. */
__kernel void avg_pool2d_forward_plane(__global const elem_t *restrict x,
                                       __global elem_t *restrict out,
                                       AVG_POOL_SIZES)
{
    int dh = 1, dw = 1;
    FIX_WINDOW();
    long plane = get_global_id(0);
    __global const elem_t *xp = x + plane * H * W;
    depth_taps dt = depth_taps_2d();
    FOR_PLANE_WINDOWS(plane * OH * OW, kw,
        avg_window(xp, out, o, dt, H, W, hs, ws, kh, kw,
                   (acc_t)avg_divisor(hs, ws, kh, kw, H, W, ph, pw, count_include_pad,
                                      divisor_override)),
        avg_window16(xp, out, o, dt, H, W, hs, ws, kh, kw, sw,
                     (acc_t)avg_divisor(hs, ws, kh, kw, H, W, ph, pw, count_include_pad,
                                        divisor_override)))
}

/* grad_x[i] = sum over the windows containing i of grad_out / that window's divisor. */
__kernel void avg_pool2d_backward(__global const elem_t *restrict grad_out,
                                  __global elem_t *restrict grad_x,
                                  AVG_POOL_SIZES)
{
    int dh = 1, dw = 1;
    FIX_WINDOW();
    int iw0 = tile_start(0, CLPOOL_COLS, W);
    if (iw0 >= W)
        return;
    long plane = PLANE_ID();
    __global const elem_t *gp = grad_out + plane * OH * OW;
    int ih0 = tile_start(1, CLPOOL_ROWS, H);
    tile_windows th = windows_of_tile(ih0, CLPOOL_ROWS, H, sh, ph, kh, OH),
                 tw = windows_of_tile(iw0, CLPOOL_COLS, W, sw, pw, kw, OW);

    acc_t g[CLPOOL_ROWS][CLPOOL_COLS];
    UNROLL for (int r = 0; r < CLPOOL_ROWS; ++r)
        UNROLL for (int c = 0; c < CLPOOL_COLS; ++c)
            g[r][c] = 0;
    /* each window's share added to its elements in output order, as PyTorch's CPU kernel
     * and the _plane and _strided kernels add (the same bits on every path); with the
     * window sizes constant, which element a window covers folds at build time */
    UNROLL for (int a = 0; a < th.count; ++a) {
        int oh = th.first + a, top = oh * sh - ph;
        if (!INSIDE(oh, th.end))
            continue;
        UNROLL for (int b = 0; b < tw.count; ++b) {
            int ow = tw.first + b, left = ow * sw - pw;
            if (!INSIDE(ow, tw.end))
                continue;
            acc_t v = plus_zero(LOAD(gp, (pos_t)oh * OW + ow)
                                / (acc_t)avg_divisor(top, left, kh, kw, H, W, ph, pw,
                                                     count_include_pad, divisor_override));
            UNROLL for (int r = 0; r < CLPOOL_ROWS; ++r)
                if (COVERS(th, r, a, CLPOOL_ROWS, sh, kh))
                    UNROLL for (int c = 0; c < CLPOOL_COLS; ++c)
                        if (COVERS(tw, c, b, CLPOOL_COLS, sw, kw))
                            g[r][c] += v;
        }
    }
    for (int r = 0; r < CLPOOL_ROWS && ih0 + r < H; ++r)
        STORE_COLS(grad_x, plane * H * W + (pos_t)(ih0 + r) * W + iw0, g[r],
                   min(CLPOOL_COLS, W - iw0))
}

/* The backward for a CPU: one work-item per plane clears it, then adds each window's
 * share to its elements, in output order (PyTorch's CPU algorithm and summation order).
 * Clearing each row just before the first window that reaches it, as the max backward
 * does, was 11% slower on this project's CPU (k3 s2 of [8,64,112,112]: 3.87 against 3.49
 * ms). */
__kernel void avg_pool2d_backward_plane(__global const elem_t *restrict grad_out,
                                        __global elem_t *restrict grad_x,
                                        AVG_POOL_SIZES)
{
    int dh = 1, dw = 1;
    FIX_WINDOW();
    long plane = get_global_id(0);
    __global const elem_t *gp = grad_out + plane * OH * OW;
    __global elem_t *xp = grad_x + plane * H * W;
    /* Windows that tile the plane cover each element once: no clearing, and 0 + v (not
     * v, which may be -0) stored at once. */
    int tiled = kh == sh && kw == sw && ph == 0 && pw == 0 && OH * kh == H && OW * kw == W;
    if (!tiled)
        clear_rows(xp, W, 0, H);
    int2 vec = vector_outputs(W, OW, sw, pw, kw);
    for (int oh = 0; oh < OH; ++oh) {
        int top = oh * sh - ph, h0 = max(top, 0), h1 = min(top + kh, H);
        for (int ow = 0; ow < OW; ++ow) {
            int left = ow * sw - pw, w0 = max(left, 0), w1 = min(left + kw, W);
#ifndef CLPOOL_NO_LANES16
            if (sw <= 2 && kw <= 4 && ow >= vec.x && ow <= vec.y) { /* one divisor */
                acc16_t v = plus_zero16(LOAD16(gp, (pos_t)oh * OW + ow)
                                        / (acc_t)avg_divisor(top, left, kh, kw, H, W, ph, pw,
                                                             count_include_pad,
                                                             divisor_override));
                for (int h = h0; h < h1; ++h)
                    add_shares16(xp, (pos_t)h * W + left, sw, kw, v, tiled);
                ow += 15;
                continue;
            }
#endif
            acc_t v = plus_zero(LOAD(gp, (pos_t)oh * OW + ow)
                                / (acc_t)avg_divisor(top, left, kh, kw, H, W, ph, pw,
                                                     count_include_pad, divisor_override));
            for (int h = h0; h < h1; ++h)
                add_to_row(xp, (pos_t)h * W, w0, w1, v, tiled, kw >= 16);
        }
    }
}

/* The sums of the CLPOOL_CL_ROWS x CLPOOL_CL_PIX windows of a channels-last forward tile,
 * starting at (hs + r * sh, ws + k * sw), over 4 channels, divided and those of the first
 * `rows` x `pixels` stored from `at`, `step_h` and `step_w` apart: each window adds its
 * taps inside the plane in row-major order. With the window sizes as constants, one pass
 * over the rows of their input, each element loaded once and added to every window that
 * covers it (all loads of a row in flight together). */
#ifdef CLPOOL_KH
#define CL_SPAN_H ((CLPOOL_CL_ROWS - 1) * CLPOOL_SH + CLPOOL_KH)
#define CL_SPAN_W ((CLPOOL_CL_PIX - 1) * CLPOOL_SW + CLPOOL_KW)
#endif
inline void avg_tile4(__global const elem_t *xp, __global elem_t *out, long at, long step_h,
                      long step_w, int rows, int pixels, int H, int W, int hs, int ws, int kh,
                      int kw, int sh, int sw, int ph, int pw, int count_include_pad,
                      int divisor_override, long x_sh, long x_sw, int aligned)
{
#ifdef CLPOOL_KH
    acc4_t sum[CLPOOL_CL_ROWS][CLPOOL_CL_PIX];
    UNROLL for (int r = 0; r < CLPOOL_CL_ROWS; ++r)
        UNROLL for (int k = 0; k < CLPOOL_CL_PIX; ++k)
            sum[r][k] = 0;
    UNROLL for (int t = 0; t < CL_SPAN_H; ++t) {
        int h = hs + t;
        if (!INSIDE(h, H))
            continue;
        long row = (long)h * x_sh + (long)ws * x_sw;
        UNROLL for (int u = 0; u < CL_SPAN_W; ++u) {
            if (!INSIDE(ws + u, W))
                continue;
            acc4_t v = LOAD4CL(xp, row + u * x_sw, aligned);
            UNROLL for (int r = 0; r < CLPOOL_CL_ROWS; ++r)
                UNROLL for (int k = 0; k < CLPOOL_CL_PIX; ++k)
                    if (TAP(t, r, CLPOOL_SH, CLPOOL_KH, 1) && TAP(u, k, CLPOOL_SW, CLPOOL_KW, 1))
                        sum[r][k] += v;
        }
    }
    UNROLL for (int r = 0; r < CLPOOL_CL_ROWS; ++r)
        UNROLL for (int k = 0; k < CLPOOL_CL_PIX; ++k)
            if (r < rows && k < pixels) {
                pos_t div = avg_divisor(hs + r * sh, ws + k * sw, kh, kw, H, W, ph, pw,
                                        count_include_pad, divisor_override);
                STORE4CL(out, at + r * step_h + k * step_w, sum[r][k] / (acc_t)div, aligned);
            }
#else
    for (int r = 0; r < rows; ++r)
        for (int k = 0; k < pixels; ++k) {
            int top = hs + r * sh, left = ws + k * sw;
            acc4_t sum = 0;
            for (int h = max(top, 0); h < min(top + kh, H); ++h)
                for (int w = max(left, 0); w < min(left + kw, W); ++w)
                    sum += LOAD4CL(xp, (long)h * x_sh + (long)w * x_sw, aligned);
            pos_t div = avg_divisor(top, left, kh, kw, H, W, ph, pw, count_include_pad,
                                    divisor_override);
            STORE4CL(out, at + r * step_h + k * step_w, sum / (acc_t)div, aligned);
        }
#endif
}

/* avg_pool2d_forward for an input of any strides, the result written through out's
 * strides: one output per work-item, summing its window in row-major order; with
 * channels_inner == 4, 4 channels of a tile of outputs (avg_tile4). */
__kernel void avg_pool2d_forward_strided(__global const elem_t *restrict x,
                                         __global elem_t *restrict out,
                                         STRIDED_FORWARD_SIZES, AVG_POOL_SIZES)
{
    int dh = 1, dw = 1;
    FIX_WINDOW();
    item_t o;
#ifndef CLPOOL_NO_LANES16
    if (channels_inner == 16) { /* a CPU: output row o.h of image o.n (plane.h) */
        o.n = split_row(get_global_id(2), OH, &o.h);
        avg_row16(x + AT(x, o.n, 0, 0, 0), out, AT_OUT(out, o.n, 0, o.h, 0), out_sw,
                  row16_channels(C), H, W, OW, o.h * sh - ph, kh, kw, sw, ph, pw,
                  count_include_pad, divisor_override, x_sh, x_sw);
        return;
    }
#endif
    if (channels_inner == 4) {
        if (nhwc_item(&o, C, OH, OW))
            avg_tile4(x + AT(x, o.n, o.c, 0, 0), out, AT_OUT(out, o.n, o.c, o.h, o.w), out_sh,
                      out_sw, min(CLPOOL_CL_ROWS, OH - o.h), min(CLPOOL_CL_PIX, OW - o.w), H,
                      W, o.h * sh - ph, o.w * sw - pw, kh, kw, sh, sw, ph, pw,
                      count_include_pad, divisor_override, x_sh, x_sw, ALIGNED4(x, out));
        return;
    }
    if (!strided_item(&o, C, OH, OW, channels_inner))
        return;
    __global const elem_t *xp = x + AT(x, o.n, o.c, 0, 0);
    int hs = o.h * sh - ph, ws = o.w * sw - pw;
    acc_t sum = 0;
    for (int h = max(hs, 0); h < min(hs + kh, H); ++h)
        for (int w = max(ws, 0); w < min(ws + kw, W); ++w)
            sum += LOAD(xp, (long)h * x_sh + (long)w * x_sw);
    pos_t div = avg_divisor(hs, ws, kh, kw, H, W, ph, pw, count_include_pad, divisor_override);
    acc_t avg = sum / (acc_t)div;
    STORE(out, AT_OUT(out, o.n, o.c, o.h, o.w), channels_inner ? avg : plus_zero(avg));
}

/* The gradients of a channels-last backward tile: CLPOOL_CL_ROWS x CLPOOL_CL_PIX input
 * elements from (h0, w0), 4 channels each, of which the first `rows` x `pixels` are stored
 * from `at`, `step_h` and `step_w` apart. Each window reaching the tile is loaded and
 * divided once and its share added, in output order, to the elements it covers. */
inline void avg_share4(__global const elem_t *gp, __global elem_t *grad_x, long at,
                       long step_h, long step_w, int rows, int pixels, int h0, int w0,
                       window_range wr, window_range wc, int H, int W, int kh, int kw, int sh,
                       int sw, int ph, int pw, int count_include_pad, int divisor_override,
                       long g_sh, long g_sw, int aligned)
{
    acc4_t g[CLPOOL_CL_ROWS][CLPOOL_CL_PIX];
    UNROLL for (int r = 0; r < CLPOOL_CL_ROWS; ++r)
        UNROLL for (int k = 0; k < CLPOOL_CL_PIX; ++k)
            g[r][k] = 0;
    for (int oh = wr.first; oh < wr.end; ++oh) {
        int top = oh * sh - ph;
        for (int ow = wc.first; ow < wc.end; ++ow) {
            int left = ow * sw - pw;
            pos_t div = avg_divisor(top, left, kh, kw, H, W, ph, pw, count_include_pad,
                                    divisor_override);
            acc4_t v = plus_zero4(LOAD4CL(gp, (long)oh * g_sh + (long)ow * g_sw, aligned)
                                  / (acc_t)div);
            UNROLL for (int r = 0; r < CLPOOL_CL_ROWS; ++r)
                if (INSIDE(h0 + r - top, kh))
                    UNROLL for (int k = 0; k < CLPOOL_CL_PIX; ++k)
                        if (INSIDE(w0 + k - left, kw))
                            g[r][k] += v;
        }
    }
    UNROLL for (int r = 0; r < CLPOOL_CL_ROWS; ++r)
        UNROLL for (int k = 0; k < CLPOOL_CL_PIX; ++k)
            if (r < rows && k < pixels)
                STORE4CL(grad_x, at + r * step_h + k * step_w, g[r][k], aligned);
}

/* avg_pool2d_backward for a grad_out of any strides, grad_x written through its own: one
 * input element per work-item adds each window's share in output order, as PyTorch's CPU
 * kernel does; with channels_inner == 4, 4 channels of a tile of elements (avg_share4).
 * (A constant count of candidate windows, as max_gather4 loops over, made PoCL's
 * [2,64,56,56] k3 s2 27% slower.) */
__kernel void avg_pool2d_backward_strided(__global const elem_t *restrict grad_out,
                                          __global elem_t *restrict grad_x,
                                          STRIDED_BACKWARD_SIZES, AVG_POOL_SIZES)
{
    int dh = 1, dw = 1;
    FIX_WINDOW();
    item_t e;
#ifndef CLPOOL_NO_LANES16
    if (channels_inner == 16) { /* a CPU: input row e.h of image e.n (plane.h) */
        e.n = split_row(get_global_id(2), H, &e.h);
        avg_share_row16(grad_out + AT(grad_out, e.n, 0, 0, 0), grad_x,
                        AT_OUT(grad_x, e.n, 0, e.h, 0), grad_x_sw, row16_channels(C), H, W,
                        OH, OW, e.h, kh, kw, sh, sw, ph, pw, count_include_pad,
                        divisor_override, grad_out_sh, grad_out_sw);
        return;
    }
#endif
    if (channels_inner == 4) {
        if (!nhwc_item(&e, C, H, W))
            return;
        int rows = min(CLPOOL_CL_ROWS, H - e.h), pixels = min(CLPOOL_CL_PIX, W - e.w);
        avg_share4(grad_out + AT(grad_out, e.n, e.c, 0, 0), grad_x,
                   AT_OUT(grad_x, e.n, e.c, e.h, e.w), grad_x_sh, grad_x_sw, rows, pixels,
                   e.h, e.w, windows_reaching(e.h, rows, H, sh, ph, kh, OH),
                   windows_reaching(e.w, pixels, W, sw, pw, kw, OW), H, W, kh, kw, sh, sw, ph,
                   pw, count_include_pad, divisor_override, grad_out_sh, grad_out_sw,
                   ALIGNED4(grad_out, grad_x));
        return;
    }
    if (!strided_item(&e, C, H, W, channels_inner))
        return;
    window_range rows = windows_reaching(e.h, 1, H, sh, ph, kh, OH);
    window_range cols = windows_reaching(e.w, 1, W, sw, pw, kw, OW);
    long g0 = AT(grad_out, e.n, e.c, 0, 0);
    acc_t g = 0;
    for (int oh = rows.first; oh < rows.end; ++oh)
        for (int ow = cols.first; ow < cols.end; ++ow) {
            pos_t div = avg_divisor(oh * sh - ph, ow * sw - pw, kh, kw, H, W, ph, pw,
                                    count_include_pad, divisor_override);
            g += plus_zero(LOAD(grad_out, g0 + (long)oh * grad_out_sh + (long)ow * grad_out_sw)
                           / (acc_t)div);
        }
    STORE(grad_x, AT_OUT(grad_x, e.n, e.c, e.h, e.w), g);
}
