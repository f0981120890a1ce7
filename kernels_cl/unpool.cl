/* Max unpooling in 1-D, 2-D and 3-D: planes are flat, IP input positions and OP output
 * positions each, and indices are flat in the output plane. One work-item per element,
 * dimension 0 along the plane (coalesced loads of x and indices), dimension 2 the
 * (batch, channel) planes. Where two inputs name one output, the later input wins, as on
 * PyTorch's CPU: an owner map holds, per output, the largest input position that names
 * it (atomic_max on 32-bit ints, core OpenCL 1.1), and only that input writes. An index
 * outside [0, OP) is skipped and sets flag[0]. */

#include "clpool.h"

/* The sizes every unpooling kernel takes: the input's and the output's plane sizes. */
#define UNPOOL_SIZES                                                                \
    long IP, long OP

/* Declares the work-item's position i in its plane and the plane's first input and
 * output offsets (64-bit), and returns past the plane's `extent`. */
#define UNPOOL_ITEM(i, extent)                                                      \
    pos_t i = (pos_t)get_global_id(0);                                              \
    if ((long)i >= (extent))                                                        \
        return;                                                                     \
    long in0 = PLANE_ID() * IP, out0 = PLANE_ID() * OP

/* out = 0, owner = -1 (no input yet), flag = 0. */
__kernel void max_unpool_clear(__global elem_t *restrict out, __global int *restrict owner,
                               __global int *restrict flag, UNPOOL_SIZES)
{
    UNPOOL_ITEM(o, OP);
    (void)in0;
    STORE(out, out0 + o, (acc_t)0);
    owner[out0 + o] = -1;
    if (o == 0 && PLANE_ID() == 0)
        flag[0] = 0;
}

/* owner[index of input i] = max(itself, i); an index outside the plane raises the flag. */
__kernel void max_unpool_claim(__global const index_t *restrict indices,
                               __global int *restrict owner, __global int *restrict flag,
                               UNPOOL_SIZES)
{
    UNPOOL_ITEM(i, IP);
    index_t at = indices[in0 + i];
    if (at < 0 || (long)at >= OP)
        atomic_or((volatile __global int *)flag, 1);
    else
        atomic_max((volatile __global int *)owner + out0 + at, (int)i);
}

/* out[index of input i] = x[i] where input i owns that output: a copy of its bits, as
 * torch's (COPY_LOAD/COPY_STORE: a bfloat16 NaN keeps its sign and payload). */
__kernel void max_unpool_scatter(__global const elem_t *restrict x,
                                 __global const index_t *restrict indices,
                                 __global const int *restrict owner,
                                 __global elem_t *restrict out, UNPOOL_SIZES)
{
    UNPOOL_ITEM(i, IP);
    index_t at = indices[in0 + i];
    if (at >= 0 && (long)at < OP && owner[out0 + at] == (int)i)
        COPY_STORE(out, out0 + at, COPY_LOAD(x, in0 + i));
}

/* The gradient with respect to the input: grad_x[i] = grad_out[index of i], its bits
 * copied (0 for an index outside the plane). */
__kernel void max_unpool_gather(__global const elem_t *restrict grad_out,
                                __global const index_t *restrict indices,
                                __global elem_t *restrict grad_x, UNPOOL_SIZES)
{
    UNPOOL_ITEM(i, IP);
    (void)out0;
    index_t at = indices[in0 + i];
    if (at >= 0 && (long)at < OP)
        COPY_STORE(grad_x, in0 + i, COPY_LOAD(grad_out, out0 + at));
    else
        STORE(grad_x, in0 + i, (acc_t)0);
}
