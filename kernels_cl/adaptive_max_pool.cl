/* Adaptive max pooling over (D, H, W) volumes; 1-D and 2-D run with D = 1 (and H = 1).
 * Output cell i of n over an axis of size s spans [floor(i*s/n), ceil((i+1)*s/n)). Indices
 * are flat in the input volume: (d * H + h) * W + w. */

#include "clpool.h"
#include "plane.h"

/* The sizes every adaptive max pooling kernel takes: the input volume's, the output's. */
#define ADAPTIVE_MAX_SIZES                                                            \
    int D, int H, int W, int OD, int OH, int OW

/* The arithmetic of the work-item layout, and of the cell bounds worked out from one
 * division (a row's or a column's floor and ceiling): unsigned 32-bit unless the host
 * passes -DCLPOOL_LARGE_PLANE (it does where an axis's size times its output's size, a
 * volume, or the span of a backward's view of a plane reaches 2^31), since GPUs emulate
 * 64-bit division in a long sequence of instructions. */
#ifdef CLPOOL_LARGE_PLANE
typedef ulong bound_t;
#else
typedef uint bound_t;
#endif

/* Work-item layout of both gathers: dimension 0 walks the columns, 1 the (slice, tile)
 * pairs of `slices` slices of `rows` rows, a tile being CLPOOL_ROWS consecutive rows of a
 * slice, 2 the planes. Declares `slice` and this item's rows [r0, r1), and returns from
 * the kernel for an item past the columns or the slices. */
#define SLICE_TILE(slice, r0, r1, col, cols, slices, rows)                            \
    bound_t tiles_ = ((bound_t)(rows) + CLPOOL_ROWS - 1) / CLPOOL_ROWS;               \
    bound_t tile_ = get_global_id(1);                                                 \
    int slice = tile_ / tiles_;                                                       \
    if ((col) >= (cols) || slice >= (slices))                                         \
        return;                                                                       \
    int r0 = (tile_ - slice * tiles_) * CLPOOL_ROWS;                                  \
    int r1 = min((bound_t)r0 + CLPOOL_ROWS, (bound_t)(rows))

/* The fold of a cell's elements in (d, h, w) order: NaN wins (the last NaN keeps its
 * index, as in PyTorch's CPU kernel) and ties keep the first. v != v: v is NaN (isnan()
 * here took 2.7-3.6 against 1.6-1.7 ms on [8,64,56,56] to 7x7, Debian's PoCL). */
#define FOLD_CELL_MAX(best, best_i, v, at)                                            \
    if ((v) > (best) || (v) != (v)) {                                                 \
        (best) = (v);                                                                 \
        (best_i) = (at);                                                              \
    }

/* Folds (v, at), the result of folding other elements of the cell, into (best, best_i):
 * a NaN over a number and the later of two NaNs, else the larger value and, of equal
 * ones, the earlier index; the sequential fold's result in any order of folding. */
#define FOLD_PAIR_MAX(best, best_i, v, at)                                            \
    {                                                                                 \
        acc_t v_ = (v);                                                               \
        long at_ = (at);                                                              \
        int nan_a_ = (best) != (best), nan_b_ = v_ != v_;                             \
        if (nan_a_ || nan_b_ ? nan_b_ && (!nan_a_ || at_ > (best_i))                 \
                             : v_ > (best) || (v_ == (best) && at_ < (best_i))) {    \
            (best) = v_;                                                              \
            (best_i) = at_;                                                           \
        }                                                                             \
    }

/* -DCLPOOL_MAX_LANES=4|16 (a CPU; cells of 8 columns or more; 16: of 128 columns or more, or
 * of 128 elements and a multiple of 16 columns, clpool/adaptive_max.py's LANES16): each
 * row of a cell folded 4 or 16 columns at a time into as many lanes, each keeping a value
 * and an index, then the rest of the row one by one; the lanes last, in any order
 * (FOLD_PAIR_MAX). Lanes of -inf keep an index past best_i's, and lose the tie. This
 * project's Zen 5, both CPU drivers: 4 lanes took [16,256,4096] to 7 with indices 34 ->
 * 4.4 ms and [2,64,16,56,56] to 7x7x7 7.2 -> 3.0-3.7 ms (cells of 2 columns took twice as
 * long so); 16 lanes, BENCHMARKS.md. */
