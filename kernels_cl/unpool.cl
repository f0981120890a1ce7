/* Max unpooling in 1-D, 2-D and 3-D: planes are flat, IP input positions and OP output
 * positions each, and indices are flat in the output plane. One work-item per element (a
 * CPU's gather: per run of positions), dimension 0 along the plane (coalesced loads of x
 * and indices), dimension 2 the (batch, channel) planes (the gather's: the batch, its
 * channel along dimension 1). Where two inputs name one output, the later input wins, as
 * on PyTorch's CPU: an owner map holds, per output, the largest input position that names
 * it (atomic_max on 32-bit ints, core OpenCL 1.1), and only that input writes. An index
 * outside [0, OP) is skipped and sets flag[0]. Where every index lies in its input's
 * window, max_unpool_window gathers instead, with no owner map and no atomics; where the
 * windows also tile the output, max_unpool_tile writes each output from its one owner. */

#include "clpool.h"

/* The sizes every unpooling kernel takes: the input's and the output's plane sizes, and
 * where the planes lie in each array, read or written as it is. Plane p = n * C + c of
 * view v (in: x or grad_x, idx: the indices, out: out or grad_out) starts at element
 * n * v_sn + c * v_sc, and its position i lies i * v_step elements further: an array
 * dense along the plane's axes (C-contiguous: v_step 1, v_sc the plane's size;
 * channels-last: v_step C, v_sc 1, where neighbouring planes are neighbouring elements and
 * the host puts neighbouring work-items on them on a GPU). */
#define UNPOOL_SIZES                                                                \
    long IP, long OP, int C, long in_sn, long in_sc, long in_step, long idx_sn,     \
    long idx_sc, long idx_step, long out_sn, long out_sc, long out_step

/* Declares in0, idx0 and out0: where plane (n, c) starts in each view. */
#define UNPOOL_STARTS(n, c)                                                         \
    long in0 = (n) * in_sn + (c) * in_sc, idx0 = (n) * idx_sn + (c) * idx_sc;       \
    long out0 = (n) * out_sn + (c) * out_sc;                                        \
    (void)in0, (void)idx0, (void)out0
/* UNPOOL_STARTS of plane `plane` = n * C + c. */
#define UNPOOL_PLANE(plane)                                                         \
    int c_;                                                                         \
    long n_ = split_row((plane), C, &c_);                                           \
    UNPOOL_STARTS(n_, c_)
/* Where position i of the work-item's plane lies in view in, idx or out. */
#define IN_AT(i) (in0 + (long)(i) * in_step)
#define IDX_AT(i) (idx0 + (long)(i) * idx_step)
#define OUT_AT(j) (out0 + (long)(j) * out_step)

/* Declares the work-item's position i in its plane (dimension 0) and the plane's starts
 * (UNPOOL_PLANE, dimension 2), and returns past the plane's `extent`. */
#define UNPOOL_ITEM(i, extent)                                                      \
    pos_t i = (pos_t)get_global_id(0);                                              \
    if ((long)i >= (extent))                                                        \
        return;                                                                     \
    UNPOOL_PLANE(get_global_id(2))

/* The sizes of the window gather besides UNPOOL_SIZES: per axis (depth, height, width;
 * 1, 1, 0 on an axis the op lacks) the input's and the output's sides and the window's
 * kernel size, stride and padding. */
#define UNPOOL_WINDOW_SIZES                                                         \
    int ID, int IH, int IW, int OD, int OH, int OW, int kd, int kh, int kw, int sd, \
    int sh, int sw, int pd, int ph, int pw

/* Per axis: the outputs an input is the latest reaching input of, at most (a window's
 * stride; the last input's run reaches the output's end), and the inputs whose windows
 * hold one output, at most. Uniform loop counts: a CPU driver vectorises across
 * work-items. */
#define RUN(n, s, p, O) max((s), (O) - ((n) - 1) * (s) + (p))
#define REACH(k, s) (((k) + (s) - 1) / (s))

/* The end of input o's run of outputs along an axis (of n inputs, O outputs). */
#define RUN_END(o, n, s, p, O) ((o) == (n) - 1 ? (O) : min((o) * (s) - (p) + (s), (O)))

