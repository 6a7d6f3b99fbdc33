/* Decoded-frame layout conversion for item assembly.
 *
 * A decoded frame is a uint8 C x H x W tensor with arbitrary element strides (torchcodec returns
 * NCHW views of NHWC memory: strides (1, W*C, C)). These routines write it as a contiguous
 * C x H x W float32 array in [0, 1] in one pass (x / 255 through a 256-entry table of
 * (float)x / 255.0f, i.e. the IEEE single-precision quotient: bitwise what torch's
 * x.to(float32) / 255 gives). No allocation, no Python: callable without the GIL.
 * (A uint8 layout copy is left to torch, whose strided byte copy is faster than a scalar loop.)
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

#endif
