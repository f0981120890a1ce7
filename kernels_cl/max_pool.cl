/* Max pooling, forward (one work-item per output) and backward (one per input). */

/* First tap at or after `start` that lies inside [0, size) on a grid of step d. */
inline int first_tap(int start, int d)
{
    return start >= 0 ? start : start + ((-start + d - 1) / d) * d;
}

/* out[o] = max over the window; NaN wins and keeps its index, ties keep the first
 * element in row-major window order. A window with no element gives -inf and -1.
 * `indices` may be null (max_pool2d). */
__kernel void max_pool2d_forward(__global const elem_t *x, __global elem_t *out,
                                 __global index_t *indices,
                                 int H, int W, int OH, int OW,
                                 int kh, int kw, int sh, int sw,
                                 int ph, int pw, int dh, int dw)
{
    int ow = get_global_id(0), oh = get_global_id(1);
    if (ow >= OW || oh >= OH)
        return;
    long plane = PLANE_ID();
    __global const elem_t *xp = x + plane * H * W;

    int hs = oh * sh - ph, ws = ow * sw - pw;
    int h0 = first_tap(hs, dh), w0 = first_tap(ws, dw);
    int h1 = min(hs + (kh - 1) * dh + 1, H), w1 = min(ws + (kw - 1) * dw + 1, W);

    acc_t best = -INFINITY;
    long best_i = (h0 < h1 && w0 < w1) ? (long)h0 * W + w0 : -1;
    for (int h = h0; h < h1; h += dh) {
        long row = (long)h * W;
        for (int w = w0; w < w1; w += dw) {
            acc_t v = LOAD(xp, row + w);
            if (v > best || isnan(v)) {
                best = v;
                best_i = row + w;
            }
        }
    }
    long o = (plane * OH + oh) * OW + ow;
    STORE(out, o, best);
    if (indices)
        indices[o] = (index_t)best_i;
}

/* grad_x[i] = sum of grad_out over the windows that contain i and whose index
 * names i. An index naming no element of the plane matches nothing. */
__kernel void max_pool2d_backward(__global const elem_t *grad_out,
                                  __global const index_t *indices,
                                  __global elem_t *grad_x,
                                  int H, int W, int OH, int OW,
                                  int kh, int kw, int sh, int sw,
                                  int ph, int pw, int dh, int dw)
{
    int iw = get_global_id(0), ih = get_global_id(1);
    if (iw >= W || ih >= H)
        return;
    long plane = PLANE_ID();
    long self = (long)ih * W + iw;
    long obase = plane * OH * OW;

    int oh0 = first_window(ih, sh, ph, (kh - 1) * dh + 1), oh1 = end_window(ih, sh, ph, OH);
    int ow0 = first_window(iw, sw, pw, (kw - 1) * dw + 1), ow1 = end_window(iw, sw, pw, OW);
    acc_t g = 0;
    for (int oh = oh0; oh < oh1; ++oh) {
        for (int ow = ow0; ow < ow1; ++ow) {
            long o = obase + (long)oh * OW + ow;
            if ((long)indices[o] == self)
                g += LOAD(grad_out, o);
        }
    }
    STORE(grad_x, plane * H * W + self, g);
}
