# Declarations of the C sample-table parser (csrc/mp4_parse.h, csrc/lrs_status.h).
from libc.stdint cimport int64_t, int32_t, uint8_t, uint32_t

cdef extern from "lrs_status.h":
    int LRS_OK
    int LRS_E_TRUNCATED
    int LRS_E_BADBOX
    int LRS_E_OVERFLOW
    int LRS_E_UNSUPPORTED
    int LRS_E_INCONSISTENT
    ctypedef struct lrs_err:
        int code
        char box[5]
        int64_t offset
        char reason[256]

cdef extern from "mp4_parse.h":
    int LRS_MAX_VIDEO_TRACKS
    int64_t LRS_MAX_SAMPLES_PER_TRACK
    ctypedef struct lrs_span:
        int64_t start
        int64_t end
        int present
        int version
    ctypedef struct lrs_mp4_info:
        int64_t movie_timescale
        int has_mvex
        int32_t movie_matrix[9]
        int32_t matrix[9]
        int64_t track_id
        int64_t media_timescale
        int64_t media_duration
        int64_t display_width
        int64_t display_height
        int64_t width
        int64_t height
        char codec[5]
        int64_t stsd_start
        int64_t stsd_end
        int64_t num_stsd_entries
        int has_edit
        int64_t media_time
        int64_t empty_edit_movie_ticks
        int64_t edit_duration_movie_ticks
        int64_t num_samples
        int64_t num_chunks
        int ctts_version
        int num_video_tracks
        int64_t video_track_ids[32]
        int num_tracks
    int lrs_mp4_scan_moov(const uint8_t *buf, int64_t len, int64_t file_offset, int64_t file_size,
                          int64_t want_track_id, lrs_mp4_info *info, lrs_err *err) nogil
    int lrs_mp4_fill(const uint8_t *buf, int64_t len, int64_t file_offset, int64_t file_size,
                     const lrs_mp4_info *info, int64_t *offset, int64_t *size, int64_t *dts,
                     int64_t *cts, int64_t *pts, uint8_t *is_sync, double *pts_s, lrs_err *err) nogil
