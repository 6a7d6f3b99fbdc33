/* Decoded-frame layout conversion for item assembly.
 *
 * A decoded frame is a uint8 C x H x W tensor with arbitrary element strides (torchcodec returns
 * NCHW views of NHWC memory: strides (1, W*C, C)). These routines write it as a contiguous
 * C x H x W float32 array in [0, 1] in one pass (x / 255 through a 256-entry table of
 * (float)x / 255.0f, i.e. the IEEE single-precision quotient: bitwise what torch's
 * x.to(float32) / 255 gives), or as a contiguous uint8 3 x H x W copy (SSSE3 byte shuffles when
 * the CPU has them, picked at run time, else a scalar loop). No allocation, no Python: callable
 * without the GIL.
 */
#ifndef LRS_FRAME_CONVERT_H
#define LRS_FRAME_CONVERT_H

#include <stdint.h>

/* Fill the uint8 -> float32 table. Idempotent; call once before lrs_frame_to_chw_f32. */
void lrs_frame_init(void);

/* src: first byte of the frame; sc, sh, sw: strides in bytes of the C, H and W dimensions.
 * dst: C*H*W contiguous elements, channel-major. */
void lrs_frame_to_chw_f32(const uint8_t *src, int64_t sc, int64_t sh, int64_t sw,
                          int64_t C, int64_t H, int64_t W, float *dst);

/* src: first byte of an H x W x 3 frame of interleaved rows, sh bytes apart (sh >= 3 * W).
 * dst: 3*H*W bytes, channel-major. */
void lrs_u8_hwc3_to_chw(const uint8_t *src, int64_t sh, int64_t H, int64_t W, uint8_t *dst);

#endif
