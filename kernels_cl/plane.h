/* The per-plane kernels of a CPU (max_pool2d_forward_plane, avg_pool2d_forward_plane,
 * max_pool2d_backward_plane and their 3-D twins in pool3d.cl): the forwards one window at
 * a time, or 16 windows of a row as 16-lane vectors, over the depth planes a window spans
 * (a 2-D window: one plane), and max pooling's fold of a tap into a maximum and its index;
 * the max backwards' walk over a row of windows, adding each one's gradient at its index. */

#ifndef CLPOOL_PLANE_H
#define CLPOOL_PLANE_H

/* Rows (or depths) x .. y - 1 of the `rows` of a plane: the band a work-item of a banded
 * _plane kernel takes, band get_global_id(1) of get_global_size(1) (Policy.plane_bands;
 * one band, all of them, where the range has one dimension). */
inline int2 plane_band(int rows)
{
    long bands = get_global_size(1), band = get_global_id(1);
    return (int2)(rows * band / bands, rows * (band + 1) / bands);
}

/* The lanes of vector tap v that take the max from best: greater, or NaN; and those
 * lanes' values taken (FOLD_MAX16 and FOLD_MAX4). */
#define MAX_TAKES(v, best) (isgreater((v), (best)) | isnan(v))
#define TAKE_MAX(best, v, lanes) (best) = select((best), (v), (lanes))
/* Fold tap v at `at` into (best, best_i): NaN wins (the last NaN in window order keeps
 * its index, as in PyTorch), ties keep the first element in row-major window order,
 * and the first tap inside the plane sets the index. */
#ifdef CLPOOL_NO_INDICES /* values only: the first tap needs no special case */
#define FOLD_MAX(best, best_i, v, at)                                               \
    if ((v) > (best) || isnan(v))                                                   \
        (best) = (v);
#define FOLD_MAX16(best, best_i, v, at) TAKE_MAX(best, v, MAX_TAKES(v, best));
#else
#define FOLD_MAX(best, best_i, v, at)                                               \
    if ((best_i) < 0 || (v) > (best) || isnan(v)) {                                 \
        (best) = (v);                                                               \
        (best_i) = (at);                                                            \
    }
/* FOLD_MAX of 16 lanes, except that the first tap sets no index where it is -inf */
#define FOLD_MAX16(best, best_i, v, at)                                             \
    (best_i) = select((best_i), (at), AS_POS16(MAX_TAKES(v, best)));                \
    TAKE_MAX(best, v, MAX_TAKES(v, best));
#endif

/* The depth planes of a window's taps inside its volume: planes z + q * w for q from x
 * up to y (taps_within); a 2-D window's one plane is depth_taps_2d(). (A vector, not a
 * struct: Oclgrind's uninitialized-value checks lost track of a struct passed by value and
 * flagged later, unrelated kernels.) */
typedef int4 depth_taps;

inline depth_taps depth_taps_3d(int start, int k, int d, int size)
{
    int2 t = taps_within(start, k, d, size);
    return (int4)(t.x, t.y, start, d);
}

inline depth_taps depth_taps_2d(void)
{
    return (int4)(0, 1, 0, 1);
}

/* The per-plane forwards' walk over an output plane of OH x OW from out[o0], with W, OH,
 * OW and the window sizes (sh, sw, ph, pw) in scope and span_w a window's extent along W:
 * ONE for the window starting at (hs, ws) whose output is out[o], and SIXTEEN for the 16
 * from there along its row where they lie inside it (FOR_EACH_OUTPUT). */
#define FOR_PLANE_WINDOWS(o0, span_w, ONE, SIXTEEN)                                 \
    int2 vec_ = vector_outputs(W, OW, sw, pw, (span_w));                            \
    for (int oh_ = 0; oh_ < OH; ++oh_) {                                            \
        int hs = oh_ * sh - ph;                                                     \
        long row_ = (o0) + (long)oh_ * OW;                                          \
        FOR_EACH_OUTPUT(ow_, OW, vec_.x, vec_.y,                                    \
                        { long o = row_ + ow_; int ws = ow_ * sw - pw; ONE; },      \
                        { long o = row_ + ow_; int ws = ow_ * sw - pw; SIXTEEN; })  \
    }