/* Whether output a lies outside input o's window [o * s - p, o * s - p + k). */
#define OUTSIDE(a, o, k, s, p) ((a) < (o) * (s) - (p) || (a) >= (o) * (s) - (p) + (k))

/* The fast path, one work-item per input (dimension 0 its column, 1 its row of depth *
 * height). It writes the outputs it is the latest reaching input of: each the latest
 * input whose window holds it and whose index names it, else 0. That is the unpooling
 * where every index lies in its own input's window (as max_pool's with the same window
 * do). Its index sets flag bit 1 outside the plane, bit 2 outside its window (then the
 * caller runs clear, claim and scatter instead). Planes of fewer than 2^31 elements. */
__kernel void max_unpool_window(__global const elem_t *restrict x,
                                __global const index_t *restrict indices,
                                __global elem_t *restrict out, __global int *restrict flag,
                                UNPOOL_SIZES, UNPOOL_WINDOW_SIZES)
{
    int ow = (int)get_global_id(0), row = (int)get_global_id(1);
    if (ow >= IW || row >= ID * IH)
        return;
    int od = ID == 1 ? 0 : row / IH, oh = row - od * IH;
    UNPOOL_PLANE(get_global_id(2));
    index_t at = indices[IDX_AT(row * IW + ow)];
    if (at < 0 || (long)at >= OP) {
        atomic_or((volatile __global int *)flag, 1);
    } else {
        int a = (int)at, ad = OD == 1 ? 0 : a / (OH * OW), ah = (a - ad * OH * OW) / OW;
        if (OUTSIDE(ad, od, kd, sd, pd) || OUTSIDE(ah, oh, kh, sh, ph) ||
            OUTSIDE(a - (ad * OH + ah) * OW, ow, kw, sw, pw))
            atomic_or((volatile __global int *)flag, 2);
    }
    int d1 = RUN_END(od, ID, sd, pd, OD), h1 = RUN_END(oh, IH, sh, ph, OH);
    int w1 = RUN_END(ow, IW, sw, pw, OW);
    for (int u = 0; u < RUN(ID, sd, pd, OD); ++u)
        for (int v = 0; v < RUN(IH, sh, ph, OH); ++v)
            for (int w = 0; w < RUN(IW, sw, pw, OW); ++w) {
                int jd = od * sd - pd + u, jh = oh * sh - ph + v, jw = ow * sw - pw + w;
                if (jd < 0 || jd >= d1 || jh < 0 || jh >= h1 || jw < 0 || jw >= w1)
                    continue;
                int j = (jd * OH + jh) * OW + jw;
                int found = -1; /* the candidates from the latest, as the later input wins */
                for (int bd = 0; bd < REACH(kd, sd); ++bd) /* inputs back along each axis */
                    for (int bh = 0; bh < REACH(kh, sh); ++bh)
                        for (int bw = 0; bw < REACH(kw, sw); ++bw) {
                            int cd = od - bd, ch = oh - bh, cw = ow - bw;
                            int i = (cd * IH + ch) * IW + cw;
                            if (found < 0 && cd >= 0 && ch >= 0 && cw >= 0 &&
                                cd * sd - pd + kd > jd && ch * sh - ph + kh > jh &&
                                cw * sw - pw + kw > jw && indices[IDX_AT(i)] == j)
                                found = i;
                        }
                if (found < 0)
                    STORE(out, OUT_AT(j), (acc_t)0);
                else
                    COPY_STORE(out, OUT_AT(j), COPY_LOAD(x, IN_AT(found)));
            }
}

/* max_unpool_tile's window (its programs only; 1 in the others). */
#ifndef CLPOOL_UNPOOL_SH
#define CLPOOL_UNPOOL_SD 1
#define CLPOOL_UNPOOL_SH 1
#define CLPOOL_UNPOOL_SW 1
#endif

/* The type COPY_LOAD gives: a bfloat16's bits, else the computed type. */
#if CLPOOL_DTYPE == 17
#define COPY_T elem_t
#else
#define COPY_T acc_t
#endif

/* The fast path where the windows tile the output (kernel size = stride,
 * -DCLPOOL_UNPOOL_SD, _SH and _SW, 1 on an axis the op lacks; no padding): an output's
 * owner is the one input whose window holds it (none past the last window). One
 * work-item per column of owners (dimension 0) and CLPOOL_ROWS rows of them in one depth
 * (dimension 1: the depth's blocks of rows, depth after depth): each output of an owner's
 * window is the owner's value where its index names that output, else 0. Each work-item
 * checks its owners' indices: flag bit 1 outside the plane, bit 2 outside the window
 * (then the caller runs clear, claim and scatter). */
