/* Adaptive average pooling: output cell i of n over an axis of size s spans
 * [floor(i*s/n), ceil((i+1)*s/n)). */

#include "clpool.h"

/* g = the sum, in output order, of each cell's share LOADED(oh, ow) / rows / columns over
 * the cells [oh0, oh1) x [ow0, ow1) (PyTorch CPU's shares and order), each through
 * PLUS_ZERO (plus_zero, or plus_zero4 for four lanes). */
#define SUM_SHARES(g, LOADED, PLUS_ZERO)                                              \
    for (int oh = oh0; oh < oh1; ++oh) {                                              \
        acc_t rows = cell_end(oh, H, OH) - cell_start(oh, H, OH);                     \
        for (int ow = ow0; ow < ow1; ++ow) {                                          \
            acc_t cols = cell_end(ow, W, OW) - cell_start(ow, W, OW);                 \
            g += PLUS_ZERO(LOADED(oh, ow) / rows / cols);                             \
        }                                                                             \
    }

/* total += v with Kahan's compensation c, so that long sums of blocks stay exact. */
inline void add_compensated(acc_t *total, acc_t *c, acc_t v)
{
    acc_t y = v - *c, t = *total + y;
    *c = (t - *total) - y;
    *total = t;
}

/* add_compensated in four lanes (the _strided forward's four channels). */
inline void add_compensated4(acc4_t *total, acc4_t *c, acc4_t v)
{
    acc4_t y = v - *c, t = *total + y;
    *c = (t - *total) - y;
    *total = t;
}

/* The statements given, for each block of the cell of rows [h0, h1) and columns [w0, w1)
 * in order: rows [b, b1) of up to 16, columns [a, a1) of up to 64. A cell's sum is the
 * blocks' plain sums, added with Kahan's compensation. */
#define FOR_CELL_BLOCKS(...)                                                          \
    for (int b = h0, b1; b < h1; b = b1) {                                            \
        b1 = h1 - b > 16 ? b + 16 : h1;                                               \
        for (int a = w0, a1; a < w1; a = a1) {                                        \
            a1 = w1 - a > 64 ? a + 64 : w1;                                           \
            __VA_ARGS__                                                               \
        }                                                                             \
    }
/* The statements given for each pixel (h, w) of the block, in row-major order */
#define FOR_BLOCK_PIXELS(...)                                                         \
    for (int h = b; h < b1; ++h)                                                      \
        for (int w = a; w < a1; ++w) {                                                \
            __VA_ARGS__                                                               \
        }

inline acc_t sum4(acc4_t s) { return (s.x + s.y) + (s.z + s.w); }

#ifndef CLPOOL_NO_LANES16
/* Lane by lane: Oclgrind 21.10 reports lanes of a 16-lane vector's 4-lane swizzles as
 * uninitialized. */
inline acc_t sum16(acc16_t s)
{
    return (((s.s0 + s.s1) + (s.s2 + s.s3)) + ((s.s4 + s.s5) + (s.s6 + s.s7)))
           + (((s.s8 + s.s9) + (s.sa + s.sb)) + ((s.sc + s.sd) + (s.se + s.sf)));
}
#endif

/* Axes, cells and their bounds go up to 2^31 - 1: loops below test what is left (w1 - w),
 * never a position past the bound (w + 4), which would overflow near 2^31. */

/* Partial sums of xp[row + w0 .. row + w1), four in one vector: loads overlap, and a CPU
 * compiler uses SIMD within the work-item. */
inline acc4_t row_part(__global const elem_t *xp, long row, int w0, int w1)
{
    acc4_t s = 0;
    int w = w0;
    for (; w1 - w >= 4; w += 4)
        s += LOAD4(xp, row + w);
    for (; w < w1; ++w)
        s.x += LOAD(xp, row + w);
    return s;
}

/* Sum of the window rows h0 .. h1 over columns w0 .. w1: the partial sums of blocks of up
 * to 16 rows by 64 columns, each folded into a compensated total, so that long sums stay
 * exact (folding every row instead: 7x7 of [8,64,112,112] 0.65 against 0.53 ms on this
 * project's CPU in one A/B run, within noise in two others). */
