/* Max pooling. A work-item handles one column of CLPOOL_ROWS consecutive rows: the
 * forward loads each input row of their windows once and folds it into every output
 * row it serves; the backward loads each candidate window once for every input row. */

/* Fold tap v at `at` into (best, best_i): NaN wins (the last NaN in window order keeps
 * its index, as in PyTorch), ties keep the first element in row-major window order,
 * and the first tap inside the plane sets the index. */
#define FOLD_MAX(best, best_i, v, at)                                               \
    if ((best_i) < 0 || (v) > (best) || isnan(v)) {                                 \
        (best) = (v);                                                               \
        (best_i) = (at);                                                            \
    }

/* out = max over the window; a window with no element gives -inf and index -1.
 * indices are written when with_indices is set (max_pool2d passes 0 and a placeholder
 * buffer: a null pointer there makes Intel's CPU compiler give up vectorizing). */
__kernel void max_pool2d_forward(__global const elem_t *restrict x,
                                 __global elem_t *restrict out,
                                 __global index_t *restrict indices, int with_indices,
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
    int oh0 = get_global_id(1) * CLPOOL_ROWS;
    int hs = oh0 * sh - ph, ws = ow * sw - pw, span_h = (kh - 1) * dh + 1;

    acc_t best[CLPOOL_ROWS];
    pos_t best_i[CLPOOL_ROWS];
    for (int r = 0; r < CLPOOL_ROWS; ++r) {
        best[r] = -INFINITY;
        best_i[r] = -1;
    }
    for (int t = 0; t < (CLPOOL_ROWS - 1) * sh + span_h; ++t) {
        int h = hs + t;
        if (!INSIDE(h, H))
            continue;
        int tap[CLPOOL_ROWS]; /* is input row h a tap of output row r's window? */
        for (int r = 0; r < CLPOOL_ROWS; ++r)
            tap[r] = t >= r * sh && t - r * sh < span_h && (t - r * sh) % dh == 0;
        for (int j = 0; j < kw; ++j) {
            int w = ws + j * dw;
            if (!INSIDE(w, W))
                continue;
            pos_t at = (pos_t)h * W + w;
            acc_t v = LOAD(xp, at);
            for (int r = 0; r < CLPOOL_ROWS; ++r)
                if (tap[r])
                    FOLD_MAX(best[r], best_i[r], v, at)
        }
    }
    for (int r = 0; r < CLPOOL_ROWS && oh0 + r < OH; ++r) {
        long o = (plane * OH + oh0 + r) * OW + ow;
        STORE(out, o, best[r]);
        if (with_indices)
            indices[o] = (index_t)best_i[r];
    }
}

/* grad_x[i] = sum of grad_out over the windows that can contain i and whose index
 * names i. An index naming no element of the plane matches nothing. */
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
    int ih0 = get_global_id(1) * CLPOOL_ROWS;
    int span_h = (kh - 1) * dh + 1;
    window_range rows = windows_reaching(ih0, CLPOOL_ROWS, H, sh, ph, span_h, OH);
    window_range cols = windows_reaching(iw, 1, W, sw, pw, (kw - 1) * dw + 1, OW);

    acc_t g[CLPOOL_ROWS];
    for (int r = 0; r < CLPOOL_ROWS; ++r)
        g[r] = 0;
    for (int a = 0; a < rows.count; ++a) {
        int oh = rows.first + a, top = oh * sh - ph;
        for (int b = 0; b < cols.count; ++b) {
            int ow = cols.first + b;
            if (oh >= rows.end || ow >= cols.end)
                continue;
            pos_t o = (pos_t)oh * OW + ow;
            index_t named = ip[o];
            acc_t v = LOAD(gp, o);
            for (int r = 0; r < CLPOOL_ROWS; ++r) {
                int ih = ih0 + r;
                if (ih >= top && ih - top < span_h)
                    g[r] += named == (pos_t)ih * W + iw ? v : (acc_t)0;
            }
        }
    }
    for (int r = 0; r < CLPOOL_ROWS && ih0 + r < H; ++r)
        STORE(grad_x, plane * H * W + (pos_t)(ih0 + r) * W + iw, g[r]);
}