/* The max of one window starting at (hs, ws) in the depth planes dt of volume xp (planes of
 * H x W), stored at out[o] (and its index, flat in the volume): its taps inside the volume
 * only, in (d, h, w) order. */
inline void max_window(__global const elem_t *xp, __global elem_t *out,
                       __global index_t *indices, long o, depth_taps dt, int H, int W,
                       int hs, int ws, int kh, int kw, int dh, int dw)
{
    acc_t best = -INFINITY;
    pos_t best_i = -1;
    int2 ti = taps_within(hs, kh, dh, H), tj = taps_within(ws, kw, dw, W);
    for (int q = dt.x; q < dt.y; ++q) {
        pos_t depth = (pos_t)(dt.z + q * dt.w) * H;
        for (int i = ti.x; i < ti.y; ++i) {
            pos_t row = (depth + hs + i * dh) * W;
            for (int j = tj.x; j < tj.y; ++j) {
                pos_t at = row + ws + j * dw;
                FOLD_MAX(best, best_i, LOAD(xp, at), at)
            }
        }
    }
    STORE_MAX(out, indices, o, best, best_i);
}

#ifndef CLPOOL_NO_LANES16
/* max_window for the 16 windows starting at (hs, ws + k * sw), k < 16, whose columns all
 * lie inside the row, as 16-lane vectors. Where every tap is -inf the first tap keeps the
 * index. */
inline void max_window16(__global const elem_t *xp, __global elem_t *out,
                         __global index_t *indices, long o, depth_taps dt, int H, int W,
                         int hs, int ws, int kh, int kw, int sw, int dh, int dw)
{
    const pos16_t lanes = POS16_STEPS;
    acc16_t best = -INFINITY;
    pos16_t best_i = -1, first_i = -1;
    int2 ti = taps_within(hs, kh, dh, H);
    for (int q = dt.x; q < dt.y; ++q) {
        pos_t depth = (pos_t)(dt.z + q * dt.w) * H;
        for (int i = ti.x; i < ti.y; ++i) {
            pos_t row = (depth + hs + i * dh) * W;
            if (first_i.s0 < 0)
                first_i = row + ws + lanes * sw;
            for (int j = 0; j < kw; ++j) {
                pos_t at = row + ws + j * dw;
                acc16_t v = load16_strided(xp, at, sw);
                FOLD_MAX16(best, best_i, v, at + lanes * sw)
            }
        }
    }
    STORE16(out, o, best);
#ifndef CLPOOL_NO_INDICES
    STORE_INDEX16(indices, o, select(best_i, first_i, best_i < 0));
#endif
}
#endif

/* The sum of one window starting at (hs, ws) in the depth planes dt of volume xp (its
 * elements inside the volume; no dilation) / div, stored at out[o] (every window has an
 * element: the shape checks keep padding within half the window). */
inline void avg_window(__global const elem_t *xp, __global elem_t *out, long o, depth_taps dt,
                       int H, int W, int hs, int ws, int kh, int kw, acc_t div)
{
    acc_t sum = 0;
    for (int q = dt.x; q < dt.y; ++q) {
        pos_t depth = (pos_t)(dt.z + q) * H;
        for (int h = max(hs, 0); h < min(hs + kh, H); ++h)
            for (int w = max(ws, 0); w < min(ws + kw, W); ++w)
                sum += LOAD(xp, (depth + h) * W + w);
    }
    STORE(out, o, plus_zero(sum / div));
}

#ifndef CLPOOL_NO_LANES16
/* avg_window for the 16 windows starting at (hs, ws + k * sw), k < 16, whose columns all
 * lie inside the row, as 16-lane vectors: they share a divisor. */
inline void avg_window16(__global const elem_t *xp, __global elem_t *out, long o,
                         depth_taps dt, int H, int W, int hs, int ws, int kh, int kw, int sw,
                         acc_t div)
{
    acc16_t sum = 0;
    for (int q = dt.x; q < dt.y; ++q) {
        pos_t depth = (pos_t)(dt.z + q) * H;
        for (int h = max(hs, 0); h < min(hs + kh, H); ++h)
            for (int j = 0; j < kw; ++j)
                sum += load16_strided(xp, (depth + h) * W + ws + j, sw);
    }
    STORE16(out, o, plus_zero16(sum / div));
}
#endif

