/* Average pooling, forward (one work-item per output) and backward (one per input),
 * each with an interior path (no bounds checks, one divisor) and a border path. */

/* Sum of the taps of the window at (hs, ws); `checked` skips taps outside the plane. */
inline acc_t window_sum(__global const elem_t *xp, int hs, int ws, int H, int W,
                        int kh, int kw, int checked)
{
    acc_t sum = 0;
    for (int i = 0; i < kh; ++i) {
        int h = hs + i;
        if (checked && !INSIDE(h, H))
            continue;
        for (int j = 0; j < kw; ++j) {
            int w = ws + j;
            if (!checked || INSIDE(w, W))
                sum += LOAD(xp, (pos_t)h * W + w);
        }
    }
    return sum;
}

__kernel void avg_pool2d_forward(__global const elem_t *x, __global elem_t *out,
                                 int H, int W, int OH, int OW,
                                 int kh, int kw, int sh, int sw, int ph, int pw,
                                 int count_include_pad, int divisor_override)
{
    int dh = 1, dw = 1;
    FIX_WINDOW();
    int ow = get_global_id(0), oh = get_global_id(1);
    if (ow >= OW || oh >= OH)
        return;
    long plane = PLANE_ID();
    __global const elem_t *xp = x + plane * H * W;

    int hs = oh * sh - ph, ws = ow * sw - pw;
    int inside = hs >= 0 && ws >= 0 && hs + kh <= H && ws + kw <= W;
    acc_t sum = inside ? window_sum(xp, hs, ws, H, W, kh, kw, 0)
                       : window_sum(xp, hs, ws, H, W, kh, kw, 1);
    int div = avg_divisor(hs, ws, kh, kw, H, W, ph, pw, count_include_pad, divisor_override);
    STORE(out, (plane * OH + oh) * OW + ow, sum / (acc_t)div);
}

/* grad_x[i] = sum over the windows containing i of grad_out / that window's divisor.
 * When every window that can contain i lies inside the input, they share one divisor. */
__kernel void avg_pool2d_backward(__global const elem_t *grad_out, __global elem_t *grad_x,
                                  int H, int W, int OH, int OW,
                                  int kh, int kw, int sh, int sw, int ph, int pw,
                                  int count_include_pad, int divisor_override)
{
    int dh = 1, dw = 1;
    FIX_WINDOW();
    int iw = get_global_id(0), ih = get_global_id(1);
    if (iw >= W || ih >= H)
        return;
    long plane = PLANE_ID();
    __global const elem_t *gp = grad_out + plane * OH * OW;

    int oh0 = first_window(ih, sh, ph, kh), oh1 = end_window(ih, sh, ph, OH);
    int ow0 = first_window(iw, sw, pw, kw), ow1 = end_window(iw, sw, pw, OW);
    int nh = (kh + sh - 1) / sh, nw = (kw + sw - 1) / sw;
    acc_t g = 0;
    if (oh0 + nh <= oh1 && ow0 + nw <= ow1 && oh0 * sh >= ph && ow0 * sw >= pw
        && (oh0 + nh - 1) * sh - ph + kh <= H && (ow0 + nw - 1) * sw - pw + kw <= W) {
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
