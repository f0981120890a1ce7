/* clpool shared header: storage and accumulation types, loads and stores, and
 * the window arithmetic every family uses. OpenCL C 1.2, no extensions needed
 * except cl_khr_fp64 for double.
 *
 * Build options:
 *   -DCLPOOL_DTYPE=16|17|32|64   element type in memory: half or bfloat16 (both
 *                             computed in float), float or double. bfloat16 (17: 16 bits,
 *                             the second such type) is stored as ushort: loads shift it
 *                             into a float's high bits, stores round to nearest even as
 *                             torch's c10::BFloat16 does (below)
 *   -DCLPOOL_INDEX=32|64      index type of max pooling: int or long
 *   -DCLPOOL_ROWS=n           rows per work-item (below)
 *   -DCLPOOL_COLS=n           columns per work-item of the windowed kernels (below)
 *   -DCLPOOL_LARGE_PLANE      64-bit offsets and areas inside a plane (below)
 *   -DCLPOOL_KH=.. .. -DCLPOOL_DW=..   window sizes as constants (below)
 *   -DCLPOOL_UNROLL           unroll the loops over such a window (below)
 *   -DCLPOOL_PH=.. -DCLPOOL_PW=..   the padding as constants too, with the window's (below)
 *   -DCLPOOL_VEC4             forward rows as vload4 chunks (below; needs the padding as
 *                             constants: the 3-D forwards take it from -DCLPOOL_3D_PW..)
 *   -DCLPOOL_VEC8             bfloat16: those chunks 8 elements long (below)
 *   -DCLPOOL_PACK=2|4         bfloat16, float32: tile rows stored 2 or 4 at a time (STORE_COLS)
 *   -DCLPOOL_INDEX_PAIRS      a tile row's indices stored 2 at a time (STORE_INDEX_COLS)
 *   -DCLPOOL_NO_INDICES       max_pool2d: values only (max_pool.cl)
 *   -DCLPOOL_NAN_APART        max_pool2d's values on a GPU, planes of one row (max_pool.cl)
 *   -DCLPOOL_LARGE_CELLS      adaptive cell bounds in 64-bit division (below)
 *   -DCLPOOL_MAX_LANES=4|16   a CPU's adaptive max forward, 4 or 16 columns at a time
 *                             (adaptive_max_pool.cl; 16 never with -DCLPOOL_NO_LANES16)
 *   -DCLPOOL_NO_LANES16       no 16-lane vector code at all: the per-plane CPU kernels
 *                             take one output (and store one element) at a time, and
 *                             adaptive_avg_pool2d_plane sums in 4-lane vectors. For PoCL 3.0
 *                             (LLVM 14) on AVX-512 CPUs, which crashes building 16-lane
 *                             vectors element by element (SLP vectorizer SIGSEGV, "Do not
 *                             know how to scalarize"), and for every GPU, whose kernels
 *                             take none of the 16-lane paths (it held their registers).
 *                             The same sums in the same order.
 */
#ifndef CLPOOL_DTYPE
#define CLPOOL_DTYPE 32
#endif

#if CLPOOL_DTYPE == 16
typedef half elem_t;
typedef float acc_t;
typedef float4 acc4_t;
typedef float16 acc16_t;
#define LOAD(p, i) vload_half((i), (p))
#define LOAD4(p, i) vload_half4(0, (p) + (i))
#define LOAD16(p, i) vload_half16(0, (p) + (i))
#define STORE(p, i, v) vstore_half_rte((v), (i), (p))
#define STORE16(p, i, v) vstore_half16_rte((v), 0, (p) + (i))
#elif CLPOOL_DTYPE == 17
typedef ushort elem_t;
typedef float acc_t;
typedef float4 acc4_t;
typedef float16 acc16_t;
/* The bfloat16 (the high 16 bits of a float) nearest x, ties to even: c10::BFloat16's
 * round_to_nearest_even bit for bit, so every NaN becomes the quiet NaN 0x7FC0 (as in torch
 * CPU's pooling results) and values past the largest bfloat16 round to inf. */