__kernel void max_unpool_tile(__global const elem_t *restrict x,
                              __global const index_t *restrict indices,
                              __global elem_t *restrict out, __global int *restrict flag,
                              UNPOOL_SIZES, int ID, int IH, int IW, int OD, int OH, int OW)
{
    int blocks = ((OH + CLPOOL_UNPOOL_SH - 1) / CLPOOL_UNPOOL_SH + CLPOOL_ROWS - 1) /
                 CLPOOL_ROWS; /* blocks of rows of owners in a depth */
    int ow = (int)get_global_id(0), od = (int)get_global_id(1) / blocks;
    int oh0 = ((int)get_global_id(1) - od * blocks) * CLPOOL_ROWS;
    int jw0 = ow * CLPOOL_UNPOOL_SW, jd0 = od * CLPOOL_UNPOOL_SD;
    if (jw0 >= OW || jd0 >= OD)
        return;
    UNPOOL_PLANE(get_global_id(2));
    index_t at[CLPOOL_ROWS];
    COPY_T v[CLPOOL_ROWS];
    for (int r = 0; r < CLPOOL_ROWS; ++r) { /* the loads first: all in flight at once */
        int oh = oh0 + r, owned = od < ID && oh < IH && ow < IW;
        int i = (od * IH + oh) * IW + ow;
        at[r] = owned ? indices[IDX_AT(i)] : -1;
        v[r] = owned ? COPY_LOAD(x, IN_AT(i)) : (COPY_T)0;
        if (owned && (at[r] < 0 || (long)at[r] >= OP)) {
            atomic_or((volatile __global int *)flag, 1);
        } else if (owned) {
            int d = (int)at[r] - (jd0 * OH + oh * CLPOOL_UNPOOL_SH) * OW - jw0, inside = 0;
            for (int t = 0; t < CLPOOL_UNPOOL_SD && jd0 + t < OD; ++t)
                for (int u = 0; u < CLPOOL_UNPOOL_SH && oh * CLPOOL_UNPOOL_SH + u < OH; ++u) {
                    int e = d - (t * OH + u) * OW; /* the column in row u of depth t */
                    inside |= e >= 0 && e < CLPOOL_UNPOOL_SW && jw0 + e < OW;
                }
            if (!inside)
                atomic_or((volatile __global int *)flag, 2);
        }
    }
    for (int r = 0; r < CLPOOL_ROWS; ++r)
        for (int t = 0; t < CLPOOL_UNPOOL_SD && jd0 + t < OD; ++t)
            for (int u = 0; u < CLPOOL_UNPOOL_SH; ++u) {
                int jh = (oh0 + r) * CLPOOL_UNPOOL_SH + u;
                if (jh >= OH)
                    break;
                for (int e = 0; e < CLPOOL_UNPOOL_SW && jw0 + e < OW; ++e) {
                    int j = ((jd0 + t) * OH + jh) * OW + jw0 + e;
                    if (at[r] == j)
                        COPY_STORE(out, OUT_AT(j), v[r]);
                    else
                        STORE(out, OUT_AT(j), (acc_t)0);
                }
            }
}

/* max_unpool_tile on a CPU where x, the indices and out are channels-last (every view's
 * v_sc 1 and v_step C): one work-item per row of owners of an image (dimension 2: image
 * n's row oh at n * rows + oh) and a run of its channels (dimension 0 splits C evenly).
 * It walks the row's windows output by output, the channels innermost: contiguous loads
 * and stores, which CPU compilers turn into vector loops. Flags as max_unpool_tile's. */