inline acc_t window_sum(__global const elem_t *xp, int W, int h0, int h1, int w0, int w1)
{
    acc_t total = 0, c = 0;
    for (int b = h0, b1; b < h1; b = b1) {
        b1 = h1 - b > 16 ? b + 16 : h1;
        for (int a = w0, a1; a < w1; a = a1) {
            a1 = w1 - a > 64 ? a + 64 : w1;
            acc4_t s = 0;
            for (int h = b; h < b1; ++h)
                s += row_part(xp, (long)h * W, a, a1);
            add_compensated(&total, &c, sum4(s));
        }
    }
    return total;
}

#ifdef CLPOOL_KH
/* The sum of an equal cell of CLPOOL_KH x CLPOOL_KW (at most 16 x 16 on a CPU, 8 x 8 on a
 * GPU; a plain sum of at most 256 elements in four lanes) from (h0, w0): the loops
 * unroll, so that all of its loads are in flight together (a GPU issues in order, and the
 * loops of window_sum wait for memory at every row: on the H200, 7x7 of [64,256,56,56]
 * took 73 us through them; on this project's CPU, cells of 16 x 16 took twice as long
 * through them). */
inline acc_t cell_sum(__global const elem_t *xp, int W, int h0, int w0)
{
    acc4_t s = 0;
    UNROLL for (int h = 0; h < CLPOOL_KH; ++h) {
        long row = (long)(h0 + h) * W + w0;
        UNROLL for (int w = 0; w + 4 <= CLPOOL_KW; w += 4)
            s += LOAD4(xp, row + w);
        UNROLL for (int w = CLPOOL_KW / 4 * 4; w < CLPOOL_KW; ++w)
            s.x += LOAD(xp, row + w);
    }
    return sum4(s);
}
#endif

/* With -DCLPOOL_KH=.. -DCLPOOL_KW=.. the host found equal cells of that size. */
__kernel void adaptive_avg_pool2d_forward(__global const elem_t *restrict x,
                                          __global elem_t *restrict out,
                                          int H, int W, int OH, int OW)
{
    int ow = get_global_id(0);
    if (ow >= OW)
        return;
    long plane = PLANE_ID();
    __global const elem_t *xp = x + plane * H * W;
#ifdef CLPOOL_KH
    int w0 = ow * CLPOOL_KW, w1 = w0 + CLPOOL_KW;
#else
    int w0 = cell_start(ow, W, OW), w1 = cell_end(ow, W, OW);
#endif
    FOR_EACH_ROW(oh, OH) {
#ifdef CLPOOL_KH
        int h0 = oh * CLPOOL_KH, h1 = h0 + CLPOOL_KH;
        acc_t sum = cell_sum(xp, W, h0, w0);
#else
        int h0 = cell_start(oh, H, OH), h1 = cell_end(oh, H, OH);
        acc_t sum = window_sum(xp, W, h0, h1, w0, w1);
#endif
        STORE(out, (plane * OH + oh) * OW + ow, sum / (acc_t)(h1 - h0) / (acc_t)(w1 - w0));
    }
}

/* The forward for a GPU when W is a multiple of 4: one work-group per (plane, output row).
 * Work-item (q, s) of the group sums columns 4q .. 4q+3 over rows s, s + S, ... of the
 * band of input rows (coalesced vector loads, S = group size / (W / 4)); then each cell
 * adds its columns' sums. The host picks it for bands of 16 to 64 rows: a cell of the
 * forward above is then one work-item's long serial sum (on the H200, 7x7 of
 * [32,64,112,112]: 68 against 39 us), and a plain sum of up to 64 rows stays as
 * accurate as its compensated blocks. */