#if CLPOOL_MAX_LANES == 16
typedef acc16_t lanes_t;
typedef pos16_t lanes_at_t;
#define LOAD_LANES LOAD16
#define LANES_AT(v) AS_POS16(v)
#define LANE_STEPS POS16_STEPS
#elif CLPOOL_MAX_LANES == 4
typedef acc4_t lanes_t;
typedef index4_t lanes_at_t;
#define LOAD_LANES LOAD4
#define LANES_AT(v) CONVERT_INDEX4(v)
#define LANE_STEPS ((index4_t)(0, 1, 2, 3))
#endif
/* past any index: INT_MAX or LONG_MAX in every lane, by the width of lanes_at_t's own */
#define LANES_PAST \
    ((lanes_at_t)(sizeof(lanes_at_t) == 4 * CLPOOL_MAX_LANES ? INT_MAX : LONG_MAX))

/* out = the maximum of each cell, in (d, h, w) row-major order: NaN wins (the last NaN
 * keeps its index, as in PyTorch's CPU kernel), ties keep the first, and a cell of -inf
 * only gives the index of its first element. Work-item (ow, (od, tile of oh), plane); with
 * -DCLPOOL_NO_INDICES `indices` is a placeholder, never written. */
__kernel void adaptive_max_pool_forward(__global const elem_t *restrict x,
                                        __global elem_t *restrict out,
                                        __global index_t *restrict indices,
                                        ADAPTIVE_MAX_SIZES)
{
    int ow = get_global_id(0);
    SLICE_TILE(od, oh0, oh1, ow, OW, OD, OH);
    long plane = get_global_id(2);
    __global const elem_t *xp = x + plane * D * H * W;
    long cells = plane * OD * OH * OW;
    int d0 = cell_start(od, D, OD), d1 = cell_end(od, D, OD);
    int w0 = cell_start(ow, W, OW), w1 = cell_end(ow, W, OW);
    /* h0 of the next row is the floor whose ceiling is this row's h1: one division a row */
    int h0 = cell_start(oh0, H, OH);
    for (int oh = oh0; oh < oh1; ++oh) {
        bound_t num = (bound_t)(oh + 1) * (bound_t)H;
        int next = num / (bound_t)OH, h1 = next + (num != (bound_t)next * (bound_t)OH);
        acc_t best = -INFINITY;
        pos_t best_i = ((pos_t)d0 * H + h0) * W + w0;
#ifdef CLPOOL_MAX_LANES
        lanes_t best_l = -INFINITY;
        lanes_at_t at_l = LANES_PAST;
#endif
        for (int d = d0; d < d1; ++d)
            for (int h = h0; h < h1; ++h) {
                pos_t row = ((pos_t)d * H + h) * W;
                int w = w0;
#ifdef CLPOOL_MAX_LANES
                for (; w1 - w >= CLPOOL_MAX_LANES; w += CLPOOL_MAX_LANES) {
                    lanes_t v = LOAD_LANES(xp, row + w);
                    at_l = select(at_l, (lanes_at_t)(row + w) + LANE_STEPS,
                                  LANES_AT((v > best_l) | (v != v)));
                    best_l = select(best_l, v, (v > best_l) | (v != v));
                }
#endif
                for (; w < w1; ++w) {
                    acc_t v = LOAD(xp, row + w);
                    FOLD_CELL_MAX(best, best_i, v, row + w)
                }
            }
#ifdef CLPOOL_MAX_LANES
#pragma unroll
        for (int k = 0; k < CLPOOL_MAX_LANES; ++k)
            FOLD_PAIR_MAX(best, best_i, best_l[k], at_l[k])
#endif
        long at = cells + ((pos_t)od * OH + oh) * OW + ow;
        STORE_MAX(out, indices, at, best, best_i);
        h0 = next;
    }
}