__kernel void max_unpool_tile_rows(__global const elem_t *restrict x,
                                   __global const index_t *restrict indices,
                                   __global elem_t *restrict out, __global int *restrict flag,
                                   UNPOOL_SIZES, int IH, int IW, int OH, int OW)
{
    int rows = (OH + CLPOOL_UNPOOL_SH - 1) / CLPOOL_UNPOOL_SH, oh;
    long n = split_row(get_global_id(2), rows, &oh);
    int runs = get_global_size(0), r = get_global_id(0);
    int c0 = (long)C * r / runs, c1 = (long)C * (r + 1) / runs, bad = 0;
    long in0 = n * in_sn, idx0 = n * idx_sn, out0 = n * out_sn;
    for (int ow = 0; ow * CLPOOL_UNPOOL_SW < OW; ++ow) {
        int owned = oh < IH && ow < IW, jw0 = ow * CLPOOL_UNPOOL_SW;
        long i = (long)oh * IW + ow;
        int c = c0;
#ifndef CLPOOL_NO_LANES16
        for (; owned && c1 - c >= 16; c += 16) { /* 16 at once (PoCL runs the next loop
                                                    one channel at a time: 4x slower) */
            long16 at = convert_long16(vload16(0, indices + IDX_AT(i) + c));
            long16 d = at - ((long)oh * CLPOOL_UNPOOL_SH * OW + jw0), inside = 0;
            for (int u = 0; u < CLPOOL_UNPOOL_SH; ++u) {
                long16 e = d - (long)u * OW;
                inside |= e >= 0 && e < CLPOOL_UNPOOL_SW && e < OW - jw0;
            }
            long16 off = at < 0 || at >= OP;
            bad |= (any(off) ? 1 : 0) | (any(!off && !inside) ? 2 : 0);
        }
#endif
        for (; c < c1 && owned; ++c) { /* the owner's indices: max_unpool_tile's */
            index_t at = indices[IDX_AT(i) + c];
            int d = (int)at - oh * CLPOOL_UNPOOL_SH * OW - jw0, inside = 0;
            for (int u = 0; u < CLPOOL_UNPOOL_SH; ++u) {
                int e = d - u * OW;
                inside |= e >= 0 && e < CLPOOL_UNPOOL_SW && jw0 + e < OW;
            }
            bad |= at < 0 || (long)at >= OP ? 1 : inside ? 0 : 2;
        }
        for (int u = 0; u < CLPOOL_UNPOOL_SH && oh * CLPOOL_UNPOOL_SH + u < OH; ++u)
            for (int e = 0; e < CLPOOL_UNPOOL_SW && jw0 + e < OW; ++e) {
                int j = (oh * CLPOOL_UNPOOL_SH + u) * OW + jw0 + e;
                __global const elem_t *xp = x + IN_AT(i);
                __global const index_t *ip = indices + IDX_AT(i);
                __global elem_t *op = out + OUT_AT(j);
                if (owned) {
                    for (int c = c0; c < c1; ++c)
                        COPY_STORE(op, c, ip[c] == j ? COPY_LOAD(xp, c) : 0);
                } else { /* past the owners */
                    for (int c = c0; c < c1; ++c)
                        STORE(op, c, (acc_t)0);
                }
            }
    }
    if (bad)
        atomic_or((volatile __global int *)flag, bad);
}

/* The CPU's fast path, one work-item per plane: zeros, then each input in order writes
 * at its index (so the later input wins, wherever the indices lie); an index outside
 * the plane is skipped and sets flag bit 1. A dense plane is cleared as one run (Intel's
 * CPU compiler stores it a float at a time through out_step: [8,64,112,112] k2 s2 2.69 ->
 * 1.09 ms). */
__kernel void max_unpool_plane(__global const elem_t *restrict x,
                               __global const index_t *restrict indices,
                               __global elem_t *restrict out, __global int *restrict flag,
                               UNPOOL_SIZES)
{
    UNPOOL_PLANE(get_global_id(0));
    if (out_step == 1)
        for (long o = 0; o < OP; ++o)
            STORE(out, out0 + o, (acc_t)0);
    else
        for (long o = 0; o < OP; ++o)
            STORE(out, OUT_AT(o), (acc_t)0);
    int bad = 0;
    for (long i = 0; i < IP; ++i) {
        index_t at = indices[IDX_AT(i)];
        if (at < 0 || (long)at >= OP)
            bad = 1;
        else
            COPY_STORE(out, OUT_AT(at), COPY_LOAD(x, IN_AT(i)));
    }
    if (bad)
        atomic_or((volatile __global int *)flag, 1);
}

