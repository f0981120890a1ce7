/* Average pooling, forward (one work-item per output) and backward (one per input). */

__kernel void avg_pool2d_forward(__global const elem_t *x, __global elem_t *out,
                                 int H, int W, int OH, int OW,
                                 int kh, int kw, int sh, int sw, int ph, int pw,
                                 int count_include_pad, int divisor_override)
{
    int ow = get_global_id(0), oh = get_global_id(1);
    if (ow >= OW || oh >= OH)
        return;
    long plane = PLANE_ID();
    __global const elem_t *xp = x + plane * H * W;

    int hs = oh * sh - ph, ws = ow * sw - pw;
    int h0 = max(hs, 0), w0 = max(ws, 0);
    int h1 = min(hs + kh, H), w1 = min(ws + kw, W);
    acc_t sum = 0;
    for (int h = h0; h < h1; ++h) {
        long row = (long)h * W;
        for (int w = w0; w < w1; ++w)
            sum += LOAD(xp, row + w);
    }
    int div = avg_divisor(hs, ws, kh, kw, H, W, ph, pw, count_include_pad, divisor_override);
    STORE(out, (plane * OH + oh) * OW + ow, sum / (acc_t)div);
}

/* grad_x[i] = sum over the windows containing i of grad_out / that window's divisor. */
__kernel void avg_pool2d_backward(__global const elem_t *grad_out, __global elem_t *grad_x,
                                  int H, int W, int OH, int OW,
                                  int kh, int kw, int sh, int sw, int ph, int pw,
                                  int count_include_pad, int divisor_override)
{
    int iw = get_global_id(0), ih = get_global_id(1);
    if (iw >= W || ih >= H)
        return;
    long plane = PLANE_ID();
    __global const elem_t *gp = grad_out + plane * OH * OW;

    int oh0 = first_window(ih, sh, ph, kh), oh1 = end_window(ih, sh, ph, OH);
    int ow0 = first_window(iw, sw, pw, kw), ow1 = end_window(iw, sw, pw, OW);
    acc_t g = 0;
    for (int oh = oh0; oh < oh1; ++oh) {
        for (int ow = ow0; ow < ow1; ++ow) {
            int div = avg_divisor(oh * sh - ph, ow * sw - pw, kh, kw, H, W, ph, pw,
                                  count_include_pad, divisor_override);
            g += LOAD(gp, (long)oh * OW + ow) / (acc_t)div;
        }
    }
    STORE(grad_x, plane * H * W + (long)ih * W + iw, g);
}
