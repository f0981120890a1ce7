/* Average pooling, forward (one work-item per output column, CLPOOL_ROWS rows) and
 * backward (one per input column, CLPOOL_ROWS rows). */

__kernel void avg_pool2d_forward(__global const elem_t *restrict x,
                                 __global elem_t *restrict out,
                                 int H, int W, int OH, int OW,
                                 int kh, int kw, int sh, int sw, int ph, int pw,
                                 int count_include_pad, int divisor_override)
{
    int dh = 1, dw = 1;
    FIX_WINDOW();
    int ow = get_global_id(0);
    if (ow >= OW)
        return;
    long plane = PLANE_ID();
    __global const elem_t *xp = x + plane * H * W;
    int ws = ow * sw - pw;
    FOR_EACH_ROW(oh, OH) {
        int hs = oh * sh - ph;
        acc_t sum = 0;
        for (int i = 0; i < kh; ++i) {
            int h = hs + i;
            if (!INSIDE(h, H))
                continue;
            for (int j = 0; j < kw; ++j) {
                int w = ws + j;
                if (INSIDE(w, W))
                    sum += LOAD(xp, (pos_t)h * W + w);
            }
        }
        int div = avg_divisor(hs, ws, kh, kw, H, W, ph, pw, count_include_pad,
                              divisor_override);
        STORE(out, (plane * OH + oh) * OW + ow, sum / (acc_t)div);
    }
}

/* grad_x[i] = sum over the windows containing i of grad_out / that window's divisor.
 * When every window that can contain i lies inside the input, they share one divisor. */
__kernel void avg_pool2d_backward(__global const elem_t *restrict grad_out,
                                  __global elem_t *restrict grad_x,
                                  int H, int W, int OH, int OW,
                                  int kh, int kw, int sh, int sw, int ph, int pw,
                                  int count_include_pad, int divisor_override)
{
    int dh = 1, dw = 1;
    FIX_WINDOW();
    int iw = get_global_id(0);
    if (iw >= W)
        return;
    long plane = PLANE_ID();
    __global const elem_t *gp = grad_out + plane * OH * OW;
    int ow0 = first_window(iw, sw, pw, kw), ow1 = end_window(iw, sw, pw, OW);
    int nh = (kh + sh - 1) / sh, nw = (kw + sw - 1) / sw;
    int cols_inside = ow0 + nw <= ow1 && ow0 * sw >= pw && (ow0 + nw - 1) * sw - pw + kw <= W;
    FOR_EACH_ROW(ih, H) {
        int oh0 = first_window(ih, sh, ph, kh), oh1 = end_window(ih, sh, ph, OH);
        acc_t g = 0;
        if (cols_inside && oh0 + nh <= oh1 && oh0 * sh >= ph
            && (oh0 + nh - 1) * sh - ph + kh <= H) {
            for (int a = 0; a < nh; ++a)
                for (int b = 0; b < nw; ++b)
                    g += LOAD(gp, (pos_t)(oh0 + a) * OW + ow0 + b);
            g /= (acc_t)(divisor_override ? divisor_override : kh * kw);
        } else {
            for (int a = 0; a < nh; ++a) {
                int oh = oh0 + a;
                for (int b = 0; b < nw; ++b) {
                    int ow = ow0 + b;
                    if (oh >= oh1 || ow >= ow1)
                        continue;
                    int div = avg_divisor(oh * sh - ph, ow * sw - pw, kh, kw, H, W, ph, pw,
                                          count_include_pad, divisor_override);
                    g += LOAD(gp, (pos_t)oh * OW + ow) / (acc_t)div;
                }
            }
        }
        STORE(grad_x, plane * H * W + (pos_t)ih * W + iw, g);
    }
}