/* out = 0, owner = -1 (no input yet), flag = 0. */
__kernel void max_unpool_clear(__global elem_t *restrict out, __global int *restrict owner,
                               __global int *restrict flag, UNPOOL_SIZES)
{
    UNPOOL_ITEM(o, OP);
    STORE(out, OUT_AT(o), (acc_t)0);
    owner[PLANE_ID() * OP + o] = -1;
    if (o == 0 && PLANE_ID() == 0)
        flag[0] = 0;
}

/* owner[index of input i] = max(itself, i); an index outside the plane raises the flag. */
__kernel void max_unpool_claim(__global const index_t *restrict indices,
                               __global int *restrict owner, __global int *restrict flag,
                               UNPOOL_SIZES)
{
    UNPOOL_ITEM(i, IP);
    index_t at = indices[IDX_AT(i)];
    if (at < 0 || (long)at >= OP)
        atomic_or((volatile __global int *)flag, 1);
    else
        atomic_max((volatile __global int *)owner + PLANE_ID() * OP + at, (int)i);
}

/* out[index of input i] = x[i] where input i owns that output: a copy of its bits, as
 * torch's (COPY_LOAD/COPY_STORE: a bfloat16 NaN keeps its sign and payload). */
__kernel void max_unpool_scatter(__global const elem_t *restrict x,
                                 __global const index_t *restrict indices,
                                 __global const int *restrict owner,
                                 __global elem_t *restrict out, UNPOOL_SIZES)
{
    UNPOOL_ITEM(i, IP);
    index_t at = indices[IDX_AT(i)];
    if (at >= 0 && (long)at < OP && owner[PLANE_ID() * OP + at] == (int)i)
        COPY_STORE(out, OUT_AT(at), COPY_LOAD(x, IN_AT(i)));
}

/* The gradient with respect to the input: grad_x[i] = grad_out[index of i], its bits
 * copied (0 for an index outside the plane). A work-item per run of CLPOOL_GATHER_RUN
 * positions (dimension 0) of channel c (1) of image n (2), the plane's last run its rest;
 * with -DCLPOOL_CHANNELS_INNER, c along dimension 0 and one position i along 1, for
 * indices whose channels interleave. The plane's (n, c) from two dimensions, not split
 * from one: with the division, on this project's CPU under Debian's PoCL, [8,64,112,112]
 * k2 s2: 2.2 against 1.2 ms (BENCHMARKS.md). A CPU's runs are unrolled whatever
 * CLPOOL_UNROLL says: for max_unpool2d_backward of max_pool2d k2 s2 of [8,64,112,112]
 * under Debian's PoCL, runs of 8 left as a loop took 2.3-3.8 ms, unrolled 0.73-0.78. */
#ifndef CLPOOL_GATHER_RUN
#define CLPOOL_GATHER_RUN 1
#endif
#if defined(CLPOOL_CHANNELS_INNER) && CLPOOL_GATHER_RUN != 1
#error "the channels-inner gather copies one position per work-item"
#endif
__kernel void max_unpool_gather(__global const elem_t *restrict grad_out,
                                __global const index_t *restrict indices,
                                __global elem_t *restrict grad_x, UNPOOL_SIZES)
{
#ifdef CLPOOL_CHANNELS_INNER
    int c = get_global_id(0);
    long i0 = get_global_id(1);
#else
    long i0 = (long)get_global_id(0) * CLPOOL_GATHER_RUN;
    int c = get_global_id(1);
#endif
    if (i0 >= IP || c >= C)
        return;
    UNPOOL_STARTS((long)get_global_id(2), c);
    __global const elem_t *gp = grad_out + out0;
    __global const index_t *ip = indices + idx0;
    __global elem_t *xp = grad_x + in0;
#define GATHER(i)                                                                   \
    {                                                                               \
        index_t at = ip[(i) * idx_step];                                            \
        COPY_STORE(xp, (i) * in_step,                                               \
                   at >= 0 && (long)at < OP ? COPY_LOAD(gp, at * out_step) : 0);     \
    }
    if (i0 + CLPOOL_GATHER_RUN <= IP) {
#pragma unroll
        for (int k = 0; k < CLPOOL_GATHER_RUN; ++k)
            GATHER(i0 + k)
    } else {
        for (long i = i0; i < IP; ++i)
            GATHER(i)
    }
#undef GATHER
}
