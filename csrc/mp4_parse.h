/* ISO/IEC 14496-12 (ISO BMFF) sample-table parser: a bounded reader over untrusted moov bytes.
 *
 * Two phases, no allocation in C:
 *   1. lrs_mp4_scan_moov() walks a complete moov box, picks the video track, validates every
 *      sample-table box against its size and the others, and returns num_samples plus scalars;
 *   2. the caller allocates int64/uint8/double arrays of num_samples and lrs_mp4_fill() expands
 *      stts/ctts/stss/stsz|stz2/stsc/stco|co64 into them (decode order), checking that every
 *      sample's bytes lie inside the file.
 * Every read goes through a bounds-checked cursor and returns a status (lrs_status.h).
 */
#ifndef LRS_MP4_PARSE_H
#define LRS_MP4_PARSE_H

#include <stdint.h>
#include "lrs_status.h"

#define LRS_MAX_VIDEO_TRACKS 32

/* Most samples one video track may declare (2^22 = 4,194,304). The sample count is untrusted and
 * each sample costs the caller ~60 bytes of arrays (~250 MB at this cap), so it is bounded before
 * anything is allocated. 2^22 frames are 38.8 hours at 30 fps in one file; LeRobot cuts its video
 * files at a few hundred MB, which at this count would be ~100 bytes per frame: no camera stream. */
#define LRS_MAX_SAMPLES_PER_TRACK ((int64_t)1 << 22)

typedef struct {
    int64_t start;   /* payload start (after the box header, incl. version/flags), in moov buffer */
    int64_t end;     /* payload end (exclusive), in moov buffer */
    int present;
    int version;
} lrs_span;

typedef struct {
    /* movie */
    int64_t movie_timescale;
    int has_mvex;
    /* display matrices (ISO/IEC 14496-12 6.2.2: a, b, u, c, d, v, x, y, w; 16.16 except u, v, w
     * in 2.30), raw int32 values. movie_matrix is mvhd's as FFmpeg applies it to the chosen track:
     * the mvhd read before that trak, all zeros when mvhd comes after it (FFmpeg multiplies the
     * tkhd matrix by the movie matrix it has seen so far; a zeroed context otherwise). */
    int32_t movie_matrix[9];
    int32_t matrix[9];           /* tkhd matrix of the chosen track */
    /* chosen track */
    int64_t track_id;
    int64_t media_timescale;
    int64_t media_duration;
    int64_t display_width;     /* integer part of tkhd 16.16 width */
    int64_t display_height;
    int64_t width;             /* visual sample entry width (coded), tkhd if not a visual entry */
    int64_t height;
    char codec[5];
    int64_t stsd_start;        /* stsd box payload (version/flags, entry_count, entries) */
    int64_t stsd_end;
    int64_t num_stsd_entries;
    /* edit list */
    int has_edit;
    int64_t media_time;                /* media ticks, 0 if no edit */
    int64_t empty_edit_movie_ticks;    /* leading empty edit, movie ticks */
    int64_t edit_duration_movie_ticks; /* the media edit's segment_duration, movie ticks */
    /* tables */
    lrs_span stts, ctts, stss, stsz, stz2, stsc, stco, co64;
    int64_t num_samples;
    int64_t num_chunks;
    int64_t const_sample_size;  /* stsz sample_size when non-zero, else 0 */
    int stz2_field_size;
    int ctts_version;           /* -1 when absent */
    /* video tracks found */
    int num_video_tracks;
    int64_t video_track_ids[LRS_MAX_VIDEO_TRACKS];
    int num_tracks;
} lrs_mp4_info;

/* Parse a whole moov box (header included) held in buf[0:len]; buf[0] is at file offset
 * file_offset. want_track_id < 0 picks the first video track. file_size bounds sample data. */
int lrs_mp4_scan_moov(const uint8_t *buf, int64_t len, int64_t file_offset, int64_t file_size,
                      int64_t want_track_id, lrs_mp4_info *info, lrs_err *err);

/* Expand the tables found by lrs_mp4_scan_moov into caller-owned arrays of info->num_samples. */
int lrs_mp4_fill(const uint8_t *buf, int64_t len, int64_t file_offset, int64_t file_size,
                 const lrs_mp4_info *info, int64_t *offset, int64_t *size, int64_t *dts,
                 int64_t *cts, int64_t *pts, uint8_t *is_sync, double *pts_s, lrs_err *err);

/* Read one box header at buf[pos] within [pos, end); end_is_eof says a size==0 box runs to end.
 * On success *type, *hdr_size and *box_size (total, header included) are set. */
int lrs_box_header(const uint8_t *buf, int64_t pos, int64_t end, int64_t file_offset,
                   uint32_t *type, int64_t *hdr_size, int64_t *box_size, lrs_err *err);

#endif