/* floor(a / n) for a in [s * n, (s + span) * n), a >= 0: s plus the multiples of n from
 * (s + 1) * n on that a reaches, without a division where the span is short. With the
 * 16-lane checks below, on this project's Intel CPU under Debian's PoCL, kernel time:
 * max_pool3d_with_indices_backward k3 s2 p1 of [2,64,16,56,56] 1.82 -> 1.21 ms,
 * max_pool2d_with_indices_backward k3 s1 p1 of [32,64,128,128] 57.0 -> 33.2 ms, k3 s2 p1
 * of [8,64,112,112] 1.49 -> 1.24 ms. */
#define SPAN_ROWS_COUNTED 8 /* longer spans divide: their counts would take as long */
inline pos_t span_row(pos_t a, pos_t n, int s, int span)
{
    if (span > SPAN_ROWS_COUNTED) /* a >= 0 */
        return a / n;
    pos_t q = s;
    for (int r = 1; r < span; ++r)
        q += a >= (pos_t)(s + r) * n;
    return q;
}

/* grad_x[at] += g where element `at` of volume xp lies inside the span of the window
 * starting at (z0, y0, x0), as the gathers count it; else nothing. The window's depths
 * (z0 up to z0 + span_d - 1, of HW elements each) inside the volume are its elements
 * [lo, hi); its spans along H and W are span_h and span_w. */
inline void add_max_grad(__global elem_t *xp, index_t at, acc_t g, index_t lo, index_t hi,
                         pos_t HW, int W, int z0, int span_d, int y0, int span_h, int x0,
                         int span_w)
{
    if (at < lo || at >= hi)
        return;
    pos_t a = (pos_t)at, rest = a - span_row(a, HW, z0, span_d) * HW;
    if (rest < (pos_t)y0 * W || rest >= (pos_t)(y0 + span_h) * W)
        return;
    if (INSIDE(rest - span_row(rest, W, y0, span_h) * W - x0, span_w))
        STORE(xp, a, LOAD(xp, a) + g);
}

/* add_max_grad for the OW windows of a row from output o on, the first at column x0, one
 * by one (names in scope as ADD_MAX_GRADS_ROW's) */
#define ADD_MAX_GRADS_ONE_BY_ONE(o, x0)                                             \
    for (int ow_ = 0; ow_ < OW; ++ow_)                                              \
        add_max_grad(xp, ip[(o) + ow_], LOAD(gp, (o) + ow_), lo, hi, HW, W, z0, span_d, \
                     y0, span_h, (x0) + ow_ * sw, span_w);

#ifndef CLPOOL_NO_LANES16
inline pos16_t span_row16(pos16_t a, pos_t n, int s, int span)
{
    if (span > SPAN_ROWS_COUNTED)
        return a / n;
    pos16_t q = s;
    for (int r = 1; r < span; ++r)
        q -= AS_POS16(a >= (pos16_t)((pos_t)(s + r) * n));
    return q;
}

/* add_max_grad for the 16 windows from output o on (grad_out gp, indices ip), the first
 * at column x0 and the next sw further each, the lanes from `skip` on: the checks as
 * 16-lane vectors, then the adds in lane order. */
inline void add_max_grad16(__global elem_t *xp, __global const index_t *ip,
                           __global const elem_t *gp, pos_t o, index_t lo, index_t hi,
                           pos_t HW, int W, int z0, int span_d, int y0, int span_h, int x0,
                           int sw, int span_w, int skip)
{
    const pos16_t lanes = POS16_STEPS;
    index16_t at = vload16(0, ip + o);
    /* lanes outside [lo, hi) check element 0, whose sums cannot overflow, and add nothing */
    pos16_t ok = AS_POS16(at >= lo & at < hi) & (lanes >= skip), a = AS_POS16(at) & ok;
    pos16_t rest = a - span_row16(a, HW, z0, span_d) * HW;
    ok &= rest >= (pos_t)y0 * W & rest < (pos_t)(y0 + span_h) * W;
    pos16_t col = rest - span_row16(rest, W, y0, span_h) * W - x0 - lanes * sw;
    ok &= AS_POS16(convert_uint16(col) < (uint16)span_w);
    acc16_t g = LOAD16(gp, o);
#pragma unroll
    for (int u = 0; u < 16; ++u)
        if (ok[u])
            STORE(xp, a[u], LOAD(xp, a[u]) + g[u]);
}