__kernel void adaptive_avg_pool2d_band(__global const elem_t *restrict x,
                                       __global elem_t *restrict out,
                                       int H, int W, int OH, int OW, __local acc_t *colsum)
{
    int oh = get_group_id(0), lid = get_local_id(0);
    long plane = get_group_id(1);
    __global const elem_t *xp = x + plane * H * W;
    int quads = W / 4, slices = get_local_size(0) / quads;
    int q = lid % quads, slice = lid / quads;
    int h0 = cell_start(oh, H, OH), h1 = cell_end(oh, H, OH);
    if (slice < slices) {
        acc4_t a = 0;
        /* Unrolled, so that the loads of 16 rows are in flight together: a GPU issues in
         * order, and a load-then-add loop waits for memory at every row (on the H200,
         * 7x7 of [32,64,112,112]: 48 us with two rows in flight, 35 with 16). Counted
         * from h0: h + slices could overflow near 2^31, r + slices not (bands of 16 to 63
         * rows). An unsigned h took 34 -> 46 us there. */
        int rows = h1 - h0;
#pragma unroll 16
        for (int r = slice; r < rows; r += slices)
            a += LOAD4(xp, (long)(h0 + r) * W + 4 * q);
        __local acc_t *mine = colsum + slice * W + 4 * q;
        mine[0] = a.x;
        mine[1] = a.y;
        mine[2] = a.z;
        mine[3] = a.w;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint ow = lid; ow < (uint)OW; ow += get_local_size(0)) {
        int w0 = cell_start(ow, W, OW), w1 = cell_end(ow, W, OW);
        acc_t sum = 0;
        for (int w = w0; w < w1; ++w)
            for (int k = 0; k < slices; ++k)
                sum += colsum[k * W + w];
        STORE(out, (plane * OH + oh) * OW + ow, sum / (acc_t)(h1 - h0) / (acc_t)(w1 - w0));
    }
}

/* grad_x[i] = the sum over the cells containing i of grad_out / the cell's rows / its
 * columns, in output order (the per-plane kernel's sums). A work-item takes CLPOOL_ROWS
 * rows of CLPOOL_COLS columns, whose cells change at a few rows only; there it works out
 * each cell's share once for all its columns, where the columns lie in at most
 * CLPOOL_COLS + 1 cells (always, but for upsampling: else each column's shares), and
 * rounds and packs the row once (FIX_COLS). On the H200, [128,64,128,128] to 7x7: 228.6 ->
 * 141.9 us float32 at 32 x 4 and 322.1 -> 106.4 bfloat16 at 64 x 4 (BENCHMARKS.md). */
#define SPAN (CLPOOL_COLS + 1)
__kernel void adaptive_avg_pool2d_backward(__global const elem_t *restrict grad_out,
                                           __global elem_t *restrict grad_x,
                                           int H, int W, int OH, int OW)
{
    int iw0 = tile_start(0, CLPOOL_COLS, W);
    if (iw0 >= W)
        return;
    long plane = PLANE_ID();
    __global const elem_t *gp = grad_out + plane * OH * OW;
    int first[CLPOOL_COLS], last[CLPOOL_COLS], oh0, oh1, next = -1;
    acc_t g[CLPOOL_COLS], width[SPAN];
    stored_t words[STORED_WORDS];
    tile_cells(first, last, iw0, W, OW);
    /* the tile's cells lo .. hi - 1, and the widths of lo .. lo + SPAN - 1 (past OW: the
     * last's) */
    int lo = first[0], hi = last[CLPOOL_COLS - 1], few = OW > 0 && hi - lo <= SPAN;
    int w0[SPAN], w1[SPAN];
    tile_cells_of(w0, w1, lo, max(OW, 1), W, SPAN);
    for (int k = 0; k < SPAN; ++k)
        width[k] = few ? w1[k] - w0[k] : 1;
#define GRAD(oh, ow) LOAD(gp, (pos_t)(oh) * OW + (ow))
    FOR_EACH_ROW(ih, H) {
        if (ih >= next) {
            next = cells_at(ih, H, OH, &oh0, &oh1);
            for (int c = 0; c < CLPOOL_COLS; ++c)
                g[c] = 0;
            for (int oh = oh0; oh < oh1 && few; ++oh) {
                acc_t rows = cell_end(oh, H, OH) - cell_start(oh, H, OH), share[SPAN];
                for (int k = 0; k < SPAN; ++k) {
                    share[k] = 0; /* a cell past the tile's adds nothing */
                    if (lo + k < hi)
                        share[k] = plus_zero(GRAD(oh, lo + k) / rows / width[k]);
                }
                for (int c = 0; c < CLPOOL_COLS; ++c)
                    for (int k = 0; k < SPAN; ++k)
                        if (first[c] <= lo + k && lo + k < last[c])
                            g[c] += share[k];
            }
            for (int c = 0; c < CLPOOL_COLS && !few; ++c) {
                int ow0 = first[c], ow1 = last[c];
                SUM_SHARES(g[c], GRAD, plus_zero)
            }
            FIX_COLS(words, g)
        }
        STORE_FIXED(grad_x, plane * H * W + (pos_t)ih * W + iw0, words, min(CLPOOL_COLS, W - iw0));
    }
#undef GRAD
}

