/* Max pooling, forward (one work-item per output) and backward (one per input). */

/* out[o] = max over the window; NaN wins (the last NaN in window order keeps its
 * index, as in PyTorch), ties keep the first element in row-major window order,
 * and the index starts at the first element inside the plane. A window with no
 * element gives -inf and -1. `indices` may be null (max_pool2d). */
__kernel void max_pool2d_forward(__global const elem_t *x, __global elem_t *out,
                                 __global index_t *indices,
                                 int H, int W, int OH, int OW,
                                 int kh, int kw, int sh, int sw,
                                 int ph, int pw, int dh, int dw)
{
    FIX_WINDOW();
    int ow = get_global_id(0), oh = get_global_id(1);
    if (ow >= OW || oh >= OH)
        return;
    long plane = PLANE_ID();
    __global const elem_t *xp = x + plane * H * W;

    int hs = oh * sh - ph, ws = ow * sw - pw;
    acc_t best = -INFINITY;
    pos_t best_i = -1;
    for (int i = 0; i < kh; ++i) {
        int h = hs + i * dh;
        if (!INSIDE(h, H))
            continue;
        for (int j = 0; j < kw; ++j) {
            int w = ws + j * dw;
            if (!INSIDE(w, W))
                continue;
            pos_t at = (pos_t)h * W + w;
            acc_t v = LOAD(xp, at);
            if (best_i < 0 || v > best || isnan(v)) {
                best = v;
                best_i = at;
            }
        }
    }
    long o = (plane * OH + oh) * OW + ow;
    STORE(out, o, best);
    if (indices)
        indices[o] = (index_t)best_i;
}

/* grad_x[i] = sum of grad_out over the windows that can contain i and whose index
 * names i. An index naming no element of the plane matches nothing. */
__kernel void max_pool2d_backward(__global const elem_t *grad_out,
                                  __global const index_t *indices,
                                  __global elem_t *grad_x,
                                  int H, int W, int OH, int OW,
                                  int kh, int kw, int sh, int sw,
                                  int ph, int pw, int dh, int dw)
{
    FIX_WINDOW();
    int iw = get_global_id(0), ih = get_global_id(1);
    if (iw >= W || ih >= H)
        return;
    long plane = PLANE_ID();
    pos_t self = (pos_t)ih * W + iw;
    __global const elem_t *gp = grad_out + plane * OH * OW;
    __global const index_t *ip = indices + plane * OH * OW;

    int span_h = (kh - 1) * dh + 1, span_w = (kw - 1) * dw + 1;
    int oh0 = first_window(ih, sh, ph, span_h), oh1 = end_window(ih, sh, ph, OH);
    int ow0 = first_window(iw, sw, pw, span_w), ow1 = end_window(iw, sw, pw, OW);
    /* At most ceil(span / s) windows reach a position: a constant when FIX_WINDOW does. */
    int nh = (span_h + sh - 1) / sh, nw = (span_w + sw - 1) / sw;
    acc_t g = 0;
    for (int a = 0; a < nh; ++a) {
        int oh = oh0 + a;
        for (int b = 0; b < nw; ++b) {
            int ow = ow0 + b;
            if (oh >= oh1 || ow >= ow1)
                continue;
            pos_t o = (pos_t)oh * OW + ow;
            if (ip[o] == self)
                g += LOAD(gp, o);
        }
    }
    STORE(grad_x, plane * H * W + self, g);
}