/* The forward of planes of one row of HW elements into OW cells (1-D; a 1x1x1 output's
 * volume is one cell), on a GPU: one work-group per cell, plane by plane. Each work-item
 * folds its elements (every n-th) in order, then the group folds pairs in local memory:
 * a NaN over a number and the later of two NaNs, else the larger value and, of equal
 * ones, the earlier index: the sequential fold's result (the last NaN, else the first
 * maximum) in any order. A work-item of no elements offers -inf at no index. The
 * work-group size must be a power of two. */
__kernel void adaptive_max_pool_global(__global const elem_t *restrict x,
                                       __global elem_t *restrict out,
                                       __global index_t *restrict indices, long HW, int OW,
                                       __local acc_t *best_v, __local long *best_at)
{
    size_t cell = get_group_id(0);
    int lid = get_local_id(0), n = get_local_size(0);
    long w0, w1, plane = row_cell(cell, HW, OW, &w0, &w1);
    __global const elem_t *xp = x + plane * HW;
    acc_t best = -INFINITY;
    long i = w0 + lid, best_i = i < w1 ? i : LONG_MAX;
    for (; i + 3 * n < w1; i += 4 * n) { /* four loads in flight, folded in order */
        acc_t v0 = LOAD(xp, i), v1 = LOAD(xp, i + n), v2 = LOAD(xp, i + 2 * n);
        acc_t v3 = LOAD(xp, i + 3 * n);
        FOLD_CELL_MAX(best, best_i, v0, i)
        FOLD_CELL_MAX(best, best_i, v1, i + n)
        FOLD_CELL_MAX(best, best_i, v2, i + 2 * n)
        FOLD_CELL_MAX(best, best_i, v3, i + 3 * n)
    }
    for (; i < w1; i += n) {
        acc_t v = LOAD(xp, i);
        FOLD_CELL_MAX(best, best_i, v, i)
    }
    best_v[lid] = best;
    best_at[lid] = best_i;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int half_n = n / 2; half_n > 0; half_n /= 2) {
        if (lid < half_n) {
            acc_t a = best_v[lid];
            long ia = best_at[lid];
            FOLD_PAIR_MAX(a, ia, best_v[lid + half_n], best_at[lid + half_n])
            best_v[lid] = a;
            best_at[lid] = ia;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        STORE_MAX(out, indices, cell, best_v[0], best_at[0]);
}

/* The backward of planes of one row of W elements from OW cells (W >= OW): one work-group
 * per cell, plane by plane, stores the elements from its start to the next cell's, each
 * the sum of the grad_out of the cell before (where it reaches the element) and of this
 * one, where their indices name it (the gather's sums, in output order: on an H100,
 * [64,256,4096] from 7 took 346 us by a clear and a scatter, 27% of its copy bandwidth,
 * 121 us so, 75%). */
__kernel void adaptive_max_pool_global_backward(__global const elem_t *restrict grad_out,
                                                __global const index_t *restrict indices,
                                                __global elem_t *restrict grad_x, int W, int OW)
{
    int ow, w0, w1, shared;
    long plane = row_owned(get_group_id(0), W, OW, &ow, &w0, &w1, &shared), cell = plane * OW + ow;
    index_t at = indices[cell], before_at = ow > 0 ? indices[cell - 1] : -1;
    acc_t g = LOAD(grad_out, cell), before = ow > 0 ? LOAD(grad_out, cell - 1) : 0;
    __global elem_t *xp = grad_x + plane * W;
    for (int w = w0 + get_local_id(0); w < w1; w += get_local_size(0)) {
        acc_t sum = 0;
        if (w < shared && before_at == w)
            sum += before;
        if (at == w)
            sum += g;
        STORE(xp, w, sum);
    }
}

/* grad_x[i] = the sum, in ascending output order, of grad_out over the cells that contain
 * input element i and whose index names it (PyTorch's CPU loop adds them in that order);
 * an index outside its cell is ignored. Work-item (tile of CLPOOL_COLS columns, (id, tile
 * of ih), plane): each cell reaching a row of its columns is loaded once for all of them,
 * and the row's columns are stored at once (bfloat16: packed, with CLPOOL_PACK). Every
 * such cell is loaded and a mismatch adds 0 (g never is -0), so that the loads of a row
 * issue together rather than each after its index. grad_out and indices are read through
 * their strides as 5-D views (clpool.h's VIEW3D; a channels-last-3d one without a copy
 * first, which took longer than this kernel on an H100), plane p being (p / C, p % C): a
 * division per work-item, which a CPU pays too where it runs this kernel (a plane per
 * work-item where it can). */
#define ADAPTIVE_MAX_VIEW_SIZES VIEW3D(grad_out), VIEW3D(indices), int C
__kernel void adaptive_max_pool_backward(__global const elem_t *restrict grad_out,
                                         __global const index_t *restrict indices,
                                         __global elem_t *restrict grad_x,
                                         ADAPTIVE_MAX_SIZES, ADAPTIVE_MAX_VIEW_SIZES)
{
    int iw0 = get_global_id(0) * CLPOOL_COLS;
    SLICE_TILE(id, ih0, ih1, iw0, W, D, H);
    long plane = get_global_id(2);
    int ch;
    long image = split_row(plane, C, &ch);
    __global const elem_t *gp = grad_out + AT3D(grad_out, image, ch, 0, 0, 0);
    __global const index_t *ip = indices + AT3D(indices, image, ch, 0, 0, 0);
    __global elem_t *xp = grad_x + plane * D * H * W;
    /* offsets within a plane's views in pos_t, as the host's extents allow: in 64 bits
     * NCDHW [8,64,16,56,56] to 7x7x7 took 107 us on an H100, in 32 bits 65 (with the
     * strides as build constants too: the same) */
    pos_t g_sd = grad_out_sd, g_sh = grad_out_sh, g_sw = grad_out_sw;
    pos_t i_sd = indices_sd, i_sh = indices_sh, i_sw = indices_sw;
    int od0 = cell_start(id, OD, D), od1 = cell_end(id, OD, D), oh0, oh1;
    /* the cells of column iw0 + c are [first[c], last[c]); of the tile, [ow0, ow1) */
    int first[CLPOOL_COLS], last[CLPOOL_COLS], n = min(CLPOOL_COLS, W - iw0);
    tile_cells(first, last, iw0, W, OW);
    int ow0 = first[0], ow1 = last[CLPOOL_COLS - 1];
    for (int ih = ih0, next = -1; ih < ih1; ++ih) {
        if (ih >= next)
            next = cells_at(ih, H, OH, &oh0, &oh1);
        pos_t at = ((pos_t)id * H + ih) * W + iw0;
        acc_t g[CLPOOL_COLS];
        UNROLL for (int c = 0; c < CLPOOL_COLS; ++c)
            g[c] = 0;
        for (int od = od0; od < od1; ++od)
            for (int oh = oh0; oh < oh1; ++oh) {
                pos_t go = od * g_sd + oh * g_sh, io = od * i_sd + oh * i_sh;
                for (int ow = ow0; ow < ow1; ++ow) {
                    acc_t v = LOAD(gp, go + ow * g_sw);
                    /* the column the index names, c, where it names one of this row's
                     * (unsigned: any index, no overflow) */
                    uindex_t named = (uindex_t)ip[io + ow * i_sw] - (uindex_t)at;
                    UNROLL for (int c = 0; c < CLPOOL_COLS; ++c)
                        g[c] += named == (uindex_t)c && first[c] <= ow && ow < last[c]
                                    ? v
                                    : (acc_t)0;
                }
            }
        STORE_COLS(xp, at, g, n);
    }
}

/* The backward on a GPU where cells do not outnumber the input's elements: grad_x = 0
 * (adaptive_max_pool_clear: a work-group clears RUN runs of its size, each run's stores at
 * once), then a work-item per cell (ow, (od, oh), plane) stores into the element its index
 * names, where that lies in the cell, the sum in output order of grad_out over the cells
 * that contain the element and name it, unless an earlier one of them does so: the
 * gather's sums (PyTorch's CPU order), by one work-item, without atomics. On an H100,
 * NCDHW [8,64,16,56,56] from 7x7x7: clear 43.4 us (RUN 16; 67.2 with 4, 43.6 with 32,
 * 52.0 with 16 float4 stores, 130 with a work-item's 4 elements side by side), scatter
 * 15.7 us; the gather above took 65.7 us on the H200, a work-group per slab of cells
 * storing each element once 125 us on the H100.
 * grad_out and indices are read as the gather reads them. */
__kernel void adaptive_max_pool_clear(__global elem_t *restrict grad_x, ADAPTIVE_MAX_SIZES,
                                      int RUN)
{
    long volume = (long)D * H * W, i = (long)get_group_id(0) * get_local_size(0) * RUN;
    __global elem_t *xp = grad_x + get_global_id(2) * volume;
    i += get_local_id(0);
    for (int k = 0; k < RUN && i < volume; ++k, i += get_local_size(0))
        STORE(xp, i, (acc_t)0);
}

__kernel void adaptive_max_pool_scatter(__global const elem_t *restrict grad_out,
                                        __global const index_t *restrict indices,
                                        __global elem_t *restrict grad_x,
                                        ADAPTIVE_MAX_SIZES, ADAPTIVE_MAX_VIEW_SIZES)
{
    int ow = get_global_id(0), y = get_global_id(1);
    if (ow >= OW || y >= OD * OH)
        return;
    int od = y / OH, oh = y - od * OH, ch;
    long plane = get_global_id(2), image = split_row(plane, C, &ch);
    __global const elem_t *gp = grad_out + AT3D(grad_out, image, ch, 0, 0, 0);
    __global const index_t *ip = indices + AT3D(indices, image, ch, 0, 0, 0);
#define CELL(v, d, h, w) ((pos_t)(d) * v##_sd + (pos_t)(h) * v##_sh + (pos_t)(w) * v##_sw)
    index_t at = ip[CELL(indices, od, oh, ow)];
    pos_t volume = (pos_t)D * H * W;
    if (at < 0 || at >= volume)
        return;
    pos_t e = at, row = e / W;
    int w = e - row * W, d = row / H, h = row - (pos_t)d * H;
    int d0, d1, h0, h1, w0, w1;
    cells_at(d, D, OD, &d0, &d1);
    cells_at(h, H, OH, &h0, &h1);
    cells_at(w, W, OW, &w0, &w1);
    if (od < d0 || od >= d1 || oh < h0 || oh >= h1 || ow < w0 || ow >= w1)
        return; /* outside its cell: ignored */
    acc_t sum = 0;
    for (int qd = d0; qd < d1; ++qd)
        for (int qh = h0; qh < h1; ++qh)
            for (int qw = w0; qw < w1; ++qw)
                if (ip[CELL(indices, qd, qh, qw)] == at) {
                    if (qd < od || (qd == od && (qh < oh || (qh == oh && qw < ow))))
                        return; /* an earlier cell stores it */
                    sum += LOAD(gp, CELL(grad_out, qd, qh, qw));
                }
#undef CELL
    STORE(grad_x, plane * volume + e, sum);
}

/* The backward for a CPU (float32 and float64): one work-item per plane (or per band of
 * its rows where planes are fewer than cores, Policy.plane_bands) clears it, then adds
 * each cell's grad_out to the element its index names, in output order (PyTorch's CPU
 * loop), where that element lies in the cell (and the band); the same sums as the kernel
 * above. */
__kernel void adaptive_max_pool_backward_plane(__global const elem_t *restrict grad_out,
                                               __global const index_t *restrict indices,
                                               __global elem_t *restrict grad_x,
                                               ADAPTIVE_MAX_SIZES)
{
    long plane = get_global_id(0);
    long cells = (long)OD * OH * OW, volume = (long)D * H * W;
    __global const elem_t *gp = grad_out + plane * cells;
    __global const index_t *ip = indices + plane * cells;
    __global elem_t *xp = grad_x + plane * volume;
    int2 rows = plane_band(D * H); /* of the volume's D * H rows */
    long lo = (long)rows.x * W, hi = (long)rows.y * W;
    clear_rows(xp, W, rows.x, rows.y);
    pos_t k = 0;
    for (int od = 0; od < OD; ++od) {
        int d0 = cell_start(od, D, OD), d1 = cell_end(od, D, OD);
        for (int oh = 0; oh < OH; ++oh) {
            int h0 = cell_start(oh, H, OH), h1 = cell_end(oh, H, OH);
            /* a cell's first column is the floor of the numerator whose ceiling ends the
             * cell before: one division a cell */
            int w0 = 0;
            for (int ow = 0; ow < OW; ++ow, ++k) {
                bound_t num = (bound_t)(ow + 1) * (bound_t)W;
                int next = num / (bound_t)OW, w1 = next + (num != (bound_t)next * (bound_t)OW);
                long i = ip[k];
                int w = w0, inside = 0;
                w0 = next;
                /* whether i lies in one of the cell's rows: compared row by row, not
                 * divided (with the column bounds from one division, on this project's
                 * Zen 4, [8,256,14,14] to 7x7: 390 -> 285 us, both CPU runtimes) */
                for (int d = d0; d < d1; ++d)
                    for (int h = h0; h < h1; ++h) {
                        long row = ((long)d * H + h) * W;
                        inside |= i >= row + w && i < row + w1;
                    }
                if (inside && i >= lo && i < hi)
                    STORE(xp, i, LOAD(xp, i) + LOAD(gp, k));
            }
        }
    }
}

#ifndef CLPOOL_NO_LANES16
/* A CPU's channels-last forward (channels_inner == 16, plane.h): the maximum and index of
 * each cell of output row oh of image xp, 16 channels at a time, each lane folded as
 * FOLD_CELL_MAX (a cell of -inf: its first element's index). */
inline void adaptive_max_row16(__global const elem_t *xp, __global elem_t *out,
                               __global index_t *indices, long at, long out_sw, int2 ch, int H,
                               int W, int OH, int OW, int oh, long x_sh, long x_sw)
{
    int h0 = cell_start(oh, H, OH), h1 = cell_end(oh, H, OH);
    for (int ow = 0; ow < OW; ++ow, at += out_sw) {
        int w0 = cell_start(ow, W, OW), w1 = cell_end(ow, W, OW);
        for (int c = ch.x; c < ch.y; c += 16) {
            acc16_t best = -INFINITY;
            pos16_t best_i = (pos_t)h0 * W + w0;
            for (int h = h0; h < h1; ++h)
                for (int w = w0; w < w1; ++w) {
                    acc16_t v = LOAD16(xp, (long)h * x_sh + (long)w * x_sw + c);
                    FOLD_MAX16(best, best_i, v, (pos_t)h * W + w)
                }
            STORE16(out, at + c, best);
#ifndef CLPOOL_NO_INDICES
            STORE_INDEX16(indices, at + c, best_i);
#endif
        }
    }
}

/* A CPU's channels-last backward (channels_inner == 16): the gradient of each element of
 * input row h, 16 channels at a time, the gradients of the cells containing it whose
 * index names it added in output order. */
inline void adaptive_max_gather_row16(__global const elem_t *gp, __global const index_t *ip,
                                      __global elem_t *grad_x, long at, long out_sw, int2 ch,
                                      int H, int W, int OH, int OW, int h, long g_sh,
                                      long g_sw, long i_sh, long i_sw)
{
    int oh0, oh1;
    cells_at(h, H, OH, &oh0, &oh1);
    for (int w = 0; w < W; ++w, at += out_sw) {
        int ow0 = cell_start(w, OW, W), ow1 = cell_end(w, OW, W);
        pos_t self = (pos_t)h * W + w;
        for (int c = ch.x; c < ch.y; c += 16) {
            acc16_t g = 0;
            for (int oh = oh0; oh < oh1; ++oh)
                for (int ow = ow0; ow < ow1; ++ow) {
                    g += named16(gp, (long)oh * g_sh + (long)ow * g_sw + c, ip,
                                 (long)oh * i_sh + (long)ow * i_sw + c, self);
                }
            STORE16(grad_x, at + c, g);
        }
    }
}
#endif

/* adaptive_max_pool_forward of a 2-D input of any strides (clpool.h's _strided kernels),
 * the results written through out's strides (indices has the same): one output per
 * work-item, neighbouring channels in neighbouring work-items where the result is
 * channels-last (a CPU: a row of them, 16 channels a lane, with channels_inner == 16:
 * adaptive_max_row16); indices flat in the (H, W) plane, h * W + w. */
__kernel void adaptive_max_pool2d_forward_strided(__global const elem_t *restrict x,
                                                  __global elem_t *restrict out,
                                                  __global index_t *restrict indices,
                                                  STRIDED_FORWARD_SIZES, int H, int W, int OH,
                                                  int OW)
{
    item_t o;
#ifndef CLPOOL_NO_LANES16
    if (channels_inner == 16) { /* a CPU: output row o.h of image o.n */
        o.n = split_row(get_global_id(2), OH, &o.h);
        adaptive_max_row16(x + AT(x, o.n, 0, 0, 0), out, indices, AT_OUT(out, o.n, 0, o.h, 0),
                           out_sw, row16_channels(C), H, W, OH, OW, o.h, x_sh, x_sw);
        return;
    }
#endif
    if (!strided_item(&o, C, OH, OW, channels_inner))
        return;
    __global const elem_t *xp = x + AT(x, o.n, o.c, 0, 0);
    int h0 = cell_start(o.h, H, OH), h1 = cell_end(o.h, H, OH);
    int w0 = cell_start(o.w, W, OW), w1 = cell_end(o.w, W, OW);
    acc_t best = -INFINITY;
    pos_t best_i = (pos_t)h0 * W + w0;
    for (int h = h0; h < h1; ++h)
        for (int w = w0; w < w1; ++w) {
            acc_t v = LOAD(xp, (long)h * x_sh + (long)w * x_sw);
            FOLD_CELL_MAX(best, best_i, v, (pos_t)h * W + w)
        }
    long at = AT_OUT(out, o.n, o.c, o.h, o.w);
    STORE_MAX(out, indices, at, best, best_i);
}

/* adaptive_max_pool_backward of a 2-D grad_out and indices of any strides, grad_x written
 * through its own: one input element per work-item (a CPU: a row of them, 16 channels a
 * lane, with channels_inner == 16) adds, in output order, the gradients of the cells that
 * contain it and whose index names it. */
__kernel void adaptive_max_pool2d_backward_strided(__global const elem_t *restrict grad_out,
                                                   __global const index_t *restrict indices,
                                                   __global elem_t *restrict grad_x,
                                                   STRIDED_BACKWARD_SIZES,
                                                   INDICES_VIEW_SIZES, int H, int W, int OH,
                                                   int OW)
{
    item_t e;
#ifndef CLPOOL_NO_LANES16
    if (channels_inner == 16) { /* a CPU: input row e.h of image e.n */
        e.n = split_row(get_global_id(2), H, &e.h);
        adaptive_max_gather_row16(grad_out + AT(grad_out, e.n, 0, 0, 0),
                                  indices + AT(indices, e.n, 0, 0, 0), grad_x,
                                  AT_OUT(grad_x, e.n, 0, e.h, 0), grad_x_sw, row16_channels(C),
                                  H, W, OH, OW, e.h, grad_out_sh, grad_out_sw, indices_sh,
                                  indices_sw);
        return;
    }
#endif
    if (!strided_item(&e, C, H, W, channels_inner))
        return;
    int oh0, oh1, ow0, ow1;
    cells_at(e.h, H, OH, &oh0, &oh1);
    cells_at(e.w, W, OW, &ow0, &ow1);
    pos_t self = (pos_t)e.h * W + e.w;
    acc_t g = 0;
    for (int oh = oh0; oh < oh1; ++oh)
        for (int ow = ow0; ow < ow1; ++ow) {
            acc_t v = LOAD(grad_out, AT(grad_out, e.n, e.c, oh, ow));
            g += indices[AT(indices, e.n, e.c, oh, ow)] == self ? v : (acc_t)0;
        }
    STORE(grad_x, AT_OUT(grad_x, e.n, e.c, e.h, e.w), g);
}