/* The backward for a CPU: one work-item per plane clears it, then adds each cell's
 * grad_out / rows / columns to its elements, in output order (PyTorch's CPU algorithm;
 * the kernel above works out the cells of each element: [8,64,112,112] from 10 x 10 took
 * 42 ms so on this project's CPU). */
__kernel void adaptive_avg_pool2d_backward_plane(__global const elem_t *restrict grad_out,
                                                 __global elem_t *restrict grad_x,
                                                 int H, int W, int OH, int OW)
{
    long plane = get_global_id(0);
    __global const elem_t *gp = grad_out + plane * OH * OW;
    __global elem_t *xp = grad_x + plane * H * W;
    clear_rows(xp, W, 0, H);
    for (int oh = 0; oh < OH; ++oh) {
        int h0 = cell_start(oh, H, OH), h1 = cell_end(oh, H, OH);
        for (int ow = 0; ow < OW; ++ow) {
            int w0 = cell_start(ow, W, OW), w1 = cell_end(ow, W, OW);
            acc_t v = plus_zero(LOAD(gp, (pos_t)oh * OW + ow) / (acc_t)(h1 - h0)
                                / (acc_t)(w1 - w0));
            for (int h = h0; h < h1; ++h)
                add_to_row(xp, (pos_t)h * W, w0, w1, v, 0, w1 - w0 >= 16);
        }
    }
}

/* Average pooling of planes of one row of HW elements into OW cells (1-D; a 1x1 output's
 * plane is one cell): one work-group per cell, plane by plane, reduces it in local memory
 * (coalesced loads; a cell per work-item reads a long run alone: on the H200, [64,256,4096]
 * to 7 took 215 us so). The work-group size must be a power of two. */
__kernel void adaptive_avg_pool2d_global(__global const elem_t *x, __global elem_t *out,
                                         long HW, int OW, __local acc_t *scratch)
{
    size_t cell = get_group_id(0);
    int lid = get_local_id(0), n = get_local_size(0);
    long w0, w1, plane = row_cell(cell, HW, OW, &w0, &w1), count = w1 - w0;
    __global const elem_t *xp = x + plane * HW + w0;
    acc_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    long i = lid;
    for (; i + 3 * n < count; i += 4 * n) {
        s0 += LOAD(xp, i);
        s1 += LOAD(xp, i + n);
        s2 += LOAD(xp, i + 2 * n);
        s3 += LOAD(xp, i + 3 * n);
    }
    for (; i < count; i += n)
        s0 += LOAD(xp, i);
    scratch[lid] = (s0 + s1) + (s2 + s3);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int half_n = n / 2; half_n > 0; half_n /= 2) {
        if (lid < half_n)
            scratch[lid] += scratch[lid + half_n];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        STORE(out, cell, scratch[0] / (acc_t)count);
}

/* The backward of planes of one row of W elements from OW cells (W >= OW): one work-group
 * per cell, plane by plane, stores the elements from its start to the next cell's, each
 * its share (grad_out / the cell's width), after the share of the cell before where that
 * cell reaches them (the gather's sums, in output order; a work-item per 4 elements
 * working out their cells took 482 us on an H100 for [64,256,4096] from 7, 19% of its
 * copy bandwidth: compute bound; this kernel 115 us, 79%). */
__kernel void adaptive_avg_pool2d_global_backward(__global const elem_t *restrict grad_out,
                                                  __global elem_t *restrict grad_x, int W,
                                                  int OW)
{
    int ow, w0, w1, shared;
    long plane = row_owned(get_group_id(0), W, OW, &ow, &w0, &w1, &shared);
    __global const elem_t *gp = grad_out + plane * OW;
    acc_t share = plus_zero(LOAD(gp, ow) / (acc_t)(cell_end(ow, W, OW) - w0)), both = share;
    if (ow > 0)
        both = plus_zero(LOAD(gp, ow - 1) / (acc_t)(shared - cell_start(ow - 1, W, OW))) + share;
    __global elem_t *xp = grad_x + plane * W;
    for (int w = w0 + get_local_id(0); w < w1; w += get_local_size(0))
        STORE(xp, w, w < shared ? both : share);
}

