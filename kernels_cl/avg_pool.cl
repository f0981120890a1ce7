/* Average pooling. A work-item handles one column of CLPOOL_ROWS consecutive rows: the
 * forward loads each input row of their windows once and adds it to every output row
 * it serves; the backward loads each candidate window (and its divisor) once for
 * every input row. */

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
    int oh0 = get_global_id(1) * CLPOOL_ROWS;
    if (oh0 >= OH)
        return;
    long plane = PLANE_ID();
    __global const elem_t *xp = x + plane * H * W;
    int hs = oh0 * sh - ph, ws = ow * sw - pw;

    acc_t sum[CLPOOL_ROWS];
    for (int r = 0; r < CLPOOL_ROWS; ++r)
        sum[r] = 0;
    for (int t = 0; t < (CLPOOL_ROWS - 1) * sh + kh; ++t) {
        int h = hs + t;
        if (!INSIDE(h, H))
            continue;
        acc_t row = 0;
        for (int j = 0; j < kw; ++j) {
            int w = ws + j;
            if (INSIDE(w, W))
                row += LOAD(xp, (pos_t)h * W + w);
        }
        for (int r = 0; r < CLPOOL_ROWS; ++r)
            if (t >= r * sh && t - r * sh < kh)
                sum[r] += row;
    }
    for (int r = 0; r < CLPOOL_ROWS && oh0 + r < OH; ++r) {
        pos_t div = avg_divisor(hs + r * sh, ws, kh, kw, H, W, ph, pw, count_include_pad,
                                divisor_override);
        STORE(out, (plane * OH + oh0 + r) * OW + ow, sum[r] / (acc_t)div);
    }
}

/* grad_x[i] = sum over the windows containing i of grad_out / that window's divisor. */
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
    int ih0 = get_global_id(1) * CLPOOL_ROWS;
    window_range rows = windows_reaching(ih0, CLPOOL_ROWS, H, sh, ph, kh, OH);
    window_range cols = windows_reaching(iw, 1, W, sw, pw, kw, OW);

    acc_t g[CLPOOL_ROWS];
    for (int r = 0; r < CLPOOL_ROWS; ++r)
        g[r] = 0;
    for (int a = 0; a < rows.count; ++a) {
        int oh = rows.first + a, top = oh * sh - ph;
        acc_t row = 0; /* this window row's share for every input row it covers */
        for (int b = 0; b < cols.count; ++b) {
            int ow = cols.first + b;
            if (oh >= rows.end || ow >= cols.end)
                continue;
            row += LOAD(gp, (pos_t)oh * OW + ow)
                   / (acc_t)avg_divisor(top, ow * sw - pw, kh, kw, H, W, ph, pw,
                                        count_include_pad, divisor_override);
        }
        for (int r = 0; r < CLPOOL_ROWS; ++r)
            if (ih0 + r >= top && ih0 + r - top < kh)
                g[r] += row;
    }
    for (int r = 0; r < CLPOOL_ROWS && ih0 + r < H; ++r)
        STORE(grad_x, plane * H * W + (pos_t)(ih0 + r) * W + iw, g[r]);
}
