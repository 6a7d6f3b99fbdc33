/* See frame_convert.h. */
#include "frame_convert.h"

static float lrs_u8_to_unit[256];

void lrs_frame_init(void) {
    for (int i = 0; i < 256; i++) lrs_u8_to_unit[i] = (float)i / 255.0f;
}

void lrs_frame_to_chw_f32(const uint8_t *src, int64_t sc, int64_t sh, int64_t sw,
                          int64_t C, int64_t H, int64_t W, float *dst) {
    const float *lut = lrs_u8_to_unit;
    const int64_t plane = H * W;
    if (sc == 1 && sw == C) { /* interleaved rows (NHWC memory): de-interleave into C planes */
        for (int64_t h = 0; h < H; h++) {
            const uint8_t *s = src + h * sh;
            float *d = dst + h * W;
            if (C == 3) {
                float *d0 = d, *d1 = d + plane, *d2 = d + 2 * plane;
                for (int64_t w = 0; w < W; w++) {
                    d0[w] = lut[s[3 * w]];
                    d1[w] = lut[s[3 * w + 1]];
                    d2[w] = lut[s[3 * w + 2]];
                }
            } else {
                for (int64_t w = 0; w < W; w++)
                    for (int64_t c = 0; c < C; c++) d[c * plane + w] = lut[s[w * C + c]];
            }
        }
        return;
    }
    for (int64_t c = 0; c < C; c++) /* any other strides (planar rows: sw == 1) */
        for (int64_t h = 0; h < H; h++) {
            const uint8_t *s = src + c * sc + h * sh;
            float *d = dst + c * plane + h * W;
            for (int64_t w = 0; w < W; w++) d[w] = lut[s[w * sw]];
        }
}

static void row_scalar(const uint8_t *s, int64_t w0, int64_t W, uint8_t *d0, uint8_t *d1, uint8_t *d2) {
    for (int64_t w = w0; w < W; w++) {
        d0[w] = s[3 * w];
        d1[w] = s[3 * w + 1];
        d2[w] = s[3 * w + 2];
    }
}

#if defined(__x86_64__) || defined(__i386__)
#include <tmmintrin.h>

/* 48 interleaved bytes (16 pixels) -> 16 bytes of each plane: each output gathers its bytes from
 * the three input vectors with one shuffle each (-1 lanes give 0) and ORs them. */
__attribute__((target("ssse3")))
static void planes_ssse3(const uint8_t *src, int64_t sh, int64_t H, int64_t W, uint8_t *dst) {
    const __m128i r0 = _mm_setr_epi8(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i r1 = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14, -1, -1, -1, -1, -1);
    const __m128i r2 = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 1, 4, 7, 10, 13);
    const __m128i g0 = _mm_setr_epi8(1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i g1 = _mm_setr_epi8(-1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1);
    const __m128i g2 = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14);
    const __m128i b0 = _mm_setr_epi8(2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i b1 = _mm_setr_epi8(-1, -1, -1, -1, -1, 1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1);
    const __m128i b2 = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15);
    const int64_t plane = H * W;
    const int64_t W16 = W & ~(int64_t)15;
    for (int64_t h = 0; h < H; h++) {
        const uint8_t *s = src + h * sh;
        uint8_t *d0 = dst + h * W, *d1 = d0 + plane, *d2 = d1 + plane;
        for (int64_t w = 0; w < W16; w += 16) {
            const uint8_t *p = s + 3 * w;
            __m128i a = _mm_loadu_si128((const __m128i *)p);
            __m128i b = _mm_loadu_si128((const __m128i *)(p + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(p + 32));
            __m128i R = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, r0), _mm_shuffle_epi8(b, r1)),
                                     _mm_shuffle_epi8(c, r2));
            __m128i G = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, g0), _mm_shuffle_epi8(b, g1)),
                                     _mm_shuffle_epi8(c, g2));
            __m128i B = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, b0), _mm_shuffle_epi8(b, b1)),
                                     _mm_shuffle_epi8(c, b2));
            _mm_storeu_si128((__m128i *)(d0 + w), R);
            _mm_storeu_si128((__m128i *)(d1 + w), G);
            _mm_storeu_si128((__m128i *)(d2 + w), B);
        }
        row_scalar(s, W16, W, d0, d1, d2);
    }
}
#endif

void lrs_u8_hwc3_to_chw(const uint8_t *src, int64_t sh, int64_t H, int64_t W, uint8_t *dst) {
#if defined(__x86_64__) || defined(__i386__)
    if (__builtin_cpu_supports("ssse3")) {
        planes_ssse3(src, sh, H, W, dst);
        return;
    }
#endif
    const int64_t plane = H * W;
    for (int64_t h = 0; h < H; h++) {
        uint8_t *d0 = dst + h * W;
        row_scalar(src + h * sh, 0, W, d0, d0 + plane, d0 + 2 * plane);
    }
}