/* add_max_grad for the OW windows of a row from output o on, the first at column x0, in
 * output order: 16 at a time where the row has 16 (its last 16 windows, those not yet
 * taken, end it); xp, ip, gp, OW, lo, hi, HW, W, z0, span_d, y0, span_h, sw and span_w
 * in scope. */
#define ADD_MAX_GRADS_ROW(o, x0)                                                    \
    if (OW < 16) {                                                                  \
        ADD_MAX_GRADS_ONE_BY_ONE(o, x0)                                             \
    } else {                                                                        \
        int ow_ = 0;                                                                \
        for (; ow_ + 16 <= OW; ow_ += 16)                                           \
            add_max_grad16(xp, ip, gp, (o) + ow_, lo, hi, HW, W, z0, span_d, y0,     \
                           span_h, (x0) + ow_ * sw, sw, span_w, 0);                 \
        if (ow_ < OW)                                                               \
            add_max_grad16(xp, ip, gp, (o) + OW - 16, lo, hi, HW, W, z0, span_d, y0, \
                           span_h, (x0) + (OW - 16) * sw, sw, span_w, ow_ - (OW - 16)); \
    }
#else
#define ADD_MAX_GRADS_ROW(o, x0) ADD_MAX_GRADS_ONE_BY_ONE(o, x0)
#endif

#ifndef CLPOOL_NO_LANES16
/* A CPU's channels-last kernels (the _strided kernels' channels_inner == 16): one
 * work-item per row of an image, 16 channels at a time as vectors (channels contiguous in
 * every view, C a multiple of 16), pixel after pixel. The same folds and sums in the same
 * order as the 4-channel tiles, which a CPU runs with a work-item per 4 channels of a
 * pixel (BENCHMARKS.md). The image's view xp (or gp, ip) is read through its strides
 * (x_sh, x_sw), and the row's results stored from `at` on, out_sw apart. */

/* The 16-lane select mask of an acc16_t from a comparison of 16 indices or positions. */
#if CLPOOL_DTYPE == 64
#define ACC16_MASK(m) convert_long16(m)
#else
#define ACC16_MASK(m) convert_int16(m)
#endif

/* The 16 channels' gradients at gp[g ..], each where its index (ip[i ..]) names element
 * `self`, else 0: a max backward's share of one window or cell. */
inline acc16_t named16(__global const elem_t *gp, long g, __global const index_t *ip, long i,
                       long self)
{
    index16_t at = vload16(0, ip + i);
    return select((acc16_t)0, LOAD16(gp, g), ACC16_MASK(at == (index_t)self));
}

/* The max (and index) of each window of the output row whose windows start at row hs:
 * its taps inside the plane in row-major window order (FOLD_MAX16), the first tap's index
 * where every tap is -inf, -1 where no tap is inside. */
inline void max_row16(__global const elem_t *xp, __global elem_t *out,
                      __global index_t *indices, long at, long out_sw, int2 ch, int H, int W,
                      int OW, int hs, int kh, int kw, int sw, int pw, int dh, int dw,
                      long x_sh, long x_sw)
{
    int2 ti = taps_within(hs, kh, dh, H);
    for (int ow = 0; ow < OW; ++ow, at += out_sw) {
        int ws = ow * sw - pw;
        int2 tj = taps_within(ws, kw, dw, W);
        pos_t first = ti.x < ti.y && tj.x < tj.y ? (pos_t)(hs + ti.x * dh) * W + ws + tj.x * dw
                                                 : -1;
        for (int c = ch.x; c < ch.y; c += 16) {
            acc16_t best = -INFINITY;
            pos16_t best_i = -1;
            for (int i = ti.x; i < ti.y; ++i) {
                int h = hs + i * dh;
                for (int j = tj.x; j < tj.y; ++j) {
                    int w = ws + j * dw;
                    acc16_t v = LOAD16(xp, (long)h * x_sh + (long)w * x_sw + c);
                    FOLD_MAX16(best, best_i, v, (pos_t)h * W + w)
                }
            }
            STORE16(out, at + c, best);
#ifndef CLPOOL_NO_INDICES
            STORE_INDEX16(indices, at + c, select(best_i, (pos16_t)first, best_i < 0));
#endif
        }
    }
}

