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