/* Global (1x1) average pooling on a CPU: one work-item sums a plane, 32 elements at a time
 * in two vectors, folded into a compensated total every 1024. PoCL vectorizes only across
 * the work-items of a group, so a plane's sum needs vector types (on the H200 host's Xeon,
 * [8,64,112,112]: 2.2-2.5 ms in 4-wide partial sums per row, 0.50-1.1 ms so, bimodal from
 * run to run, against PyTorch's 0.53-0.63 ms). */
__kernel void adaptive_avg_pool2d_plane(__global const elem_t *restrict x,
                                        __global elem_t *restrict out, long HW)
{
    long plane = get_global_id(0);
    __global const elem_t *xp = x + plane * HW;
    acc_t total = 0, c = 0;
    for (long b = 0; b < HW; b += 1024) {
        long end = min(b + 1024, HW), i = b;
#ifdef CLPOOL_NO_LANES16 /* the same sums in 4-lane quarters, s0 = s.s0123, .. */
        acc4_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, u0 = 0, u1 = 0, u2 = 0, u3 = 0;
        for (; i + 32 <= end; i += 32) {
            s0 += LOAD4(xp, i);
            s1 += LOAD4(xp, i + 4);
            s2 += LOAD4(xp, i + 8);
            s3 += LOAD4(xp, i + 12);
            u0 += LOAD4(xp, i + 16);
            u1 += LOAD4(xp, i + 20);
            u2 += LOAD4(xp, i + 24);
            u3 += LOAD4(xp, i + 28);
        }
        acc_t tail = 0;
        for (; i < end; ++i)
            tail += LOAD(xp, i);
        add_compensated(&total, &c, ((sum4(s0 + u0) + sum4(s1 + u1))
                                     + (sum4(s2 + u2) + sum4(s3 + u3))) + tail);
#else
        acc16_t s = 0, u = 0;
        for (; i + 32 <= end; i += 32) {
            s += LOAD16(xp, i);
            u += LOAD16(xp, i + 16);
        }
        s += u;
        acc_t tail = 0;
        for (; i < end; ++i)
            tail += LOAD(xp, i);
        add_compensated(&total, &c, sum16(s) + tail);
#endif
    }
    STORE(out, plane, total / (acc_t)HW);
}

#ifndef CLPOOL_NO_LANES16
/* add_compensated in sixteen lanes (a CPU's channels-last rows). */
inline void add_compensated16(acc16_t *total, acc16_t *c, acc16_t v)
{
    acc16_t y = v - *c, t = *total + y;
    *c = (t - *total) - y;
    *total = t;
}

/* A CPU's channels-last forward (channels_inner == 16: plane.h): the cells of output row
 * oh of image xp, 16 of channels ch at a time, summed as the 4-channel items sum them;
 * each pixel's channels read at once, in memory order (16 channels at a time over the
 * whole cell read each pixel's lines a stride apart: the global average of
 * [16,256,56,56] NHWC took 1.9-2.2 ms against 0.8 on Debian's PoCL). */
inline void adaptive_row16(__global const elem_t *xp, __global elem_t *out, long at,
                           long out_sw, int2 ch, int H, int W, int OH, int OW, int oh,
                           long x_sh, long x_sw)
{
    int h0 = cell_start(oh, H, OH), h1 = cell_end(oh, H, OH), n16 = (ch.y - ch.x) / 16;
    acc16_t total[16], comp[16], s[16]; /* up to 256 channels (row16_channels) */
    for (int ow = 0; ow < OW; ++ow, at += out_sw) {
        int w0 = cell_start(ow, W, OW), w1 = cell_end(ow, W, OW);
        for (int k = 0; k < n16; ++k)
            total[k] = comp[k] = 0;
        FOR_CELL_BLOCKS(for (int k = 0; k < n16; ++k) s[k] = 0;
                        FOR_BLOCK_PIXELS(long px = (long)h * x_sh + (long)w * x_sw + ch.x;
                                         for (int k = 0; k < n16; ++k)
                                             s[k] += LOAD16(xp, px + 16 * k);)
                        for (int k = 0; k < n16; ++k)
                            add_compensated16(&total[k], &comp[k], s[k]);)
        for (int k = 0; k < n16; ++k)
            STORE16(out, at + ch.x + 16 * k,
                    total[k] / (acc_t)(h1 - h0) / (acc_t)(w1 - w0));
    }
}