/* The gradient of each element of input row h: the gradients of the windows reaching it
 * whose index names it (inside the window's span), added in output order. */
inline void max_gather_row16(__global const elem_t *gp, __global const index_t *ip,
                             __global elem_t *grad_x, long at, long out_sw, int2 ch, int H,
                             int W, int OH, int OW, int h, int sh, int sw, int ph, int pw,
                             int span_h, int span_w, long g_sh, long g_sw, long i_sh,
                             long i_sw)
{
    window_range wr = windows_reaching(h, 1, H, sh, ph, span_h, OH);
    for (int w = 0; w < W; ++w, at += out_sw) {
        window_range wc = windows_reaching(w, 1, W, sw, pw, span_w, OW);
        pos_t self = (pos_t)h * W + w;
        for (int c = ch.x; c < ch.y; c += 16) {
            acc16_t g = 0;
            for (int oh = wr.first; oh < wr.end; ++oh)
                for (int ow = wc.first; ow < wc.end; ++ow) {
                    if (!INSIDE(w - (ow * sw - pw), span_w))
                        continue;
                    g += named16(gp, (long)oh * g_sh + (long)ow * g_sw + c, ip,
                                 (long)oh * i_sh + (long)ow * i_sw + c, self);
                }
            STORE16(grad_x, at + c, g);
        }
    }
}

/* The average of each window of the output row whose windows start at row hs: its
 * elements inside the plane summed in row-major order, divided (a zero keeps its sign, as
 * PyTorch's channels-last kernel). */
inline void avg_row16(__global const elem_t *xp, __global elem_t *out, long at, long out_sw,
                      int2 ch, int H, int W, int OW, int hs, int kh, int kw, int sw, int ph,
                      int pw, int count_include_pad, int divisor_override, long x_sh,
                      long x_sw)
{
    for (int ow = 0; ow < OW; ++ow, at += out_sw) {
        int ws = ow * sw - pw;
        acc_t div = avg_divisor(hs, ws, kh, kw, H, W, ph, pw, count_include_pad,
                                divisor_override);
        for (int c = ch.x; c < ch.y; c += 16) {
            acc16_t sum = 0;
            for (int h = max(hs, 0); h < min(hs + kh, H); ++h)
                for (int w = max(ws, 0); w < min(ws + kw, W); ++w)
                    sum += LOAD16(xp, (long)h * x_sh + (long)w * x_sw + c);
            STORE16(out, at + c, sum / div);
        }
    }
}

/* The gradient of each element of input row h: each window reaching it gives its share
 * (its gradient over its divisor), added in output order to +0 (on a CPU, a -0 share
 * leaves +0: no plus_zero, as the per-plane backwards). */
inline void avg_share_row16(__global const elem_t *gp, __global elem_t *grad_x, long at,
                            long out_sw, int2 ch, int H, int W, int OH, int OW, int h, int kh,
                            int kw, int sh, int sw, int ph, int pw, int count_include_pad,
                            int divisor_override, long g_sh, long g_sw)
{
    window_range wr = windows_reaching(h, 1, H, sh, ph, kh, OH);
    for (int w = 0; w < W; ++w, at += out_sw) {
        window_range wc = windows_reaching(w, 1, W, sw, pw, kw, OW);
        for (int c = ch.x; c < ch.y; c += 16) {
            acc16_t g = 0;
            for (int oh = wr.first; oh < wr.end; ++oh)
                for (int ow = wc.first; ow < wc.end; ++ow) {
                    acc_t div = avg_divisor(oh * sh - ph, ow * sw - pw, kh, kw, H, W, ph, pw,
                                            count_include_pad, divisor_override);
                    g += LOAD16(gp, (long)oh * g_sh + (long)ow * g_sw + c) / div;
                }
            STORE16(grad_x, at + c, g);
        }
    }
}
#endif

#endif
