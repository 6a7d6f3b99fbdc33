/* Mini-MP4 synthesis: ftyp + a rebuilt moov (one video track) + the mdat header.
 *
 * The same routine counts (out == NULL) and writes (out != NULL), so the exact file size is known
 * arithmetically before any payload byte is fetched and the written header always has that size.
 * All per-sample arrays are the span's samples in decode order (n entries, int64).
 */
#ifndef LRS_MP4_SYNTH_H
#define LRS_MP4_SYNTH_H

#include <stdint.h>

typedef struct {
    int64_t n;                  /* samples in the span (>= 1) */
    const int64_t *size;        /* bytes per sample (each <= 0xFFFFFFFF) */
    const int64_t *duration;    /* stts delta per sample, media ticks (each 0..0xFFFFFFFF) */
    const int64_t *cts;         /* composition offset per sample, media ticks (signed 32-bit) */
    const int64_t *rel_offset;  /* sample offset minus the payload's first byte */
    const uint8_t *is_sync;     /* 1 for a sync sample */
    int64_t payload_len;        /* mdat payload bytes (the fetched byte range) */
    int64_t media_timescale;
    int64_t track_id;
    int64_t width, height;
    int64_t edit_media_time;    /* local media ticks of the first presented sample (elst) */
    int64_t edit_duration;      /* presented duration, media ticks (= movie ticks here) */
    const uint8_t *stsd;        /* stsd box payload (version/flags, entry_count, entries) */
    int64_t stsd_len;
    uint32_t brand;             /* compatible brand for the codec, e.g. 'av01', 'avc1' */
    int32_t movie_matrix[9];    /* written verbatim into mvhd (ISO/IEC 14496-12 6.2.2 order) */
    int32_t matrix[9];          /* written verbatim into tkhd */
} lrs_synth_in;

/* Returns the header length (ftyp + moov + mdat header) and sets *use_co64; writes it to out when
 * out != NULL (out must have room for the returned count). Returns < 0 on invalid input. */
int64_t lrs_synth_header(const lrs_synth_in *in, uint8_t *out, int *use_co64);

#endif