/* A CPU's channels-last backward (channels_inner == 16): the gradient of each element of
 * input row h of image gp, 16 channels at a time, the shares of its cells in output order
 * added to +0 (a -0 share leaves +0 on a CPU: no plus_zero), worked out once for each run
 * of columns in the same cells (their two divisions per share bound the kernel). */
#define NO_PLUS_ZERO(v) (v)
inline void adaptive_share_row16(__global const elem_t *gp, __global elem_t *grad_x, long at,
                                 long out_sw, int2 ch, int H, int W, int OH, int OW, int h,
                                 long g_sh, long g_sw)
{
    int oh0, oh1, ow0, ow1;
    cells_at(h, H, OH, &oh0, &oh1);
    for (int c = ch.x; c < ch.y; c += 16) {
        acc16_t g = 0;
        long a = at + c;
        for (int w = 0, next = 0; w < W; ++w, a += out_sw) {
            if (w == next) {
                next = cells_at(w, W, OW, &ow0, &ow1);
                g = 0;
#define GRAD(oh, ow) LOAD16(gp, (long)(oh) * g_sh + (long)(ow) * g_sw + c)
                SUM_SHARES(g, GRAD, NO_PLUS_ZERO)
#undef GRAD
            }
            STORE16(grad_x, a, g);
        }
    }
}
#endif

/* adaptive_avg_pool2d_forward for an input of any strides, the result written through
 * out's strides: one output per work-item (4 channels with channels_inner == 4; a row of
 * them, 16 channels a lane, with 16: adaptive_row16), its cell summed in window_sum's
 * blocks of up to 16 rows by 64 columns, each folded into a compensated total (so that an
 * infinity in a small cell gives what it does there, not the NaN of a second fold). */
__kernel void adaptive_avg_pool2d_forward_strided(__global const elem_t *restrict x,
                                                  __global elem_t *restrict out,
                                                  STRIDED_FORWARD_SIZES, int H, int W, int OH,
                                                  int OW)
{
    item_t o;
#ifndef CLPOOL_NO_LANES16
    if (channels_inner == 16) { /* a CPU: output row o.h of image o.n */
        o.n = split_row(get_global_id(2), OH, &o.h);
        adaptive_row16(x + AT(x, o.n, 0, 0, 0), out, AT_OUT(out, o.n, 0, o.h, 0), out_sw,
                       row16_channels(C), H, W, OH, OW, o.h, x_sh, x_sw);
        return;
    }
#endif
    if (!strided_item(&o, C, OH, OW, channels_inner))
        return;
    __global const elem_t *xp = x + AT(x, o.n, o.c, 0, 0);
    int h0 = cell_start(o.h, H, OH), h1 = cell_end(o.h, H, OH);
    int w0 = cell_start(o.w, W, OW), w1 = cell_end(o.w, W, OW);
    int lanes = channels_inner == 4 ? 4 : 1, aligned = lanes == 4 && ALIGNED4(x, out);
    acc4_t total = 0, comp = 0;
#define CELL_TAP(h, w) load_lanes(xp, (long)(h) * x_sh + (long)(w) * x_sw, lanes, aligned)
    FOR_CELL_BLOCKS(acc4_t s = 0; FOR_BLOCK_PIXELS(s += CELL_TAP(h, w);)
                    add_compensated4(&total, &comp, s);)
#undef CELL_TAP
    acc4_t mean = total / (acc_t)(h1 - h0) / (acc_t)(w1 - w0);
    store_lanes(out, AT_OUT(out, o.n, o.c, o.h, o.w), mean, lanes, aligned);
}

/* adaptive_avg_pool2d_backward for a grad_out of any strides, grad_x written through its
 * own: one input element per work-item (4 channels with channels_inner == 4, and then
 * CLPOOL_CL_ROWS rows of them) adds the share of each cell containing it, in output order
 * (the per-plane kernel's sums), worked out where its cells change. */
