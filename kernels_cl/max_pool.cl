/* Max pooling, forward (one work-item per output) and backward (one per input).
 * Each kernel has an interior path, where every tap lies inside the plane and no
 * bounds are checked, and a border path that checks them; both are one inline
 * function called with `checked` a constant, so each compiles to its own loop. */

/* Fold the taps of the window at (hs, ws) into (best, best_i): NaN wins (the last
 * NaN in window order keeps its index, as in PyTorch), ties keep the first element
 * in row-major window order, and the first tap inside the plane sets the index. */
inline void window_max(__global const elem_t *xp, int hs, int ws, int H, int W,
                       int kh, int kw, int dh, int dw, int checked,
                       acc_t *best, pos_t *best_i)
{
    for (int i = 0; i < kh; ++i) {
        int h = hs + i * dh;
        if (checked && !INSIDE(h, H))
            continue;
        for (int j = 0; j < kw; ++j) {
            int w = ws + j * dw;
            if (checked && !INSIDE(w, W))
                continue;
            pos_t at = (pos_t)h * W + w;
            acc_t v = LOAD(xp, at);
            if ((checked && *best_i < 0) || v > *best || isnan(v)) {
                *best = v;
                *best_i = at;
            }
        }
    }
}

/* out[o] = max over the window; a window with no element gives -inf and index -1.
 * `indices` may be null (max_pool2d). */
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
    pos_t best_i;
    if (hs >= 0 && ws >= 0 && hs + (kh - 1) * dh < H && ws + (kw - 1) * dw < W) {
        best_i = (pos_t)hs * W + ws;
        window_max(xp, hs, ws, H, W, kh, kw, dh, dw, 0, &best, &best_i);
    } else {
        best_i = -1;
        window_max(xp, hs, ws, H, W, kh, kw, dh, dw, 1, &best, &best_i);
    }
    long o = (plane * OH + oh) * OW + ow;
    STORE(out, o, best);
    if (indices)
        indices[o] = (index_t)best_i;
}

/* Sum of grad_out over the candidate windows (oh0.., ow0..) whose index names `self`. */
inline acc_t windows_naming(__global const elem_t *gp, __global const index_t *ip,
                            pos_t self, int oh0, int oh1, int ow0, int ow1,
                            int nh, int nw, int OW, int checked)
{
    acc_t g = 0;
    for (int a = 0; a < nh; ++a) {
        int oh = oh0 + a;
        for (int b = 0; b < nw; ++b) {
            int ow = ow0 + b;
            if (checked && (oh >= oh1 || ow >= ow1))
                continue;
            pos_t o = (pos_t)oh * OW + ow;
            if (ip[o] == self)
                g += LOAD(gp, o);
        }
    }
    return g;
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
    /* At most ceil(span / s) windows reach a position: a constant when FIX_WINDOW is. */
    int nh = (span_h + sh - 1) / sh, nw = (span_w + sw - 1) / sw;
    acc_t g = (oh0 + nh <= oh1 && ow0 + nw <= ow1)
        ? windows_naming(gp, ip, self, oh0, oh1, ow0, ow1, nh, nw, OW, 0)
        : windows_naming(gp, ip, self, oh0, oh1, ow0, ow1, nh, nw, OW, 1);
    STORE(grad_x, plane * H * W + self, g);
}