#define BF16_NAN 0x7FC0u
inline ushort bf16_round(float x)
{
    uint u = as_uint(x);
    return isnan(x) ? (ushort)BF16_NAN : (ushort)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
inline ushort16 bf16_round16(float16 x)
{
    uint16 u = as_uint16(x);
    uint16 r = select((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16, (uint16)BF16_NAN, isnan(x));
    return convert_ushort16(r);
}
#define LOAD(p, i) as_float((uint)(p)[i] << 16)
#define LOAD4(p, i) as_float4(convert_uint4(vload4(0, (p) + (i))) << 16)
#define LOAD16(p, i) as_float16(convert_uint16(vload16(0, (p) + (i))) << 16)
#define STORE(p, i, v) ((p)[i] = bf16_round(v))
#define STORE16(p, i, v) vstore16(bf16_round16(v), 0, (p) + (i))
/* p[i .. i + 7] as one 16-byte load, i a multiple of 8 (the bfloat16 pairs of a uint are
 * its low and high halves). */
inline float8 bf16_unpack8(uint4 q)
{
    const uint hi = 0xFFFF0000u;
    return as_float8((uint8)(q.x << 16, q.x & hi, q.y << 16, q.y & hi,
                             q.z << 16, q.z & hi, q.w << 16, q.w & hi));
}
#define LOAD8(p, i) bf16_unpack8(vload4(0, (__global const uint *)((p) + (i))))
/* The contiguous copy moves the 16 bits as they are. */
#define COPY_LOAD(p, i) ((p)[i])
#define COPY_STORE(p, i, v) ((p)[i] = (v))
#elif CLPOOL_DTYPE == 64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double elem_t;
typedef double acc_t;
typedef double4 acc4_t;
typedef double16 acc16_t;
#define LOAD(p, i) ((p)[i])
#define LOAD4(p, i) vload4(0, (p) + (i))
#define LOAD16(p, i) vload16(0, (p) + (i))
#define STORE(p, i, v) ((p)[i] = (v))
#define STORE16(p, i, v) vstore16((v), 0, (p) + (i))
#else
typedef float elem_t;
typedef float acc_t;
typedef float4 acc4_t;
typedef float16 acc16_t;
#define LOAD(p, i) ((p)[i])
#define LOAD4(p, i) vload4(0, (p) + (i))
#define LOAD16(p, i) vload16(0, (p) + (i))
#define STORE(p, i, v) ((p)[i] = (v))
#define STORE16(p, i, v) vstore16((v), 0, (p) + (i))
#endif

/* index_t: max pooling's indices; uindex_t: their unsigned twin, for the offset of an
 * index from a backward tile's first element (any index, no overflow). */
#if CLPOOL_INDEX == 32
typedef int index_t;
typedef int2 index2_t;
typedef int16 index16_t;
typedef uint uindex_t;
#define STORE_INDEX16(p, i, v) vstore16(convert_int16(v), 0, (p) + (i))
#else
typedef long index_t;
typedef long2 index2_t;
typedef long16 index16_t;
typedef ulong uindex_t;
#define STORE_INDEX16(p, i, v) vstore16(convert_long16(v), 0, (p) + (i))
#endif

/* Max pooling's result at element `at`: the value in out and, unless -DCLPOOL_NO_INDICES
 * (then `indices` is a placeholder, never written), its index in indices. */
#ifdef CLPOOL_NO_INDICES
#define STORE_MAX(out, indices, at, best, best_i) ((void)(best_i), STORE(out, at, best))
#else
#define STORE_MAX(out, indices, at, best, best_i)                                     \
    (STORE(out, at, best), (indices)[at] = (index_t)(best_i))
#endif

/* Offsets and areas inside one (H, W) plane: 32-bit unless the host passes
 * -DCLPOOL_LARGE_PLANE for a plane or a window of 2^31 elements or more. Plane offsets
 * are always 64-bit, so tensors of more than 2^31 elements index correctly. */
#ifdef CLPOOL_LARGE_PLANE
typedef long pos_t;
typedef long16 pos16_t;
#define AS_POS16(v) convert_long16(v)
#else
typedef int pos_t;
typedef int16 pos16_t;
#define AS_POS16(v) convert_int16(v)
#endif
#define POS16_STEPS ((pos16_t)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))

/* Work-item layout of the elementwise kernels: dimension 0 walks the columns,
 * 1 the rows, 2 the (batch, channel) planes. A work-item takes CLPOOL_ROWS consecutive
 * rows, and the windowed kernels also CLPOOL_COLS consecutive columns: more loads in
 * flight, input shared by neighbouring windows loaded once, and less index arithmetic
 * per element (two columns took 20-40% off most kernels on the H200, BENCHMARKS.md). */
#ifndef CLPOOL_ROWS
#define CLPOOL_ROWS 1
#endif
#ifndef CLPOOL_COLS
#define CLPOOL_COLS 1
#endif
#define PLANE_ID() ((long)get_global_id(2))
/* The first of this work-item's `per_item` positions along dimension `dim`, or `size`
 * where that lies past an axis of `size`. In uint: the host launches at most a work-group
 * of items past the axis, so the product stays below 2^32 where an int would overflow. */
inline int tile_start(uint dim, int per_item, int size)
{
    return (int)min((uint)get_global_id(dim) * (uint)per_item, (uint)size);
}
/* Declares (oh0, ow0), the first output of this work-item's tile in a windowed forward
 * kernel, and returns from the kernel when the tile lies past the output. */
#define FORWARD_TILE(oh0, ow0, OH, OW)                                                \
    int ow0 = tile_start(0, CLPOOL_COLS, OW), oh0 = tile_start(1, CLPOOL_ROWS, OH);   \
    if (ow0 >= (OW) || oh0 >= (OH))                                                   \
        return
/* row < rows, so ++row cannot overflow. */
#define FOR_EACH_ROW(row, rows)                                                   \
    for (int row_k_ = 0, row = tile_start(1, CLPOOL_ROWS, rows);                  \
         row_k_ < CLPOOL_ROWS && row < (rows); ++row_k_, ++row)

/* Window sizes are kernel arguments; with -DCLPOOL_KH=.. -DCLPOOL_KW=.. -DCLPOOL_SH=..
 * -DCLPOOL_SW=.. -DCLPOOL_DH=.. -DCLPOOL_DW=.. they become compile-time constants,
 * so the loops over the window unroll and their loads issue together; the padding too
 * with -DCLPOOL_PH=.. -DCLPOOL_PW=.. (the host's choice on GPUs), which a backward tile's
 * walk needs to fold (windows_of_tile). */
#ifdef CLPOOL_KH
#ifdef CLPOOL_PH
#define FIX_PADDING() (ph = CLPOOL_PH, pw = CLPOOL_PW)
#else
#define FIX_PADDING() ((void)0)
#endif
#define FIX_WINDOW() (kh = CLPOOL_KH, kw = CLPOOL_KW, sh = CLPOOL_SH, sw = CLPOOL_SW, \
                      dh = CLPOOL_DH, dw = CLPOOL_DW, FIX_PADDING())
#else
#define FIX_WINDOW() ((void)0)
#endif
/* Loops over a window or a tile have constant trip counts then; with -DCLPOOL_UNROLL (the
 * host's choice on GPUs) they all unroll, so that NVIDIA's compiler resolves every tap
 * test at build time (without it some tiles ran 2-6x slower on the H200, BENCHMARKS.md).
 * CPU compilers pick their own unrolling, and build much faster without the pragma. The
 * 3-D kernels' constants are -DCLPOOL_3D_KD.. (pool3d.cl). */
#if (defined(CLPOOL_KH) || defined(CLPOOL_3D_KD)) && defined(CLPOOL_UNROLL)
#define UNROLL _Pragma("unroll")
#define UNROLLED 1
#else
#define UNROLL
#define UNROLLED 0
#endif
/* A forward tile's loop over the offsets of its input along an axis runs over every offset
 * (a constant trip count: it unrolls, and its tap tests fold) where the window sizes are
 * constants and the tile spans fewer than SHORT_SPAN offsets; otherwise only over those
 * that taps_inside() gives. */
#define SHORT_SPAN 256
#ifdef CLPOOL_KH
#define SHORT_ROWS ((CLPOOL_ROWS - 1) * CLPOOL_SH + (CLPOOL_KH - 1) * CLPOOL_DH < SHORT_SPAN)
#else
#define SHORT_ROWS 0
#endif
/* The width axis' window sizes where they are constants: the 2-D kernels' or the 3-D
 * kernels' (-DCLPOOL_3D_KW.., pool3d.cl); ROW_PW only where the padding is one too. */
#if defined(CLPOOL_KH)
#define ROW_KW CLPOOL_KW
#define ROW_SW CLPOOL_SW
#define ROW_DW CLPOOL_DW
#define ROW_PW CLPOOL_PW
#elif defined(CLPOOL_3D_KD)
#define ROW_KW CLPOOL_3D_KW
#define ROW_SW CLPOOL_3D_SW
#define ROW_DW CLPOOL_3D_DW
#define ROW_PW CLPOOL_3D_PW
#endif
#ifdef ROW_KW
#define SHORT_COLS ((CLPOOL_COLS - 1) * ROW_SW + (ROW_KW - 1) * ROW_DW < SHORT_SPAN)
#else
#define SHORT_COLS 0
#endif

/* Rows of a forward tile's input (2-D, and the 3-D walk of pool3d.cl). A work-item reads
 * columns ws .. ws + TILE_SPAN_W - 1 of each row it needs. With -DCLPOOL_VEC4 (window sizes
 * and padding as constants, W % 4 == 0 and CLPOOL_COLS * ROW_SW % 4 == 0, so that ws % 4 is
 * the constant VEC4_LEAD) it loads them as aligned vload4 chunks into seg[] first, each
 * chunk wholly inside the row or wholly outside it: a quarter of the load instructions (on
 * the H200, max k3 s1 [128,64,128,128]: 552 -> 334 us; max_pool3d k3 s2 [8,64,16,56,56]:
 * 51.6 -> 48.0 us). ROW_VALUE(u) is column ws + u of row h. bfloat16 with
 * -DCLPOOL_VEC8 as well (W % 8 == 0, CLPOOL_COLS * ROW_SW % 8 == 0) loads chunks of 8,
 * as many bytes as a float's vload4 (LOAD8; k3 s2 [128,64,128,128], tile (2, 4): avg
 * 121 -> 109 us, BENCHMARKS.md). */
#if defined(CLPOOL_VEC4) && SHORT_COLS
#ifdef CLPOOL_VEC8
#define VEC_N 8
#else
#define VEC_N 4
#endif
#define TILE_SPAN_W ((CLPOOL_COLS - 1) * ROW_SW + (ROW_KW - 1) * ROW_DW + 1)
#define VEC4_LEAD ((VEC_N - ROW_PW % VEC_N) % VEC_N)
#define VEC4_CHUNKS ((VEC4_LEAD + TILE_SPAN_W + VEC_N - 1) / VEC_N)
#ifdef CLPOOL_VEC8
#define LOAD_ROW(seg, xp, h, W, ws)                                                   \
    acc_t seg[VEC4_CHUNKS * 8];                                                       \
    UNROLL for (int k_ = 0; k_ < VEC4_CHUNKS; ++k_) {                                 \
        int w_ = (ws) - VEC4_LEAD + 8 * k_;                                           \
        float8 v_ = INSIDE(w_, W) ? LOAD8(xp, (pos_t)(h) * (W) + w_) : (float8)0;     \
        seg[8 * k_] = v_.s0;                                                          \
        seg[8 * k_ + 1] = v_.s1;                                                      \
        seg[8 * k_ + 2] = v_.s2;                                                      \
        seg[8 * k_ + 3] = v_.s3;                                                      \
        seg[8 * k_ + 4] = v_.s4;                                                      \
        seg[8 * k_ + 5] = v_.s5;                                                      \
        seg[8 * k_ + 6] = v_.s6;                                                      \
        seg[8 * k_ + 7] = v_.s7;                                                      \
    }
#else
#define LOAD_ROW(seg, xp, h, W, ws)                                                   \
    acc_t seg[VEC4_CHUNKS * 4];                                                       \
    UNROLL for (int k_ = 0; k_ < VEC4_CHUNKS; ++k_) {                                 \
        int w_ = (ws) - VEC4_LEAD + 4 * k_;                                           \
        acc4_t v_ = INSIDE(w_, W) ? LOAD4(xp, (pos_t)(h) * (W) + w_) : (acc4_t)0;     \
        seg[4 * k_] = v_.x;                                                           \
        seg[4 * k_ + 1] = v_.y;                                                       \
        seg[4 * k_ + 2] = v_.z;                                                       \
        seg[4 * k_ + 3] = v_.w;                                                       \
    }
#endif
#define ROW_VALUE(seg, xp, h, W, ws, u) (seg[VEC4_LEAD + (u)])
#else
#define LOAD_ROW(seg, xp, h, W, ws)
#define ROW_VALUE(seg, xp, h, W, ws, u) LOAD(xp, (pos_t)(h) * (W) + (ws) + (u))
#endif

/* p[i .. i + n - 1] = v[0 .. n - 1] (n <= CLPOOL_COLS): a tile row's stores. With
 * -DCLPOOL_PACK=2|4 (bfloat16 and float32, on a GPU; the host's choice where i and n are
 * always multiples of it, and it divides CLPOOL_COLS) every 2 or 4 as one store of 32 to
 * 128 bits: 16-bit stores made the bfloat16 backward ops slower than float32's on the H200,
 * and float32's took 4-10% longer one by one (BENCHMARKS.md). */
#if CLPOOL_DTYPE == 17 && defined(CLPOOL_PACK)
#define BF16_PAIR(v, c) ((uint)bf16_round(v[c]) | (uint)bf16_round(v[(c) + 1]) << 16)
#if CLPOOL_PACK == 4
#define STORE_PACK(p, i, v, c) \
    (*(__global uint2 *)((p) + (i)) = (uint2)(BF16_PAIR(v, c), BF16_PAIR(v, (c) + 2)))
#else
#define STORE_PACK(p, i, v, c) (*(__global uint *)((p) + (i)) = BF16_PAIR(v, c))
#endif
#elif CLPOOL_DTYPE == 32 && defined(CLPOOL_PACK)
#if CLPOOL_PACK == 4
#define STORE_PACK(p, i, v, c) \
    (*(__global float4 *)((p) + (i)) = (float4)(v[c], v[(c) + 1], v[(c) + 2], v[(c) + 3]))
#else
#define STORE_PACK(p, i, v, c) (*(__global float2 *)((p) + (i)) = (float2)(v[c], v[(c) + 1]))
#endif
#endif
#ifdef STORE_PACK
#define STORE_COLS(p, i, v, n)                                                        \
    UNROLL for (int c_ = 0; c_ < CLPOOL_COLS; c_ += CLPOOL_PACK)                      \
        if (c_ < (n))                                                                 \
            STORE_PACK(p, (i) + c_, v, c_);
#else
#define STORE_COLS(p, i, v, n)                                                        \
    for (int c_ = 0; c_ < CLPOOL_COLS && c_ < (n); ++c_)                              \
        STORE(p, (i) + c_, v[c_]);
#endif

/* A tile row's values as STORE_COLS stores them (stored_t words[STORED_WORDS]), for a row
 * stored many times over: FIX_COLS(words, v) rounds and packs once, STORE_FIXED(p, i,
 * words, n) stores. */
#if CLPOOL_DTYPE == 17 && defined(CLPOOL_PACK)
typedef uint stored_t;
#define STORED_WORDS (CLPOOL_COLS / 2)
#define FIX_COLS(w, v)                                                                \
    for (int k_ = 0; k_ < STORED_WORDS; ++k_)                                         \
        w[k_] = BF16_PAIR(v, 2 * k_);
#if CLPOOL_PACK == 4
#define STORE_WORDS(p, i, w, c) \
    (*(__global uint2 *)((p) + (i)) = (uint2)(w[(c) / 2], w[(c) / 2 + 1]))
#else
#define STORE_WORDS(p, i, w, c) (*(__global uint *)((p) + (i)) = w[(c) / 2])
#endif
#define STORE_FIXED(p, i, w, n)                                                       \
    UNROLL for (int c_ = 0; c_ < CLPOOL_COLS; c_ += CLPOOL_PACK)                      \
        if (c_ < (n))                                                                 \
            STORE_WORDS(p, (i) + c_, w, c_);
#else
typedef acc_t stored_t;
#define STORED_WORDS CLPOOL_COLS
#define FIX_COLS(w, v)                                                                \
    for (int k_ = 0; k_ < CLPOOL_COLS; ++k_)                                          \
        w[k_] = v[k_];
#define STORE_FIXED(p, i, w, n) STORE_COLS(p, i, w, n)
#endif

/* indices p[i .. i + n - 1] = v[0 .. n - 1] (n <= CLPOOL_COLS): STORE_COLS for a tile
 * row's indices. With -DCLPOOL_INDEX_PAIRS (on a GPU; the host's choice where i, n and
 * CLPOOL_COLS are always even) every 2 as one 8- or 16-byte store (on the H200,
 * max_pool2d_with_indices k3 s2 of [128,64,128,128]: float32 at (2, 4) 305.1 -> 256.5
 * us, bfloat16 at (1, 4) 178.7 -> 159.6). */
#ifdef CLPOOL_INDEX_PAIRS
#define STORE_INDEX_COLS(p, i, v, n)                                                  \
    UNROLL for (int c_ = 0; c_ < CLPOOL_COLS; c_ += 2)                                \
        if (c_ < (n))                                                                 \
            *(__global index2_t *)((p) + (i) + c_) =                                  \
                (index2_t)((index_t)v[c_], (index_t)v[c_ + 1]);
#else
#define STORE_INDEX_COLS(p, i, v, n)                                                  \
    for (int c_ = 0; c_ < CLPOOL_COLS && c_ < (n); ++c_)                              \
        (p)[(i) + c_] = (index_t)v[c_];
#endif

/* True when 0 <= i < n. */
#define INSIDE(i, n) ((uint)(i) < (uint)(n))

/* True when offset u, counted from the first window of a work-item's tile along an axis,
 * is a tap of the tile's window k (stride s, extent span, dilation d). */
#define TAP(u, k, s, span, d) \
    ((u) >= (k) * (s) && (u) - (k) * (s) < (span) && ((u) - (k) * (s)) % (d) == 0)

/* True when offset u is a tap of any of the tile's first n windows along that axis. */
inline int any_tap(int u, int n, int s, int span, int d)
{
    int tapped = 0;
    for (int k = 0; k < n; ++k)
        tapped |= TAP(u, k, s, span, d);
    return tapped;
}

/* The taps i, first <= i < end, of a window starting at `start` (k taps, dilation d) that
 * lie inside an axis of `size`: ceil(-start / d) and min(k, floor((size - 1 - start) / d)
 * + 1), dividing only at the axis' edges; none (first >= end) where the window misses it. */
inline int2 taps_within(int start, int k, int d, int size)
{
    if (start >= size)
        return (int2)(0, 0);
    int first = start < 0 ? (-start - 1) / d + 1 : 0;
    int end = start + (k - 1) * d < size ? k : (size - 1 - start) / d + 1;
    return (int2)(first, end);
}

/* The offsets u, counted from `start`, the first input position of a tile's n windows
 * along an axis (stride s, k taps, dilation d), that can be taps inside the axis of
 * `size`: from `first` up to `end`, `step` apart; first >= end where there are none. One
 * window (n, a constant, is 1): its taps inside the axis. Several: the offsets inside the
 * axis, where the caller skips those no window taps (a dilation gap), as it always did. A
 * loop over them stops at most `step` past a tap, below 2^31 within shapes.window's limit. */
typedef struct {
    int first, end, step;
} tap_range;

inline tap_range taps_inside(int start, int n, int s, int k, int d, int size)
{
    tap_range r;
    if (n == 1) {
        int2 i = taps_within(start, k, d, size);
        r.first = i.x * d;
        r.end = i.x < i.y ? (i.y - 1) * d + 1 : 0;
        r.step = d;
    } else {
        r.first = start < 0 ? -start : 0;
        r.end = min((n - 1) * s + (k - 1) * d + 1, size - start);
        r.step = 1;
    }
    return r;
}

/* The windows (stride s, padding p, extent span) of an axis with `out` windows that can
 * reach input positions i0 .. i0 + n - 1 (clipped to the axis of `size`; i0 <= size): from
 * `first` up to `end`, and never more than `count` of them, a constant when the sizes are
 * (in plain operators: through the min() built-in it did not fold before the loops
 * unrolled). No int overflow for axes and windows below 2^31. */
typedef struct {
    int first, end, count;
} window_range;
/* The one window of an axis of one position (a 2-D plane's depth, for the 3-D helpers). */
inline window_range one_window(void)
{
    window_range r;
    r.first = 0;
    r.end = r.count = 1;
    return r;
}

inline window_range windows_reaching(int i0, int n, int size, int s, int p, int span, int out)
{
    window_range r;
    int reach = i0 - (span - p); /* window o covers i0 when o*s > reach */
    int last = size - 1 - i0 < n - 1 ? size - 1 : i0 + n - 1;
    uint count = ((uint)n + (uint)span + (uint)s - 2u) / (uint)s;
    r.first = reach < 0 ? 0 : reach / s + 1;
    r.end = min((last + p) / s + 1, out);
    r.count = count > INT_MAX ? INT_MAX : (int)count;
    return r;
}

/* How many windows of r from r.first a loop visits (it skips those from r.end): r.count
 * where that is a small constant, so that the loop unrolls, else no more than reach the
 * input (a huge window over a small input: a few, not r.count). The 3-D kernels visit
 * r.count only where they unroll (a CPU visits the windows that reach). */
#define SHORT_COUNT 64
inline int windows_to_visit(window_range r)
{
#if defined(CLPOOL_KH) || (defined(CLPOOL_3D_KD) && defined(CLPOOL_UNROLL))
    if (r.count <= SHORT_COUNT)
        return r.count;
#endif
    int reaching = r.end - r.first;
    return reaching < 0 ? 0 : reaching < r.count ? reaching : r.count;
}

/* The windows of an axis (stride s, padding p, extent span, `out` of them) that can reach
 * a backward tile's positions i0 .. i0 + n - 1: window first + b for b < count, where it
 * lies in 0 .. end - 1, starting at i0 - lead + b * s. With the window sizes and padding
 * constant and n a multiple of s (so is i0), count and lead are constants: whether window
 * b covers position t of the tile (COVERS) folds at build time (without the padding the
 * loops did not even unroll on the H200: avg_pool2d_backward bfloat16, k3 s2 of
 * [128,64,128,128], 231 -> 138 us with it). */
typedef struct {
    int first, count, lead, end;
} tile_windows;

inline tile_windows windows_of_tile(int i0, int n, int size, int s, int p, int span, int out)
{
    tile_windows t;
    int before = (span - 1 - p) / s; /* windows before the one starting in i0 .. i0 + s - 1 */
    if (UNROLLED && n % s == 0 && before + (n - 1 + p) / s < SHORT_COUNT) {
        t.first = i0 / s - before;
        t.count = before + (n - 1 + p) / s + 1;
        t.lead = before * s + p;
        t.end = out;
    } else {
        window_range r = windows_reaching(i0, n, size, s, p, span, out);
        t.first = r.first;
        t.count = windows_to_visit(r);
        t.lead = i0 - (r.first * s - p);
        t.end = r.end;
    }
    return t;
}

/* True when window first + b of t covers position i of its tile of n (any window that
 * reaches a tile of one covers it). */
#define COVERS(t, i, b, n, s, span) ((n) == 1 || INSIDE((i) + (t).lead - (b) * (s), span))

#ifndef CLPOOL_NO_LANES16
/* v shifted up a lane (lane 0: +0); the even and the odd lanes of a and b; the 16-lane
 * interleaves of e and o: every lane named (PoCL runs shuffle2 lane by lane, Oclgrind
 * crashes on .even and .s02468ace; load16_strided below). */
#define LANE_UP(v)                                                                  \
    ((acc16_t)(0, (v).s0, (v).s1, (v).s2, (v).s3, (v).s4, (v).s5, (v).s6, (v).s7, (v).s8, \
               (v).s9, (v).sa, (v).sb, (v).sc, (v).sd, (v).se))
#define EVENS(a, b)                                                                 \
    ((acc16_t)((a).s0, (a).s2, (a).s4, (a).s6, (a).s8, (a).sa, (a).sc, (a).se, (b).s0, \
               (b).s2, (b).s4, (b).s6, (b).s8, (b).sa, (b).sc, (b).se))
#define ODDS(a, b)                                                                  \
    ((acc16_t)((a).s1, (a).s3, (a).s5, (a).s7, (a).s9, (a).sb, (a).sd, (a).sf, (b).s1, \
               (b).s3, (b).s5, (b).s7, (b).s9, (b).sb, (b).sd, (b).sf))
#define EVEN_ODD_LO(e, o)                                                           \
    ((acc16_t)((e).s0, (o).s0, (e).s1, (o).s1, (e).s2, (o).s2, (e).s3, (o).s3, (e).s4, \
               (o).s4, (e).s5, (o).s5, (e).s6, (o).s6, (e).s7, (o).s7))
#define EVEN_ODD_HI(e, o)                                                           \
    ((acc16_t)((e).s8, (o).s8, (e).s9, (o).s9, (e).sa, (o).sa, (e).sb, (o).sb, (e).sc, \
               (o).sc, (e).sd, (o).sd, (e).se, (o).se, (e).sf, (o).sf))

/* p[i], p[i + s], .. p[i + 15 * s] as a vector: one load (s == 1), the even lanes of two
 * (s == 2), or 16 loads. The even lanes are named one by one: Debian's PoCL 3.1 runs
 * shuffle2 lane by lane (max_pool1d k3 s2 of [16,256,4096] 4.97 -> 2.29 ms, avg_pool2d k3
 * s2 p1 of [8,64,112,112] 2.69 -> 0.80 ms); `.even` crashes Oclgrind 21.10's
 * uninitialized-value checks and made Intel's CPU compiler build avg_pool3d_backward_plane,
 * which does not call it, 1.35x slower (RELIABILITY.md). */
inline acc16_t load16_strided(__global const elem_t *p, pos_t i, int s)
{
    if (s == 1)
        return LOAD16(p, i);
    if (s == 2) {
        acc16_t a = LOAD16(p, i), b = LOAD16(p, i + 16);
        return EVENS(a, b);
    }
    acc_t lane[16];
    for (int k = 0; k < 16; ++k)
        lane[k] = LOAD(p, i + k * s);
    return vload16(0, lane);
}
#endif

/* The per-plane forward kernels' walk over the outputs of a row: ONE for output ow, and
 * SIXTEEN for outputs ow .. ow + 15 from ow = `first` up to `last` (the last 16 may
 * overlap the 16 before: they store the same values again), where first <= last; with
 * -DCLPOOL_NO_LANES16, ONE for every output (SIXTEEN is not compiled). */
#ifdef CLPOOL_NO_LANES16
#define FOR_EACH_OUTPUT(ow, OW, first, last, ONE, SIXTEEN)                          \
    for (int ow = 0; ow < (OW); ++ow)                                               \
        ONE;
#else
#define FOR_EACH_OUTPUT(ow, OW, first, last, ONE, SIXTEEN)                          \
    {                                                                               \
        int ow = 0;                                                                 \
        if ((first) <= (last)) {                                                    \
            for (; ow < (first); ++ow)                                              \
                ONE;                                                                \
            for (int v_ = (first);; v_ += 16) {                                     \
                ow = min(v_, (last));                                               \
                SIXTEEN;                                                            \
                if (ow == (last))                                                   \
                    break;                                                          \
            }                                                                       \
            ow = (last) + 16;                                                       \
        }                                                                           \
        for (; ow < (OW); ++ow)                                                     \
            ONE;                                                                    \
    }
#endif

/* The first and last output of a row from which 16 windows (stride s, padding p, extent
 * span) read only columns 0 .. W - 1 with load16_strided (which, for a stride of 2, loads
 * one column past the last window); first > last where none do. */
inline int2 vector_outputs(int W, int OW, int s, int p, int span)
{
    int reach = W + p - span - 15 * s - (s == 2);
    return (int2)((p + s - 1) / s, reach >= 0 ? min(reach / s, OW - 16) : -1);
}

/* p[row + w0 .. row + w1) += v, or = 0 + v (not v, which may be -0) when `fresh`: the
 * per-plane backward kernels' stores, 16 at a time when `wide`. PoCL vectorizes only
 * across the work-items of a group, and these kernels run one work-item per plane (on the
 * H200 host's Xeon, adaptive backward of [8,64,112,112] to 7x7 or 1x1: 3.9-7.9 ms with
 * scalar stores, 1.4-2.8 ms). Callers pass a constant `wide` where they can: the mere
 * presence of the vector loop made Intel's CPU compiler 30% slower on rows of 3. */
inline void add_to_row(__global elem_t *p, pos_t row, pos_t w0, pos_t w1, acc_t v,
                       int fresh, int wide)
{
    pos_t w = w0;
#ifndef CLPOOL_NO_LANES16
    for (; wide && w1 - w >= 16; w += 16)
        STORE16(p, row + w, (fresh ? (acc16_t)0 : LOAD16(p, row + w)) + v);
#endif
    for (; w < w1; ++w)
        STORE(p, row + w, (fresh ? (acc_t)0 : LOAD(p, row + w)) + v);
}

#ifndef CLPOOL_NO_LANES16
/* The shares v.sk of 16 windows of stride 2 and kw <= 4 columns starting at column `at` of
 * a row of p, added to the columns each covers (= 0 + v where `fresh`), in registers: an
 * element two windows cover gets the earlier window's share first, as add_to_row adds
 * them one window after another. The even columns at + 2k take taps 0 and 2 (window k and
 * k - 1), the odd ones taps 1 and 3; the row holds p[at .. at + 30 + kw]; `fresh` only
 * where windows do not overlap (kw <= 2). The per-plane
 * average backwards, kernel time on this project's CPU (Debian's PoCL, Intel's runtime):
 * avg_pool2d_backward k3 s2 p1 of [8,64,112,112] 4.3-5.2 -> 1.5-1.6 ms, k2 s2 of
 * [16,256,56,56] 4.9-6.6 -> 3.2-3.4 ms, avg_pool3d_backward k3 s2 p1 of [2,64,16,56,56]
 * 5.1-9.3 -> 2.9-3.3 ms; the same adds tap by tap through memory, each reloading the
 * vectors the last tap stored, were slower than scalar adds (4.3 -> 5.2 ms). */
inline void add_shares16_s2(__global elem_t *p, pos_t at, int kw, acc16_t v, int fresh)
{
    acc16_t a = LOAD16(p, at), b = LOAD16(p, at + 16);
    acc16_t e = fresh ? (acc16_t)0 : EVENS(a, b);
    acc16_t o = fresh ? (acc16_t)0 : ODDS(a, b);
    acc_t e16 = kw > 2 ? LOAD(p, at + 32) : 0, o16 = kw > 3 ? LOAD(p, at + 33) : 0;
    if (kw > 3) { /* tap 3 of window k - 1, then tap 1 of window k */
        o += LANE_UP(v);
        o16 += v.sf;
    }
    if (kw > 2) { /* tap 2 of window k - 1, then tap 0 of window k */
        e += LANE_UP(v);
        e16 += v.sf;
    }
    if (kw > 1)
        o += v;
    e += v;
    STORE16(p, at, EVEN_ODD_LO(e, o));
    STORE16(p, at + 16, EVEN_ODD_HI(e, o));
    if (kw > 2)
        STORE(p, at + 32, e16);
    if (kw > 3)
        STORE(p, at + 33, o16);
}

/* add_shares16_s2 for windows of stride 1: column at + j takes the shares of windows
 * j - kw + 1 .. j in that order, the 16 columns from `at` as one vector and the kw - 1
 * past them one by one (a lane adds +0 for an earlier window, whose share is already
 * there, before its own share, which is never -0); the row holds p[at .. at + 14 + kw].
 * `fresh` (= 0 + v) only where windows do not overlap, as for add_shares16_s2. Kernel time
 * on this project's CPU (Debian's PoCL / Intel's runtime), one window at a time before:
 * avg_pool2d_backward k3 s1 p1 of [32,64,128,128] 59.3 / 71.6 -> 19.3 / 18.8 ms,
 * avg_pool3d_backward k3 s1 p1 of [2,64,16,56,56] 24.5 / 31.5 -> 6.8-9.2 / 7.5 ms. */
inline void add_shares16_s1(__global elem_t *p, pos_t at, int kw, acc16_t v, int fresh)
{
    acc16_t a = fresh ? (acc16_t)0 : LOAD16(p, at);
    acc_t t0 = kw > 1 && !fresh ? LOAD(p, at + 16) : 0;
    acc_t t1 = kw > 2 && !fresh ? LOAD(p, at + 17) : 0;
    acc_t t2 = kw > 3 && !fresh ? LOAD(p, at + 18) : 0;
    if (kw > 3) { /* windows k - 3 */
        a += LANE_UP(LANE_UP(LANE_UP(v)));
        t0 += v.sd;
        t1 += v.se;
        t2 += v.sf;
    }
    if (kw > 2) { /* windows k - 2 */
        a += LANE_UP(LANE_UP(v));
        t0 += v.se;
        t1 += v.sf;
    }
    if (kw > 1) { /* windows k - 1 */
        a += LANE_UP(v);
        t0 += v.sf;
    }
    STORE16(p, at, a + v);
    if (kw > 1)
        STORE(p, at + 16, t0);
    if (kw > 2)
        STORE(p, at + 17, t1);
    if (kw > 3)
        STORE(p, at + 18, t2);
}

/* The shares of 16 windows of stride sw (1 or 2) and kw <= 4 columns, added in registers
 * (add_shares16_s1, add_shares16_s2). */
inline void add_shares16(__global elem_t *p, pos_t at, int sw, int kw, acc16_t v, int fresh)
{
    if (sw == 2)
        add_shares16_s2(p, at, kw, v, fresh);
    else
        add_shares16_s1(p, at, kw, v, fresh);
}
#endif

/* Rows from .. to - 1 of plane p (of width W) = 0; returns the rows cleared so far,
 * max(from, to). The per-plane max backward clears each row just before the first window
 * that reaches it, so that it is still in cache when gradients are added into it
 * (clearing the whole plane first: k3 s2 of [8,64,112,112] 1.70-1.76 against 1.41-1.43 ms
 * on this project's CPU). */
inline int clear_rows(__global elem_t *p, int W, int from, int to)
{
    if (to > from)
        add_to_row(p, (pos_t)from * W, 0, (pos_t)(to - from) * W, 0, 1, 1);
    return max(from, to);
}

/* v, +0 where it is zero: an average as PyTorch CPU returns it where it adds the quotient
 * into a result cleared to +0 (so never -0): every backward's share of a gradient, and the
 * forwards of avg_pool2d in NCHW (or other non-channels-last strides), avg_pool1d and
 * avg_pool3d in both layouts. (avg_pool2d channels-last and the adaptive forwards divide
 * into the result: -0 stays.) On the H200 a share that underflowed (-2^-149 / 8) came back
 * -0, summed in registers and added into memory cleared to +0 alike (likely a product by
 * 1/8 fused with the addition: fma(g, 0.125, +0) rounds once; RELIABILITY.md). */
inline acc_t plus_zero(acc_t v)
{
    return v == 0 ? (acc_t)0 : v;
}

/* plus_zero in four lanes. */
inline acc4_t plus_zero4(acc4_t v)
{
    return select(v, (acc4_t)0, isequal(v, (acc4_t)0));
}

/* plus_zero in sixteen lanes. */
inline acc16_t plus_zero16(acc16_t v)
{
    return select(v, (acc16_t)0, isequal(v, (acc16_t)0));
}

/* The average pooling divisor of the window starting at (hs, ws) in padded
 * coordinates, as PyTorch computes it. A non-zero divisor_override is every window's
 * divisor: the caller's override, or kh * kw where the host found that all windows
 * divide by that (no minimum and maximum per window); -DCLPOOL_AVG_DIVISOR makes it a
 * build constant (the host's choice where the window's sizes are: on the H200, bfloat16
 * avg_pool2d_backward k3 s2 of [128,64,128,128] 132.1 -> 97.5-107.9 us). */
inline pos_t avg_divisor(int hs, int ws, int kh, int kw, int H, int W, int ph, int pw,
                         int count_include_pad, int divisor_override)
{
#ifdef CLPOOL_AVG_DIVISOR
    return CLPOOL_AVG_DIVISOR;
#else
    if (divisor_override != 0)
        return divisor_override;
    int he = min(hs + kh, H + ph), we = min(ws + kw, W + pw);
    if (count_include_pad)
        return (pos_t)(he - hs) * (we - ws);
    return (pos_t)(min(he, H) - max(hs, 0)) * (min(we, W) - max(ws, 0));
#endif
}

#ifdef CLPOOL_AVG_DIVISOR
#if CLPOOL_DTYPE == 64
#define ACC_TINY 0x1p-960
#define ACC_MAX DBL_MAX
#else
#define ACC_TINY 0x1p-100f
#define ACC_MAX FLT_MAX
#endif
/* plus_zero(s / CLPOOL_AVG_DIVISOR), correctly rounded, without a division: the product by
 * the divisor's reciprocal and one correction (Markstein's theorem: exact where the
 * reciprocal is correctly rounded and nothing underflows). *slow is set where s must be
 * divided instead: NaN (its payload), infinities and tiny s. On an H100, avg_pool1d k3 s2
 * of [64,256,4096] 228.4 -> 165.8 us. */
inline acc_t by_avg_divisor(acc_t s, int *slow)
{
    const acc_t d = CLPOOL_AVG_DIVISOR, r = (acc_t)1 / d;
    acc_t q = s * r;
    *slow |= s != 0 && !(fabs(s) >= ACC_TINY && fabs(s) <= ACC_MAX);
    return s == 0 ? (acc_t)0 : fma(fma(-q, d, s), r, q);
}

/* AVG = plus_zero(SUM / CLPOOL_AVG_DIVISOR) for each sum of a tile, FOR_EACH the loop
 * header over them; by_avg_divisor, or the division for the whole tile where a sum needs
 * it (a branch around the tile's divisions: a division in every lane's path cost as much
 * as the divisions it replaced). */
#define AVERAGES(FOR_EACH, AVG, SUM)                                               \
    {                                                                              \
        int slow_ = 0;                                                             \
        FOR_EACH AVG = by_avg_divisor(SUM, &slow_);                                \
        if (slow_)                                                                 \
            FOR_EACH AVG = plus_zero(SUM / (acc_t)CLPOOL_AVG_DIVISOR);             \
    }
#endif

/* out = the strided 5-D view (N, C, D, H, W) of `in` starting at element `offset`,
 * made contiguous: clpool_contiguous for data, clpool_contiguous_index for max
 * pooling indices. Every program carries both, so a strided input needs no other
 * program than its op's. */
#define IDENTITY_LOAD(p, i) ((p)[i])
#define IDENTITY_STORE(p, i, v) ((p)[i] = (v))
#ifndef COPY_LOAD
#define COPY_LOAD LOAD
#define COPY_STORE STORE
#endif
#define CONTIGUOUS_KERNEL(name, T, load, store)                                    \
__kernel void name(__global const T *in, __global T *out, long offset,              \
                   int C, int D, int H, int W, long sn, long sc, long sd, long sh, \
                   long sw)                                                        \
{                                                                                  \
    int w = get_global_id(0);                                                      \
    if (w >= W)                                                                    \
        return;                                                                    \
    long plane = PLANE_ID(), n = plane / ((long)C * D), c = plane / D % C;         \
    long d = plane % D;                                                            \
    FOR_EACH_ROW(h, H)                                                             \
        store(out, (plane * H + h) * W + w,                                        \
              load(in, offset + n * sn + c * sc + d * sd + h * sh + w * sw));      \
}
CONTIGUOUS_KERNEL(clpool_contiguous, elem_t, COPY_LOAD, COPY_STORE)
CONTIGUOUS_KERNEL(clpool_contiguous_index, index_t, IDENTITY_LOAD, IDENTITY_STORE)

/* The _strided kernels: any input strides, and the result written through its own strides
 * (channels-last where the input is), one result element per work-item. Element
 * (n, c, h, w) of an input view v lies at v_offset + n * v_sn + c * v_sc + h * v_sh +
 * w * v_sw of its buffer (AT), of a result view r at the same without the offset (AT_OUT),
 * in elements. C is the channels; channels_inner is 0 for a result laid out otherwise, else
 * the channels-last result's channels per work-item: 1, or 4 where the kernel takes 4
 * channels contiguous in every view (the host's choice, for C a multiple of 4). */
#define STRIDED_FORWARD_SIZES                                                       \
    long x_offset, long x_sn, long x_sc, long x_sh, long x_sw,                      \
    long out_sn, long out_sc, long out_sh, long out_sw, int C, int channels_inner
#define STRIDED_BACKWARD_SIZES                                                      \
    long grad_out_offset, long grad_out_sn, long grad_out_sc, long grad_out_sh,     \
    long grad_out_sw, long grad_x_sn, long grad_x_sc, long grad_x_sh, long grad_x_sw, \
    int C, int channels_inner
/* The strides of the indices a strided max backward reads, as an input view. */
#define INDICES_VIEW_SIZES                                                          \
    long indices_offset, long indices_sn, long indices_sc, long indices_sh, long indices_sw
#define AT_OUT(v, n, c, h, w)                                                       \
    ((n) * v##_sn + (long)(c) * v##_sc + (long)(h) * v##_sh + (long)(w) * v##_sw)
#define AT(v, n, c, h, w) (v##_offset + AT_OUT(v, n, c, h, w))

/* The same over 5-D (N, C, D, H, W) views (pool3d.cl's _strided kernels, and the adaptive
 * max backward's inputs of any rank): the strides of result view v, then those of input
 * view v, its offset first; element (n, c, d, h, w) of each. */
#define STRIDES3D(v) long v##_sn, long v##_sc, long v##_sd, long v##_sh, long v##_sw
#define VIEW3D(v) long v##_offset, STRIDES3D(v)
#define AT3D_OUT(v, n, c, d, h, w)                                                  \
    ((n) * v##_sn + (long)(c) * v##_sc + (long)(d) * v##_sd + (long)(h) * v##_sh    \
     + (long)(w) * v##_sw)
#define AT3D(v, n, c, d, h, w) (v##_offset + AT3D_OUT(v, n, c, d, h, w))

/* The element (n, c, h, w) of an (N, C, H, W) result that this work-item of a _strided
 * kernel computes (the first of channels c .. c + channels_inner - 1, where a kernel takes
 * several). With channels_inner, dimension 0 walks C (by channels_inner), 1 W and 2
 * N * H, so that neighbouring work-items take neighbouring channels of one pixel
 * (contiguous in a channels-last tensor: coalesced loads and stores); with 0, dimension 0
 * walks W, 1 H and 2 N * C. False past the result. */
typedef struct {
    long n;
    int c, h, w;
} item_t;

/* z = quotient * m + *r: in 32 bits below 2^32 (the same branch for every work-item of a
 * launch), since GPUs emulate 64-bit division in a long sequence of instructions. */
inline long split_row(size_t z, int m, int *r)
{
    if (z <= UINT_MAX) {
        uint q = (uint)z / (uint)m;
        *r = (uint)z - q * (uint)m;
        return q;
    }
    long q = z / m;
    *r = z - q * m;
    return q;
}

/* The channels [x, y) of a CPU's channels-last row (the _strided kernels' channels_inner
 * == 16: plane.h) that its work-item takes: dimension 0 splits C, a multiple of 16, into
 * get_global_size(0) runs of whole 16s (a run of 256 channels or fewer from the host). */
inline int2 row16_channels(int C)
{
    int runs = get_global_size(0), r = get_global_id(0), sixteens = C / 16;
    return (int2)((long)sixteens * r / runs, (long)sixteens * (r + 1) / runs) * 16;
}

inline int strided_item(item_t *it, int C, int H, int W, int channels_inner)
{
    int r;
    it->n = split_row(get_global_id(2), channels_inner ? H : C, &r);
    if (channels_inner) {
        it->c = get_global_id(0) * channels_inner;
        it->w = get_global_id(1);
        it->h = r;
    } else {
        it->w = get_global_id(0);
        it->h = get_global_id(1);
        it->c = r;
    }
    return it->c < C && it->h < H && it->w < W;
}

/* Channels-last fast path of the _strided kernels (channels_inner == 4): 4 channels
 * contiguous in every view. Where every view's offset and pixel strides are multiples of
 * 4 elements (`aligned`, the same for every work-item: any dense NHWC tensor with C % 4
 * == 0), the 4 channels are one aligned vector access (a pointer to a 4-lane type), else
 * vload4 of elements; float16 always takes vload_half4 (OpenCL C has no half4 without
 * cl_khr_fp16). STORE4 stores 4 lanes with the dtype's rounding. */
#if CLPOOL_DTYPE == 16
#define LOAD4A(p, i) LOAD4(p, i)
#define STORE4U(p, i, v) vstore_half4_rte((v), 0, (p) + (i))
#define STORE4A(p, i, v) STORE4U(p, i, v)
#elif CLPOOL_DTYPE == 17
#define LOAD4A(p, i) as_float4(convert_uint4(*(__global const ushort4 *)((p) + (i))) << 16)
#define BF16_ROUND4(v) \
    ((ushort4)(bf16_round((v).x), bf16_round((v).y), bf16_round((v).z), bf16_round((v).w)))
#define STORE4U(p, i, v) vstore4(BF16_ROUND4(v), 0, (p) + (i))
#define STORE4A(p, i, v) (*(__global ushort4 *)((p) + (i)) = BF16_ROUND4(v))
#else
#define LOAD4A(p, i) (*(__global const acc4_t *)((p) + (i)))
#define STORE4U(p, i, v) vstore4((v), 0, (p) + (i))
#define STORE4A(p, i, v) (*(__global acc4_t *)((p) + (i)) = (v))
#endif
#define LOAD4CL(p, i, aligned) ((aligned) ? LOAD4A(p, i) : LOAD4(p, i))
#define STORE4CL(p, i, v, aligned)                                                  \
    do {                                                                            \
        if (aligned)                                                                \
            STORE4A(p, i, v);                                                       \
        else                                                                        \
            STORE4U(p, i, v);                                                       \
    } while (0)
/* True when view v's offset and pixel strides (and result r's) are multiples of 4. */
#define ALIGNED4(v, r)                                                              \
    ((((v##_offset) | (v##_sn) | (v##_sh) | (v##_sw) | (r##_sn) | (r##_sh) | (r##_sw)) & 3) == 0)

/* Elements i .. i + n - 1 of p (n is 1, or 4 where a _strided kernel takes 4 channels
 * contiguous in every view: LOAD4CL) as the first n lanes of a vector, the others 0; and
 * their store. Lane x alone gives the same sums as a scalar would. */
inline acc4_t load_lanes(__global const elem_t *p, long i, int n, int aligned)
{
    return n == 4 ? LOAD4CL(p, i, aligned) : (acc4_t)(LOAD(p, i), 0, 0, 0);
}

inline void store_lanes(__global elem_t *p, long i, acc4_t v, int n, int aligned)
{
    if (n == 4)
        STORE4CL(p, i, v, aligned);
    else
        STORE(p, i, v.x);
}

/* Elements per work-item of a channels-last _strided kernel that takes a tile (a forward's
 * outputs, whose windows share taps, loaded once; a backward's gradients, which share
 * windows, loaded once): CLPOOL_CL_ROWS rows by CLPOOL_CL_PIX pixels along W (the host's
 * -D options; 1 unless it passes more). */
#ifndef CLPOOL_CL_PIX
#define CLPOOL_CL_PIX 1
#endif
#ifndef CLPOOL_CL_ROWS
#define CLPOOL_CL_ROWS 1
#endif

/* The first element (n, c .. c + 3, h, w) of the tile of a channels-last work-item (a
 * forward's outputs, a backward's gradients): dimension 0 walks C by 4, 1 W by
 * CLPOOL_CL_PIX, 2 N times H by CLPOOL_CL_ROWS. False past the result. */
inline int nhwc_item(item_t *it, int C, int H, int W)
{
    int band;
    it->n = split_row(get_global_id(2), (H - 1) / CLPOOL_CL_ROWS + 1, &band);
    it->c = get_global_id(0) * 4;
    it->w = get_global_id(1) * CLPOOL_CL_PIX;
    it->h = band * CLPOOL_CL_ROWS;
    return it->c < C && it->h < H && it->w < W;
}

#if CLPOOL_INDEX == 32
typedef int4 index4_t;
#define CONVERT_INDEX4(v) convert_int4(v)
#else
typedef long4 index4_t;
#define CONVERT_INDEX4(v) convert_long4(v)
#endif
/* Four indices of a channels-last view at p[i], aligned or not, as LOAD4CL loads values. */
#define LOAD_INDEX4(p, i, aligned)                                                  \
    ((aligned) ? *(__global const index4_t *)((p) + (i)) : vload4(0, (p) + (i)))

/* The strided backward's gather for 4 channels contiguous in grad_out, indices and grad_x
 * (channels-last) of a tile of CLPOOL_CL_ROWS x CLPOOL_CL_PIX elements from (h0, w0) of
 * depth d (a 2-D plane: d 0 of one window wd), of which the first `rows` x `pixels` are
 * stored from `at`, `step_h` and `step_w` apart: the windows reaching the tile in output
 * order, each loaded once, their gradient added to each element of the tile the window
 * covers and its index (flat in the plane or volume) names; with the window sizes as
 * constants a loop of a constant count (windows_to_visit), so that the loads issue
 * together. */
inline void max_gather4(__global const elem_t *gp, __global const index_t *ip,
                        __global elem_t *grad_x, long at, long step_h, long step_w, int rows,
                        int pixels, int d, int h0, int w0, window_range wd, window_range wr,
                        window_range wc, int H, int W, int sh, int sw, int ph, int pw,
                        int span_h, int span_w, long g_sd, long g_sh, long g_sw, long i_sd,
                        long i_sh, long i_sw, int aligned, int aligned_i)
{
    acc4_t g[CLPOOL_CL_ROWS][CLPOOL_CL_PIX];
    UNROLL for (int r = 0; r < CLPOOL_CL_ROWS; ++r)
        UNROLL for (int k = 0; k < CLPOOL_CL_PIX; ++k)
            g[r][k] = 0;
    UNROLL for (int z = 0; z < windows_to_visit(wd); ++z) {
        int od = wd.first + z;
        UNROLL for (int a = 0; a < windows_to_visit(wr); ++a) {
            int oh = wr.first + a, top = oh * sh - ph;
            UNROLL for (int b = 0; b < windows_to_visit(wc); ++b) {
                int ow = wc.first + b, left = ow * sw - pw;
                if (od >= wd.end || oh >= wr.end || ow >= wc.end)
                    continue;
                acc4_t v = LOAD4CL(gp, od * g_sd + (long)oh * g_sh + (long)ow * g_sw, aligned);
                index4_t i = LOAD_INDEX4(ip, od * i_sd + (long)oh * i_sh + (long)ow * i_sw,
                                         aligned_i);
                UNROLL for (int r = 0; r < CLPOOL_CL_ROWS; ++r)
                    UNROLL for (int k = 0; k < CLPOOL_CL_PIX; ++k) {
                        pos_t self = ((pos_t)d * H + h0 + r) * W + w0 + k;
                        int inside = INSIDE(h0 + r - top, span_h) && INSIDE(w0 + k - left,
                                                                             span_w);
                        g[r][k].x += inside && i.x == self ? v.x : (acc_t)0;
                        g[r][k].y += inside && i.y == self ? v.y : (acc_t)0;
                        g[r][k].z += inside && i.z == self ? v.z : (acc_t)0;
                        g[r][k].w += inside && i.w == self ? v.w : (acc_t)0;
                    }
            }
        }
    }
    UNROLL for (int r = 0; r < CLPOOL_CL_ROWS; ++r)
        UNROLL for (int k = 0; k < CLPOOL_CL_PIX; ++k)
            if (r < rows && k < pixels)
                STORE4CL(grad_x, at + r * step_h + k * step_w, g[r][k], aligned);
}

/* Adaptive cells (average and max, 1-D to 3-D): cell i of n over an axis of `size` spans
 * [cell_start(i, size, n), cell_end(i, size, n)) = [floor(i*size/n), ceil((i+1)*size/n));
 * the cells that contain position i of the axis are cell_start(i, n, size) ..
 * cell_end(i, n, size) - 1. scaled_bound is floor(i*size/n), or the ceiling when `up`:
 * for axes and cell counts below 46341 a float quotient corrected by one step is exact
 * (integer division is slow on GPUs and does not vectorize on CPUs; on the H200 32-bit
 * division made the gathers of unequal cells 3% slower); the host passes
 * -DCLPOOL_LARGE_CELLS for larger ones, which divide in 64 bits (a test of the sizes at
 * run time made those gathers 1.1-1.5x slower: [128,64,128,128] to 7x7, max 481 -> 533
 * us, average 325 -> 478). */
inline int scaled_bound(int i, int size, int n, int up)
{
#ifdef CLPOOL_LARGE_CELLS
    return (int)(((long)i * size + (up ? n - 1 : 0)) / n);
#else
    uint num = (uint)i * (uint)size + (up ? (uint)(n - 1) : 0u);
    uint q = (uint)((float)num / (float)n);
    q -= q * (uint)n > num;
    q += (q + 1) * (uint)n <= num;
    return (int)q;
#endif
}
inline int cell_start(int i, int size, int n) { return scaled_bound(i, size, n, 0); }
inline int cell_end(int i, int size, int n) { return scaled_bound(i + 1, size, n, 1); }

/* The plane of work-group cell `cell` of planes of one row of HW elements in OW cells (a
 * plane's cells one after another; OW 1: the whole plane, else HW below 2^31), and the
 * cell's elements [*w0, *w1) of its plane: the reductions by a work-group per cell. */
inline long row_cell(size_t cell, long HW, int OW, long *w0, long *w1)
{
    int ow = 0;
    long plane = OW == 1 ? (long)cell : split_row(cell, OW, &ow);
    *w0 = OW == 1 ? 0 : cell_start(ow, (int)HW, OW);
    *w1 = OW == 1 ? HW : cell_end(ow, (int)HW, OW);
    return plane;
}

/* The positions [*i0, *i1) of an axis of `size` in n cells (size >= n) that a backward's
 * cell o stores, from its start to the next cell's (every position in one cell's), and
 * the end of the cell before (0 for the first): positions below it lie in that cell too,
 * and none lies in more than those two. */
inline int owned_cells(int o, int size, int n, int *i0, int *i1)
{
    *i0 = cell_start(o, size, n);
    *i1 = o + 1 < n ? cell_start(o + 1, size, n) : size;
    return o > 0 ? cell_end(o - 1, size, n) : 0;
}

/* The plane of work-group cell `cell` of planes of one row of W elements in OW cells (W >=
 * OW), its elements [*w0, *w1) and *shared, as owned_cells gives them. */
inline long row_owned(size_t cell, int W, int OW, int *ow, int *w0, int *w1, int *shared)
{
    long plane = split_row(cell, OW, ow);
    *shared = owned_cells(*ow, W, OW, w0, w1);
    return plane;
}

/* The cells [*o0, *o1) of n over an axis of `size` that contain position i; returns the
 * first position past i where they change (a backward's gathers work out their cells only
 * there: on the H200, once per element made them compute bound). */
inline int cells_at(int i, int size, int n, int *o0, int *o1)
{
    if (n == 0) { /* an output of no cells: none contains i (and nothing divides by 0) */
        *o0 = *o1 = 0;
        return size;
    }
    *o0 = cell_start(i, n, size);
    *o1 = cell_end(i, n, size);
    int leave = cell_end(*o0, size, n);
    return *o1 < n ? min(leave, cell_start(*o1, size, n)) : leave;
}

/* Quotients and remainders of the cell bounds' numerators: 32 bits, unsigned (the
 * numerators of scaled_bound), unless -DCLPOOL_LARGE_CELLS. */
#ifdef CLPOOL_LARGE_CELLS
typedef ulong cell_num_t;
#else
typedef uint cell_num_t;
#endif

/* The cells [first[k], last[k]) of n over an axis of `size` that contain element i0 + k,
 * for k < count (those past the axis take its last element's). Two bounds are divided out
 * for i0; each next element adds n / size to the quotients and n % size to their
 * remainders, carrying one where a remainder reaches size: on the H200 the bounds of each
 * column, divided out (3 conversions each), made the 1-D gathers compute bound. */
inline void tile_cells_of(int *first, int *last, int i0, int size, int n, int count)
{
    int i = min(i0, size - 1), f = cell_start(i, n, size), l = cell_end(i, n, size);
    int q = cell_start(1, n, size);
    cell_num_t s = (cell_num_t)size, r = (cell_num_t)n - (cell_num_t)q * s;
    cell_num_t rf = (cell_num_t)i * (cell_num_t)n - (cell_num_t)f * s;
    cell_num_t rl = (cell_num_t)(i + 1) * (cell_num_t)n + (s - 1) - (cell_num_t)l * s;
    for (int k = 0; k < count; ++k) {
        first[k] = f;
        last[k] = l;
        if (i0 + k + 1 < size) {
            rf += r;
            rl += r;
            f += q + (rf >= s);
            l += q + (rl >= s);
            rf -= rf >= s ? s : 0;
            rl -= rl >= s ? s : 0;
        }
    }
}

/* The cells of the tile of CLPOOL_COLS elements from i0, as tile_cells_of gives them. */
inline void tile_cells(int *first, int *last, int i0, int size, int n)
{
    tile_cells_of(first, last, i0, size, n, CLPOOL_COLS);
}