__kernel void adaptive_avg_pool2d_backward_strided(__global const elem_t *restrict grad_out,
                                                   __global elem_t *restrict grad_x,
                                                   STRIDED_BACKWARD_SIZES, int H, int W,
                                                   int OH, int OW)
{
    item_t e;
#ifndef CLPOOL_NO_LANES16
    if (channels_inner == 16) { /* a CPU: input row e.h of image e.n */
        e.n = split_row(get_global_id(2), H, &e.h);
        adaptive_share_row16(grad_out + AT(grad_out, e.n, 0, 0, 0), grad_x,
                             AT_OUT(grad_x, e.n, 0, e.h, 0), grad_x_sw, row16_channels(C),
                             H, W, OH, OW, e.h, grad_out_sh, grad_out_sw);
        return;
    }
#endif
    int four = channels_inner == 4;
    if (!(four ? nhwc_item(&e, C, H, W) : strided_item(&e, C, H, W, channels_inner)))
        return;
    int ow0 = cell_start(e.w, OW, W), ow1 = cell_end(e.w, OW, W), oh0, oh1, next = -1;
    int lanes = four ? 4 : 1, aligned = four && ALIGNED4(grad_out, grad_x);
    int end = H - e.h > (four ? CLPOOL_CL_ROWS : 1) ? e.h + (four ? CLPOOL_CL_ROWS : 1) : H;
    long g0 = AT(grad_out, e.n, e.c, 0, 0);
    acc4_t g = 0;
#define GRAD(oh, ow) \
    load_lanes(grad_out, g0 + (long)(oh) * grad_out_sh + (long)(ow) * grad_out_sw, lanes, aligned)
    for (int h = e.h; h < end; ++h) {
        if (h >= next) {
            next = cells_at(h, H, OH, &oh0, &oh1);
            g = 0;
            SUM_SHARES(g, GRAD, plus_zero4)
        }
        store_lanes(grad_x, AT_OUT(grad_x, e.n, e.c, h, e.w), g, lanes, aligned);
    }
#undef GRAD
}

/* Global (1x1) average pooling for an input of any strides on a GPU: a work-group takes
 * get_local_size(0) items of channels of one image (neighbouring work-items,
 * neighbouring channels: coalesced on channels-last data; 4 channels each with
 * channels_inner == 4), and its get_local_size(1) slices (a power of two) each sum every
 * slice-th pixel of the plane in row-major order; local memory adds the slices in a fixed
 * tree, so that results are the same run to run. Groups of few channels by many slices
 * keep the whole GPU busy: a work-item per channel summing its plane leaves it nearly
 * idle (N * C work-items). */
__kernel void adaptive_avg_pool2d_global_strided(__global const elem_t *restrict x,
                                                 __global elem_t *restrict out,
                                                 STRIDED_FORWARD_SIZES, int H, int W,
                                                 __local acc_t *scratch)
{
    int lanes = channels_inner == 4 ? 4 : 1, aligned = lanes == 4 && ALIGNED4(x, out);
    int c = get_global_id(0) * lanes, slice = get_local_id(1), slices = get_local_size(1);
    int across = get_local_size(0), lid = slice * across + get_local_id(0);
    long n = get_global_id(2), HW = (long)H * W;
    acc4_t s = 0;
    if (c < C) {
        __global const elem_t *xp = x + AT(x, n, c, 0, 0);
        if (x_sh == W * x_sw) { /* pixel p at p * x_sw (dense rows) */
#pragma unroll 8
            for (long p = slice; p < HW; p += slices)
                s += load_lanes(xp, p * x_sw, lanes, aligned);
        } else {
            for (long p = slice; p < HW; p += slices)
                s += load_lanes(xp, p / W * x_sh + p % W * x_sw, lanes, aligned);
        }
    }
    vstore4(s, lid, scratch);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int half_n = slices / 2; half_n > 0; half_n /= 2) {
        if (slice < half_n)
            vstore4(vload4(lid, scratch) + vload4(lid + half_n * across, scratch), lid, scratch);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (slice == 0 && c < C)
        store_lanes(out, AT_OUT(out, n, c, 0, 0), vload4(lid, scratch) / (acc_t)H / (acc_t)W,
                 lanes, aligned);
}
