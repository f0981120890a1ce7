/* Max pooling, forward (one work-item per output column, CLPOOL_ROWS rows) and
 * backward (one per input column, CLPOOL_ROWS rows). */

/* out = max over the window: NaN wins (the last NaN in window order keeps its index,
 * as in PyTorch), ties keep the first element in row-major window order, and the
 * first tap inside the plane sets the index. A window with no element gives -inf and
 * index -1. `indices` may be null (max_pool2d). */
__kernel void max_pool2d_forward(__global const elem_t *restrict x,
                                 __global elem_t *restrict out,
                                 __global index_t *restrict indices,
                                 int H, int W, int OH, int OW,
                                 int kh, int kw, int sh, int sw,
                                 int ph, int pw, int dh, int dw)
{
    FIX_WINDOW();
    int ow = get_global_id(0);
    if (ow >= OW)
        return;
    long plane = PLANE_ID();
    __global const elem_t *xp = x + plane * H * W;
    int ws = ow * sw - pw;
    FOR_EACH_ROW(oh, OH) {
        int hs = oh * sh - ph;
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
}

/* grad_x[i] = sum of grad_out over the windows that can contain i and whose index
 * names i. An index naming no element of the plane matches nothing. Gradients are
 * loaded whether they match or not, so that the loads issue together. */
__kernel void max_pool2d_backward(__global const elem_t *restrict grad_out,
                                  __global const index_t *restrict indices,
                                  __global elem_t *restrict grad_x,
                                  int H, int W, int OH, int OW,
                                  int kh, int kw, int sh, int sw,
                                  int ph, int pw, int dh, int dw)
{
    FIX_WINDOW();
    int iw = get_global_id(0);
    if (iw >= W)
        return;
    long plane = PLANE_ID();
    __global const elem_t *gp = grad_out + plane * OH * OW;
    __global const index_t *ip = indices + plane * OH * OW;
    int span_h = (kh - 1) * dh + 1, span_w = (kw - 1) * dw + 1;
    int ow0 = first_window(iw, sw, pw, span_w), ow1 = end_window(iw, sw, pw, OW);
    /* At most ceil(span / s) windows reach a position: a constant when FIX_WINDOW is. */
    int nh = (span_h + sh - 1) / sh, nw = (span_w + sw - 1) / sw;
    FOR_EACH_ROW(ih, H) {
        pos_t self = (pos_t)ih * W + iw;
        int oh0 = first_window(ih, sh, ph, span_h), oh1 = end_window(ih, sh, ph, OH);
        acc_t g = 0;
        for (int a = 0; a < nh; ++a) {
            int oh = oh0 + a;
            for (int b = 0; b < nw; ++b) {
                int ow = ow0 + b;
                if (oh >= oh1 || ow >= ow1)
                    continue;
                pos_t o = (pos_t)oh * OW + ow;
                acc_t v = LOAD(gp, o);
                g += ip[o] == self ? v : (acc_t)0;
            }
        }
        STORE(grad_x, plane * H * W + self, g);
    }
}
