/* Status codes and error context shared by lerobotstream's C helpers.
 *
 * Every C routine returns an int status: 0 on success, a negative LRS_E_* code on failure, and
 * fills an lrs_err with the box fourcc, the file offset and a reason text. The Cython layer maps a
 * code to one typed Python exception in lerobotstream/mp4/parse.pyx (one function, one table).
 */
#ifndef LRS_STATUS_H
#define LRS_STATUS_H

#include <stdint.h>

#define LRS_OK 0
#define LRS_E_TRUNCATED (-1)    /* a box or field runs past its parent or the file */
#define LRS_E_BADBOX (-2)       /* a malformed box (bad size, bad version, bad value) */
#define LRS_E_OVERFLOW (-3)     /* an absurd count or a sum that overflows int64 */
#define LRS_E_UNSUPPORTED (-4)  /* valid MP4 we refuse: fragments, edit lists, no video track */
#define LRS_E_INCONSISTENT (-5) /* sample tables disagree with each other or with the file */

#define LRS_REASON_MAX 256

typedef struct {
    int code;                     /* the LRS_E_* code, LRS_OK when no error */
    char box[5];                  /* fourcc of the box being read, NUL-terminated ("" if none) */
    int64_t offset;               /* file offset of that box (or field), -1 if unknown */
    char reason[LRS_REASON_MAX];  /* human-readable reason */
} lrs_err;

#endif
