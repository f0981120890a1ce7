/* Adaptive max pooling over (D, H, W) volumes; 1-D and 2-D run with D = 1 (and H = 1).
 * Output cell i of n over an axis of size s spans [floor(i*s/n), ceil((i+1)*s/n)). Indices
 * are flat in the input volume: (d * H + h) * W + w. */

#include "clpool.h"

/* The sizes every adaptive max pooling kernel takes: the input volume's, the output's. */
#define ADAPTIVE_MAX_SIZES                                                            \
    int D, int H, int W, int OD, int OH, int OW

/* floor(i*size/n), or the ceiling when `up`: 32-bit division while the numerator fits. */
inline int scaled_bound(int i, int size, int n, int up)
{
    long num = (long)i * size + (up ? n - 1 : 0);
    return num <= UINT_MAX ? (int)((uint)num / (uint)n) : (int)(num / n);
}

/* out = the maximum of each cell, in (d, h, w) row-major order: NaN wins (the last NaN
 * keeps its index, as in PyTorch's CPU kernel), ties keep the first, and a cell of -inf
 * only gives the index of its first element. Work-item (ow, oh, plane * OD + od); with
 * -DCLPOOL_NO_INDICES `indices` is a placeholder, never written. */
__kernel void adaptive_max_pool_forward(__global const elem_t *restrict x,
                                        __global elem_t *restrict out,
                                        __global index_t *restrict indices,
                                        ADAPTIVE_MAX_SIZES)
{
    int ow = get_global_id(0);
    if (ow >= OW)
        return;
    long slab = get_global_id(2); /* plane * OD + od */
    long plane = slab / OD;
    int od = slab % OD;
    __global const elem_t *xp = x + plane * D * H * W;
    int d0 = scaled_bound(od, D, OD, 0), d1 = scaled_bound(od + 1, D, OD, 1);
    int w0 = scaled_bound(ow, W, OW, 0), w1 = scaled_bound(ow + 1, W, OW, 1);
    FOR_EACH_ROW(oh, OH) {
        int h0 = scaled_bound(oh, H, OH, 0), h1 = scaled_bound(oh + 1, H, OH, 1);
        acc_t best = -INFINITY;
        pos_t best_i = ((pos_t)d0 * H + h0) * W + w0;
        for (int d = d0; d < d1; ++d)
            for (int h = h0; h < h1; ++h) {
                pos_t row = ((pos_t)d * H + h) * W;
                for (int w = w0; w < w1; ++w) {
                    acc_t v = LOAD(xp, row + w);
                    /* v != v: v is NaN (isnan() here took 2.7-3.6 against 1.6-1.7 ms
                     * on [8,64,56,56] to 7x7, Debian's PoCL) */
                    if (v > best || v != v) {
                        best = v;
                        best_i = row + w;
                    }
                }
            }
        long at = slab * OH * OW + (long)oh * OW + ow;
        STORE(out, at, best);
#ifndef CLPOOL_NO_INDICES
        indices[at] = (index_t)best_i;
#else
        (void)best_i;
#endif
    }
}

/* grad_x[i] = the sum, in ascending output order, of grad_out over the cells that contain
 * input element i and whose index names it (PyTorch's CPU loop adds them in that order);
 * an index outside its cell is ignored. Work-item (iw, ih, plane * D + id). */
__kernel void adaptive_max_pool_backward(__global const elem_t *restrict grad_out,
                                         __global const index_t *restrict indices,
                                         __global elem_t *restrict grad_x,
                                         ADAPTIVE_MAX_SIZES)
{
    int iw = get_global_id(0);
    if (iw >= W)
        return;
    long slab = get_global_id(2); /* plane * D + id */
    long plane = slab / D;
    int id = slab % D;
    long cells = (long)OD * OH * OW;
    __global const elem_t *gp = grad_out + plane * cells;
    __global const index_t *ip = indices + plane * cells;
    int od0 = scaled_bound(id, OD, D, 0), od1 = scaled_bound(id + 1, OD, D, 1);
    int ow0 = scaled_bound(iw, OW, W, 0), ow1 = scaled_bound(iw + 1, OW, W, 1);
    FOR_EACH_ROW(ih, H) {
        int oh0 = scaled_bound(ih, OH, H, 0), oh1 = scaled_bound(ih + 1, OH, H, 1);
        pos_t at = ((pos_t)id * H + ih) * W + iw;
        acc_t g = 0;
        for (int od = od0; od < od1; ++od)
            for (int oh = oh0; oh < oh1; ++oh) {
                pos_t row = ((pos_t)od * OH + oh) * OW;
                for (int ow = ow0; ow < ow1; ++ow)
                    if ((long)ip[row + ow] == (long)at)
                        g += LOAD(gp, row + ow);
            }
        STORE(grad_x, plane * D * H * W + at, g);
    }
}

/* The backward for a CPU (float32 and float64): one work-item per plane clears it, then
 * adds each cell's grad_out to the element its index names, in output order (PyTorch's CPU
 * loop), where that element lies in the cell; the same sums as the kernel above. */
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
    clear_rows(xp, W, 0, D * H);
    pos_t k = 0;
    for (int od = 0; od < OD; ++od) {
        int d0 = scaled_bound(od, D, OD, 0), d1 = scaled_bound(od + 1, D, OD, 1);
        for (int oh = 0; oh < OH; ++oh) {
            int h0 = scaled_bound(oh, H, OH, 0), h1 = scaled_bound(oh + 1, H, OH, 1);
            for (int ow = 0; ow < OW; ++ow, ++k) {
                int w0 = scaled_bound(ow, W, OW, 0), w1 = scaled_bound(ow + 1, W, OW, 1);
                long at = ip[k];
                if (at < 0 || at >= volume)
                    continue;
                long row = at / W;
                int w = at - row * W, h = row % H, d = row / H;
                if (d >= d0 && d < d1 && h >= h0 && h < h1 && w >= w0 && w < w1)
                    STORE(xp, at, LOAD(xp, at) + LOAD(gp, k));
            }
        }
    }
}
