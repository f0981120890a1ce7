/* Max pooling. A work-item handles one column of CLPOOL_ROWS consecutive rows: the
 * forward loads each input row of their windows once and folds it into every output
 * row it serves; the backward gathers row by row (on the H200 that beat loading each
 * candidate window once for all rows: 713 against 1,161 us on [128,64,128,128] k3 s1). */

/* Fold tap v at `at` into (best, best_i): NaN wins (the last NaN in window order keeps
 * its index, as in PyTorch), ties keep the first element in row-major window order,
 * and the first tap inside the plane sets the index. */
#ifdef CLPOOL_NO_INDICES /* values only: the first tap needs no special case */
#define FOLD_MAX(best, best_i, v, at)                                               \
    if ((v) > (best) || isnan(v))                                                   \
        (best) = (v);
#else
#define FOLD_MAX(best, best_i, v, at)                                               \
    if ((best_i) < 0 || (v) > (best) || isnan(v)) {                                 \
        (best) = (v);                                                               \
        (best_i) = (at);                                                            \
    }
#endif

/* out = max over the window; a window with no element gives -inf and index -1.
 * max_pool2d builds with -DCLPOOL_NO_INDICES and passes a placeholder for `indices`:
 * a null pointer or a run-time flag there made Intel's CPU compiler give up
 * vectorizing (3x slower on this project's CPU, BENCHMARKS.md). */
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
    int oh0 = get_global_id(1) * CLPOOL_ROWS;
    if (oh0 >= OH)
        return;
    long plane = PLANE_ID();
    __global const elem_t *xp = x + plane * H * W;
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
#ifndef CLPOOL_NO_INDICES
        indices[o] = (index_t)best_i[r];
#endif
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
    window_range cols = windows_reaching(iw, 1, W, sw, pw, (kw - 1) * dw + 1, OW);
    FOR_EACH_ROW(ih, H) {
        pos_t self = (pos_t)ih * W + iw;
        window_range rows = windows_reaching(ih, 1, H, sh, ph, (kh - 1) * dh + 1, OH);
        acc_t g = 0;
        for (int a = 0; a < rows.count; ++a) {
            int oh = rows.first + a;
            for (int b = 0; b < cols.count; ++b) {
                int ow = cols.first + b;
                if (oh >= rows.end || ow >= cols.end)
                    continue;
                pos_t o = (pos_t)oh * OW + ow;
                acc_t v = LOAD(gp, o);
                g += ip[o] == self ? v : (acc_t)0;
            }
        }
        STORE(grad_x, plane * H * W + self, g);
    }
}
