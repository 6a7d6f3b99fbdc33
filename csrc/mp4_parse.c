/* ISO/IEC 14496-12 sample-table parser over untrusted bytes (see mp4_parse.h). */
#include "mp4_parse.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define FCC(a, b, c, d) (((uint32_t)(a) << 24) | ((uint32_t)(b) << 16) | ((uint32_t)(c) << 8) | (uint32_t)(d))
#define MAX_DEPTH 16

typedef __int128 i128;

/* ---------------------------------------------------------------- errors and cursor */

static void fourcc_str(uint32_t t, char out[5]) {
    int i;
    for (i = 0; i < 4; i++) {
        unsigned char ch = (unsigned char)(t >> (24 - 8 * i));
        out[i] = (ch >= 32 && ch < 127) ? (char)ch : '?';
    }
    out[4] = 0;
    if (t == 0) out[0] = 0;
}

static int fail(lrs_err *e, int code, uint32_t box, int64_t off, const char *fmt, ...) {
    va_list ap;
    e->code = code;
    fourcc_str(box, e->box);
    e->offset = off;
    va_start(ap, fmt);
    vsnprintf(e->reason, LRS_REASON_MAX, fmt, ap);
    va_end(ap);
    return code;
}

typedef struct {
    const uint8_t *p;  /* whole buffer */
    int64_t pos;       /* next byte to read */
    int64_t end;       /* limit (exclusive) */
    int64_t foff;      /* file offset of p[0] */
    uint32_t box;      /* box being read, for errors */
} cur_t;

static inline uint32_t be32(const uint8_t *q) {
    return ((uint32_t)q[0] << 24) | ((uint32_t)q[1] << 16) | ((uint32_t)q[2] << 8) | (uint32_t)q[3];
}
static inline uint64_t be64(const uint8_t *q) { return ((uint64_t)be32(q) << 32) | be32(q + 4); }

static inline int need(cur_t *c, int64_t n, lrs_err *e) {
    if (__builtin_expect(n < 0 || c->pos < 0 || c->end - c->pos < n, 0))
        return fail(e, LRS_E_TRUNCATED, c->box, c->foff + c->pos,
                    "needs %lld more bytes but the box has %lld left", (long long)n,
                    (long long)(c->end - c->pos));
    return LRS_OK;
}
static int rd_u16(cur_t *c, uint32_t *v, lrs_err *e) {
    int s = need(c, 2, e);
    if (s) return s;
    *v = ((uint32_t)c->p[c->pos] << 8) | c->p[c->pos + 1];
    c->pos += 2;
    return LRS_OK;
}
static inline int rd_u32(cur_t *c, uint32_t *v, lrs_err *e) {
    int s = need(c, 4, e);
    if (s) return s;
    *v = be32(c->p + c->pos);
    c->pos += 4;
    return LRS_OK;
}
static inline int rd_u64(cur_t *c, uint64_t *v, lrs_err *e) {
    int s = need(c, 8, e);
    if (s) return s;
    *v = be64(c->p + c->pos);
    c->pos += 8;
    return LRS_OK;
}
static int skip(cur_t *c, int64_t n, lrs_err *e) {
    int s = need(c, n, e);
    if (s) return s;
    c->pos += n;
    return LRS_OK;
}
#define TRY(x)                \
    do {                      \
        int _s = (x);         \
        if (_s) return _s;    \
    } while (0)

/* ---------------------------------------------------------------- box headers */

int lrs_box_header(const uint8_t *buf, int64_t pos, int64_t end, int64_t file_offset, uint32_t *type,
                   int64_t *hdr_size, int64_t *box_size, lrs_err *err) {
    cur_t c = {buf, pos, end, file_offset, 0};
    uint32_t size32, t;
    uint64_t size64;
    int64_t size;
    TRY(rd_u32(&c, &size32, err));
    TRY(rd_u32(&c, &t, err));
    c.box = t;
    *type = t;
    if (size32 == 1) {
        TRY(rd_u64(&c, &size64, err));
        if (size64 > (uint64_t)INT64_MAX)
            return fail(err, LRS_E_OVERFLOW, t, file_offset + pos, "64-bit box size %llu is absurd",
                        (unsigned long long)size64);
        size = (int64_t)size64;
        *hdr_size = 16;
    } else if (size32 == 0) {
        size = end - pos;
        *hdr_size = 8;
    } else {
        size = size32;
        *hdr_size = 8;
    }
    if (t == FCC('u', 'u', 'i', 'd')) *hdr_size += 16;
    if (size < *hdr_size)
        return fail(err, LRS_E_BADBOX, t, file_offset + pos, "box size %lld is smaller than its header",
                    (long long)size);
    if (size > end - pos)
        return fail(err, LRS_E_TRUNCATED, t, file_offset + pos,
                    "box of %lld bytes runs past the end of its parent (%lld bytes left)", (long long)size,
                    (long long)(end - pos));
    *box_size = size;
    return LRS_OK;
}

/* ---------------------------------------------------------------- per-track scan */

typedef struct {
    int64_t track_id;
    int has_tkhd, has_mdhd, has_hdlr;
    uint32_t handler;
    int64_t media_timescale, media_duration;
    int64_t tkhd_w, tkhd_h;
    int32_t matrix[9];        /* tkhd matrix, raw */
    int32_t movie_matrix[9];  /* mvhd matrix seen before this trak (zeros if none yet) */
    lrs_span elst, stsd;
    lrs_span stts, ctts, stss, stsz, stz2, stsc, stco, co64;
    int64_t trak_off; /* buffer offset of the trak box */
} trak_t;

static int set_span(lrs_span *s, const cur_t *c, uint32_t t, int64_t box_pos, lrs_err *e) {
    if (s->present)
        return fail(e, LRS_E_BADBOX, t, c->foff + box_pos, "duplicate box in its parent");
    s->present = 1;
    s->start = c->pos;
    s->end = c->end;
    s->version = (c->end - c->pos >= 1) ? c->p[c->pos] : -1;
    return LRS_OK;
}

/* Walk children of the box whose payload is [pos, end) in buffer, dispatching to visit(). */
static int walk_trak(const uint8_t *buf, int64_t pos, int64_t end, int64_t foff, trak_t *tk, int depth,
                     lrs_err *e) {
    if (depth > MAX_DEPTH) return fail(e, LRS_E_BADBOX, 0, foff + pos, "boxes nested too deeply");
    while (pos < end) {
        uint32_t t;
        int64_t hs, bs;
        if (end - pos < 8) {
            /* some muxers pad with up to 7 zero bytes; anything else is a truncated box */
            int64_t i;
            for (i = pos; i < end; i++)
                if (buf[i]) return fail(e, LRS_E_TRUNCATED, 0, foff + pos, "partial box header");
            break;
        }
        TRY(lrs_box_header(buf, pos, end, foff, &t, &hs, &bs, e));
        cur_t c = {buf, pos + hs, pos + bs, foff, t};
        switch (t) {
            case FCC('e', 'd', 't', 's'):
            case FCC('m', 'd', 'i', 'a'):
            case FCC('m', 'i', 'n', 'f'):
            case FCC('s', 't', 'b', 'l'):
                TRY(walk_trak(buf, pos + hs, pos + bs, foff, tk, depth + 1, e));
                break;
            case FCC('t', 'k', 'h', 'd'): {
                uint32_t vf, u32;
                uint64_t u64;
                if (tk->has_tkhd) return fail(e, LRS_E_BADBOX, t, foff + pos, "duplicate tkhd");
                tk->has_tkhd = 1;
                TRY(rd_u32(&c, &vf, e));
                if ((vf >> 24) == 1) {
                    TRY(rd_u64(&c, &u64, e));
                    TRY(rd_u64(&c, &u64, e));
                } else if ((vf >> 24) == 0) {
                    TRY(rd_u32(&c, &u32, e));
                    TRY(rd_u32(&c, &u32, e));
                } else
                    return fail(e, LRS_E_UNSUPPORTED, t, foff + pos, "tkhd version %u", vf >> 24);
                TRY(rd_u32(&c, &u32, e));
                tk->track_id = u32;
                /* reserved(4) duration(4|8) reserved(8) layer(2) alt(2) volume(2) reserved(2) matrix(36) */
                TRY(skip(&c, 4 + ((vf >> 24) == 1 ? 8 : 4) + 8 + 8, e));
                for (int k = 0; k < 9; k++) {
                    TRY(rd_u32(&c, &u32, e));
                    tk->matrix[k] = (int32_t)u32;
                }
                TRY(rd_u32(&c, &u32, e));
                tk->tkhd_w = u32 >> 16;
                TRY(rd_u32(&c, &u32, e));
                tk->tkhd_h = u32 >> 16;
                break;
            }
            case FCC('m', 'd', 'h', 'd'): {
                uint32_t vf, u32;
                uint64_t u64;
                if (tk->has_mdhd) return fail(e, LRS_E_BADBOX, t, foff + pos, "duplicate mdhd");
                tk->has_mdhd = 1;
                TRY(rd_u32(&c, &vf, e));
                if ((vf >> 24) == 1) {
                    TRY(skip(&c, 16, e));
                    TRY(rd_u32(&c, &u32, e));
                    tk->media_timescale = u32;
                    TRY(rd_u64(&c, &u64, e));
                    tk->media_duration = (int64_t)(u64 & 0x7fffffffffffffffULL);
                } else if ((vf >> 24) == 0) {
                    TRY(skip(&c, 8, e));
                    TRY(rd_u32(&c, &u32, e));
                    tk->media_timescale = u32;
                    TRY(rd_u32(&c, &u32, e));
                    tk->media_duration = u32;
                } else
                    return fail(e, LRS_E_UNSUPPORTED, t, foff + pos, "mdhd version %u", vf >> 24);
                break;
            }
            case FCC('h', 'd', 'l', 'r'): {
                uint32_t vf, u32;
                if (tk->has_hdlr) break; /* minf may hold a data-handler hdlr (QuickTime); keep mdia's */
                tk->has_hdlr = 1;
                TRY(rd_u32(&c, &vf, e));
                TRY(rd_u32(&c, &u32, e)); /* pre_defined / component type */
                TRY(rd_u32(&c, &u32, e));
                tk->handler = u32;
                break;
            }
            case FCC('e', 'l', 's', 't'): TRY(set_span(&tk->elst, &c, t, pos, e)); break;
            case FCC('s', 't', 's', 'd'): TRY(set_span(&tk->stsd, &c, t, pos, e)); break;
            case FCC('s', 't', 't', 's'): TRY(set_span(&tk->stts, &c, t, pos, e)); break;
            case FCC('c', 't', 't', 's'): TRY(set_span(&tk->ctts, &c, t, pos, e)); break;
            case FCC('s', 't', 's', 's'): TRY(set_span(&tk->stss, &c, t, pos, e)); break;
            case FCC('s', 't', 's', 'z'): TRY(set_span(&tk->stsz, &c, t, pos, e)); break;
            case FCC('s', 't', 'z', '2'): TRY(set_span(&tk->stz2, &c, t, pos, e)); break;
            case FCC('s', 't', 's', 'c'): TRY(set_span(&tk->stsc, &c, t, pos, e)); break;
            case FCC('s', 't', 'c', 'o'): TRY(set_span(&tk->stco, &c, t, pos, e)); break;
            case FCC('c', 'o', '6', '4'): TRY(set_span(&tk->co64, &c, t, pos, e)); break;
            default: break;
        }
        pos += bs;
    }
    return LRS_OK;
}

/* Read a full-box table header: version/flags then entry_count, and check entries fit. */
static int table_head(const uint8_t *buf, const lrs_span *s, int64_t foff, uint32_t t, int64_t entry_bytes,
                      int64_t pre_bytes, cur_t *c, uint32_t *count, lrs_err *e) {
    uint32_t vf;
    c->p = buf;
    c->pos = s->start;
    c->end = s->end;
    c->foff = foff;
    c->box = t;
    TRY(rd_u32(c, &vf, e));
    TRY(skip(c, pre_bytes, e));
    TRY(rd_u32(c, count, e));
    if ((i128)(*count) * entry_bytes > (i128)(c->end - c->pos))
        return fail(e, LRS_E_TRUNCATED, t, foff + c->pos,
                    "entry_count %u needs %lld bytes but the box has %lld", *count,
                    (long long)((i128)(*count) * entry_bytes), (long long)(c->end - c->pos));
    return LRS_OK;
}

/* A run-length table (stts, ctts: entries of (sample_count, value)) must describe exactly
 * nsamp samples (the stsz count). */
static int check_run_total(const uint8_t *buf, const lrs_span *s, int64_t foff, uint32_t t, const char *name,
                           int64_t nsamp, lrs_err *e) {
    cur_t c;
    uint32_t n, i, cnt, value;
    int64_t total = 0;
    TRY(table_head(buf, s, foff, t, 8, 0, &c, &n, e));
    for (i = 0; i < n; i++) {
        TRY(rd_u32(&c, &cnt, e));
        TRY(rd_u32(&c, &value, e));
        total += cnt;
        if (total > nsamp) break;
    }
    if (total != nsamp)
        return fail(e, LRS_E_INCONSISTENT, t, foff + s->start, "%s describes %s%lld samples but stsz has %lld",
                    name, total > nsamp ? "more than " : "", (long long)total, (long long)nsamp);
    return LRS_OK;
}

static int scan_edits(const uint8_t *buf, const trak_t *tk, int64_t foff, lrs_mp4_info *info, lrs_err *e) {
    cur_t c;
    uint32_t n, i, version;
    int n_media = 0;
    const uint32_t T = FCC('e', 'l', 's', 't');
    info->has_edit = 0;
    info->media_time = 0;
    info->empty_edit_movie_ticks = 0;
    info->edit_duration_movie_ticks = 0;
    if (!tk->elst.present) return LRS_OK;
    version = (uint32_t)tk->elst.version;
    if (version > 1) return fail(e, LRS_E_UNSUPPORTED, T, foff + tk->elst.start, "elst version %u", version);
    TRY(table_head(buf, &tk->elst, foff, T, version ? 20 : 12, 0, &c, &n, e));
    for (i = 0; i < n; i++) {
        int64_t dur, mt;
        uint32_t ri, rf, u32;
        uint64_t u64;
        int64_t at = c.pos;
        if (version) {
            TRY(rd_u64(&c, &u64, e));
            if (u64 > (uint64_t)INT64_MAX)
                return fail(e, LRS_E_OVERFLOW, T, foff + at, "edit %u duration %llu is absurd", i,
                            (unsigned long long)u64);
            dur = (int64_t)u64;
            TRY(rd_u64(&c, &u64, e));
            mt = (int64_t)u64;
        } else {
            TRY(rd_u32(&c, &u32, e));
            dur = u32;
            TRY(rd_u32(&c, &u32, e));
            mt = (int32_t)u32;
        }
        TRY(rd_u16(&c, &ri, e));
        TRY(rd_u16(&c, &rf, e));
        if (mt == -1) {
            if (n_media)
                return fail(e, LRS_E_UNSUPPORTED, T, foff + at,
                            "empty edit %u after a media edit (expected one rate-one media edit, "
                            "optionally after a leading empty edit)", i);
            if (info->empty_edit_movie_ticks > INT64_MAX - dur)
                return fail(e, LRS_E_OVERFLOW, T, foff + at, "empty edits overflow");
            info->empty_edit_movie_ticks += dur;
        } else if (mt < -1) {
            return fail(e, LRS_E_BADBOX, T, foff + at, "edit %u has media_time %lld", i, (long long)mt);
        } else {
            if (ri != 1 || rf != 0)
                return fail(e, LRS_E_UNSUPPORTED, T, foff + at, "edit %u has media rate %d.%u (only 1.0 is supported)",
                            i, (int)(int16_t)ri, rf);
            if (n_media)
                return fail(e, LRS_E_UNSUPPORTED, T, foff + at,
                            "several media edits (edit %u; expected one rate-one media edit)", i);
            n_media = 1;
            info->media_time = mt;
            info->edit_duration_movie_ticks = dur;
        }
    }
    if (n > 0 && !n_media)
        return fail(e, LRS_E_UNSUPPORTED, T, foff + tk->elst.start, "edit list holds no media edit");
    info->has_edit = n_media;
    return LRS_OK;
}

static int scan_stsd(const uint8_t *buf, const trak_t *tk, int64_t foff, lrs_mp4_info *info, lrs_err *e) {
    cur_t c;
    uint32_t n, esize, etype;
    const uint32_t T = FCC('s', 't', 's', 'd');
    TRY(table_head(buf, &tk->stsd, foff, T, 8, 0, &c, &n, e));
    if (n < 1) return fail(e, LRS_E_BADBOX, T, foff + tk->stsd.start, "stsd has no sample entry");
    int64_t entry = c.pos;
    TRY(rd_u32(&c, &esize, e));
    TRY(rd_u32(&c, &etype, e));
    if (esize < 8 || (int64_t)esize > c.end - entry)
        return fail(e, LRS_E_TRUNCATED, T, foff + entry, "sample entry size %u does not fit the stsd box", esize);
    fourcc_str(etype, info->codec);
    info->num_stsd_entries = n;
    info->stsd_start = tk->stsd.start;
    info->stsd_end = tk->stsd.end;
    info->width = tk->tkhd_w;
    info->height = tk->tkhd_h;
    if (esize >= 36) {
        /* VisualSampleEntry: reserved(6) dref(2) pre_defined/reserved(16) width(2) height(2) */
        info->width = ((uint32_t)buf[entry + 32] << 8) | buf[entry + 33];
        info->height = ((uint32_t)buf[entry + 34] << 8) | buf[entry + 35];
    }
    return LRS_OK;
}

/* media_bytes: bytes of the file outside moov, where samples can lie */
static int scan_tables(const uint8_t *buf, const trak_t *tk, int64_t foff, int64_t media_bytes, lrs_mp4_info *info,
                       lrs_err *e) {
    cur_t c;
    uint32_t n, i, u32, vf;
    int64_t nsamp;
    const uint32_t STTS = FCC('s', 't', 't', 's'), CTTS = FCC('c', 't', 't', 's'), STSZ = FCC('s', 't', 's', 'z'),
                   STZ2 = FCC('s', 't', 'z', '2'), STSC = FCC('s', 't', 's', 'c'), STCO = FCC('s', 't', 'c', 'o'),
                   CO64 = FCC('c', 'o', '6', '4'), STSS = FCC('s', 't', 's', 's');
    int64_t tpos = foff + tk->trak_off;
    if (!tk->stts.present) return fail(e, LRS_E_BADBOX, STTS, tpos, "the video track has no stts box");
    if (!tk->stsc.present) return fail(e, LRS_E_BADBOX, STSC, tpos, "the video track has no stsc box");
    if (!tk->stco.present && !tk->co64.present)
        return fail(e, LRS_E_BADBOX, STCO, tpos, "the video track has no stco/co64 box");
    if (tk->stco.present && tk->co64.present)
        return fail(e, LRS_E_INCONSISTENT, CO64, tpos, "the video track has both stco and co64");
    if (!tk->stsz.present && !tk->stz2.present)
        return fail(e, LRS_E_BADBOX, STSZ, tpos, "the video track has no stsz/stz2 box");
    if (tk->stsz.present && tk->stz2.present)
        return fail(e, LRS_E_INCONSISTENT, STZ2, tpos, "the video track has both stsz and stz2");

    /* sample count from stsz / stz2 */
    info->stsz = tk->stsz;
    info->stz2 = tk->stz2;
    info->const_sample_size = 0;
    info->stz2_field_size = 0;
    if (tk->stsz.present) {
        c = (cur_t){buf, tk->stsz.start, tk->stsz.end, foff, STSZ};
        TRY(rd_u32(&c, &vf, e));
        TRY(rd_u32(&c, &u32, e));
        info->const_sample_size = u32;
        TRY(rd_u32(&c, &n, e));
        nsamp = n;
        if (u32 == 0) {
            if ((int64_t)n * 4 > c.end - c.pos)
                return fail(e, LRS_E_TRUNCATED, STSZ, foff + c.pos, "sample_count %u needs %lld bytes, box has %lld",
                            n, (long long)n * 4, (long long)(c.end - c.pos));
        } else if ((i128)u32 * n > (i128)media_bytes) {
            return fail(e, LRS_E_INCONSISTENT, STSZ, foff + tk->stsz.start,
                        "%u samples of %u bytes cannot fit the %lld bytes of the file outside moov", n, u32,
                        (long long)media_bytes);
        }
    } else {
        uint32_t fs;
        c = (cur_t){buf, tk->stz2.start, tk->stz2.end, foff, STZ2};
        TRY(rd_u32(&c, &vf, e));
        TRY(rd_u32(&c, &u32, e));
        fs = u32 & 0xff;
        if (fs != 4 && fs != 8 && fs != 16)
            return fail(e, LRS_E_BADBOX, STZ2, foff + tk->stz2.start, "stz2 field_size %u", fs);
        info->stz2_field_size = (int)fs;
        TRY(rd_u32(&c, &n, e));
        nsamp = n;
        if (((int64_t)n * fs + 7) / 8 > c.end - c.pos)
            return fail(e, LRS_E_TRUNCATED, STZ2, foff + c.pos, "sample_count %u does not fit the stz2 box", n);
    }
    /* The caller allocates ~60 bytes per sample from this count: bound it before anything does.
     * A video sample is at least 1 byte of the file outside moov, and one track holds at most
     * LRS_MAX_SAMPLES_PER_TRACK (mp4_parse.h says why). */
    tpos = foff + (tk->stsz.present ? tk->stsz.start : tk->stz2.start);
    if (nsamp > media_bytes)
        return fail(e, LRS_E_INCONSISTENT, tk->stsz.present ? STSZ : STZ2, tpos,
                    "declares %lld samples (at least 1 byte each) but only %lld bytes of the file lie outside moov: "
                    "samples would lie outside the file",
                    (long long)nsamp, (long long)media_bytes);
    if (nsamp > LRS_MAX_SAMPLES_PER_TRACK)
        return fail(e, LRS_E_UNSUPPORTED, tk->stsz.present ? STSZ : STZ2, tpos,
                    "declares %lld samples, more than the %lld one video track may hold", (long long)nsamp,
                    (long long)LRS_MAX_SAMPLES_PER_TRACK);
    info->num_samples = nsamp;

    /* stts total must equal the sample count */
    info->stts = tk->stts;
    TRY(check_run_total(buf, &tk->stts, foff, STTS, "stts", nsamp, e));

    /* ctts */
    info->ctts = tk->ctts;
    info->ctts_version = -1;
    if (tk->ctts.present) {
        if (tk->ctts.version > 1)
            return fail(e, LRS_E_UNSUPPORTED, CTTS, foff + tk->ctts.start, "ctts version %d", tk->ctts.version);
        info->ctts_version = tk->ctts.version;
        TRY(check_run_total(buf, &tk->ctts, foff, CTTS, "ctts", nsamp, e));
    }

    /* stss */
    info->stss = tk->stss;
    if (tk->stss.present) TRY(table_head(buf, &tk->stss, foff, STSS, 4, 0, &c, &n, e));

    /* chunk offsets */
    info->stco = tk->stco;
    info->co64 = tk->co64;
    if (tk->stco.present)
        TRY(table_head(buf, &tk->stco, foff, STCO, 4, 0, &c, &n, e));
    else
        TRY(table_head(buf, &tk->co64, foff, CO64, 8, 0, &c, &n, e));
    info->num_chunks = n;

    /* stsc: first_chunk 1-based, strictly increasing, within the chunk table; covers exactly nsamp */
    info->stsc = tk->stsc;
    TRY(table_head(buf, &tk->stsc, foff, STSC, 12, 0, &c, &n, e));
    {
        i128 covered = 0;
        int64_t prev_first = 0, prev_spc = 0;
        for (i = 0; i < n; i++) {
            uint32_t first, spc, sdi;
            int64_t at = c.pos;
            TRY(rd_u32(&c, &first, e));
            TRY(rd_u32(&c, &spc, e));
            TRY(rd_u32(&c, &sdi, e));
            if (i == 0 && first != 1)
                return fail(e, LRS_E_INCONSISTENT, STSC, foff + at, "first stsc entry starts at chunk %u, not 1",
                            first);
            if (i > 0 && (int64_t)first <= prev_first)
                return fail(e, LRS_E_INCONSISTENT, STSC, foff + at, "stsc entry %u: first_chunk %u not increasing", i,
                            first);
            if ((int64_t)first > info->num_chunks)
                return fail(e, LRS_E_INCONSISTENT, STSC, foff + at,
                            "stsc entry %u points at chunk %u past the %lld chunks of stco/co64", i, first,
                            (long long)info->num_chunks);
            if (sdi < 1 || sdi > info->num_stsd_entries)
                return fail(e, LRS_E_INCONSISTENT, STSC, foff + at,
                            "stsc entry %u names sample description %u of %lld", i, sdi,
                            (long long)info->num_stsd_entries);
            if (i > 0) covered += (i128)(first - prev_first) * prev_spc;
            prev_first = first;
            prev_spc = spc;
        }
        if (n > 0) covered += (i128)(info->num_chunks - prev_first + 1) * prev_spc;
        if (covered != nsamp)
            return fail(e, LRS_E_INCONSISTENT, STSC, foff + tk->stsc.start,
                        "stsc/stco describe %lld samples but stsz has %lld",
                        (long long)(covered > INT64_MAX ? INT64_MAX : (int64_t)covered), (long long)nsamp);
    }
    return LRS_OK;
}

int lrs_mp4_scan_moov(const uint8_t *buf, int64_t len, int64_t file_offset, int64_t file_size,
                      int64_t want_track_id, lrs_mp4_info *info, lrs_err *err) {
    uint32_t t;
    int64_t hs, bs, pos, end;
    int have_mvhd = 0, chosen = 0;
    int32_t movie_matrix[9] = {0};
    trak_t pick;
    memset(info, 0, sizeof(*info));
    memset(&pick, 0, sizeof(pick));
    memset(err, 0, sizeof(*err));
    err->offset = -1;
    info->ctts_version = -1;
    TRY(lrs_box_header(buf, 0, len, file_offset, &t, &hs, &bs, err));
    if (t != FCC('m', 'o', 'o', 'v')) return fail(err, LRS_E_BADBOX, t, file_offset, "expected a moov box");
    pos = hs;
    end = bs;
    while (pos < end) {
        if (end - pos < 8) {
            int64_t i;
            for (i = pos; i < end; i++)
                if (buf[i]) return fail(err, LRS_E_TRUNCATED, 0, file_offset + pos, "partial box header in moov");
            break;
        }
        TRY(lrs_box_header(buf, pos, end, file_offset, &t, &hs, &bs, err));
        cur_t c = {buf, pos + hs, pos + bs, file_offset, t};
        if (t == FCC('m', 'v', 'h', 'd')) {
            uint32_t vf, u32;
            if (have_mvhd) return fail(err, LRS_E_BADBOX, t, file_offset + pos, "duplicate mvhd");
            have_mvhd = 1;
            TRY(rd_u32(&c, &vf, err));
            if ((vf >> 24) > 1) return fail(err, LRS_E_UNSUPPORTED, t, file_offset + pos, "mvhd version %u", vf >> 24);
            TRY(skip(&c, (vf >> 24) == 1 ? 16 : 8, err));
            TRY(rd_u32(&c, &u32, err));
            info->movie_timescale = u32;
            /* duration(4|8) rate(4) volume(2) reserved(10) matrix(36) */
            TRY(skip(&c, ((vf >> 24) == 1 ? 8 : 4) + 4 + 2 + 10, err));
            for (int k = 0; k < 9; k++) {
                TRY(rd_u32(&c, &u32, err));
                movie_matrix[k] = (int32_t)u32;
            }
        } else if (t == FCC('m', 'v', 'e', 'x')) {
            info->has_mvex = 1;
        } else if (t == FCC('t', 'r', 'a', 'k')) {
            trak_t tk;
            memset(&tk, 0, sizeof(tk));
            tk.trak_off = pos;
            memcpy(tk.movie_matrix, movie_matrix, sizeof(movie_matrix));
            TRY(walk_trak(buf, pos + hs, pos + bs, file_offset, &tk, 0, err));
            info->num_tracks++;
            if (tk.has_hdlr && tk.handler == FCC('v', 'i', 'd', 'e')) {
                if (!tk.has_tkhd)
                    return fail(err, LRS_E_BADBOX, FCC('t', 'r', 'a', 'k'), file_offset + pos, "video track has no tkhd");
                if (info->num_video_tracks < LRS_MAX_VIDEO_TRACKS)
                    info->video_track_ids[info->num_video_tracks] = tk.track_id;
                info->num_video_tracks++;
                if (!chosen && (want_track_id < 0 || want_track_id == tk.track_id)) {
                    pick = tk;
                    chosen = 1;
                }
            }
        }
        pos += bs;
    }
    if (info->has_mvex)
        return fail(err, LRS_E_UNSUPPORTED, FCC('m', 'v', 'e', 'x'), file_offset,
                    "fragmented MP4 (moov/mvex announces movie fragments) is not supported");
    if (!have_mvhd) return fail(err, LRS_E_BADBOX, FCC('m', 'v', 'h', 'd'), file_offset, "moov has no mvhd");
    if (info->movie_timescale == 0)
        return fail(err, LRS_E_BADBOX, FCC('m', 'v', 'h', 'd'), file_offset, "movie timescale is zero");
    if (!chosen) {
        if (info->num_video_tracks == 0)
            return fail(err, LRS_E_UNSUPPORTED, FCC('h', 'd', 'l', 'r'), file_offset,
                        "no video track (hdlr 'vide') among %d tracks", info->num_tracks);
        return fail(err, LRS_E_UNSUPPORTED, FCC('t', 'k', 'h', 'd'), file_offset,
                    "no video track with track_id %lld (%d video tracks)", (long long)want_track_id,
                    info->num_video_tracks);
    }
    info->track_id = pick.track_id;
    info->display_width = pick.tkhd_w;
    info->display_height = pick.tkhd_h;
    memcpy(info->matrix, pick.matrix, sizeof(info->matrix));
    memcpy(info->movie_matrix, pick.movie_matrix, sizeof(info->movie_matrix));
    if (!pick.has_mdhd)
        return fail(err, LRS_E_BADBOX, FCC('m', 'd', 'h', 'd'), file_offset + pick.trak_off, "video track has no mdhd");
    if (pick.media_timescale == 0)
        return fail(err, LRS_E_BADBOX, FCC('m', 'd', 'h', 'd'), file_offset + pick.trak_off, "media timescale is zero");
    info->media_timescale = pick.media_timescale;
    info->media_duration = pick.media_duration;
    if (!pick.stsd.present)
        return fail(err, LRS_E_BADBOX, FCC('s', 't', 's', 'd'), file_offset + pick.trak_off, "video track has no stsd");
    TRY(scan_stsd(buf, &pick, file_offset, info, err));
    TRY(scan_edits(buf, &pick, file_offset, info, err));
    TRY(scan_tables(buf, &pick, file_offset, file_size > end ? file_size - end : 0, info, err));
    return LRS_OK;
}

/* ---------------------------------------------------------------- fill */

static inline double exact_seconds(i128 num, i128 den) {
    /* num/den with a single rounding when both fit in 53 bits (the common case) */
    const i128 lim = (i128)1 << 53;
    if (num < lim && num > -lim && den < lim) return (double)(int64_t)num / (double)(int64_t)den;
    {
        i128 q = num / den, r = num % den;
        return (double)q + (double)r / (double)den;
    }
}

int lrs_mp4_fill(const uint8_t *buf, int64_t len, int64_t file_offset, int64_t file_size, const lrs_mp4_info *info,
                 int64_t *offset, int64_t *size, int64_t *dts, int64_t *cts, int64_t *pts, uint8_t *is_sync,
                 double *pts_s, lrs_err *err) {
    cur_t c, c2;
    uint32_t n, i, u32, cnt;
    int64_t k, nsamp = info->num_samples;
    const int64_t foff = file_offset;
    const uint32_t STTS = FCC('s', 't', 't', 's'), CTTS = FCC('c', 't', 't', 's'), STSZ = FCC('s', 't', 's', 'z'),
                   STZ2 = FCC('s', 't', 'z', '2'), STSC = FCC('s', 't', 's', 'c'), STCO = FCC('s', 't', 'c', 'o'),
                   CO64 = FCC('c', 'o', '6', '4'), STSS = FCC('s', 't', 's', 's');
    memset(err, 0, sizeof(*err));
    err->offset = -1;
    (void)len;

    /* sizes */
    if (info->stsz.present) {
        c = (cur_t){buf, info->stsz.start + 12, info->stsz.end, foff, STSZ};
        if (info->const_sample_size) {
            for (k = 0; k < nsamp; k++) size[k] = info->const_sample_size;
        } else {
            for (k = 0; k < nsamp; k++) {
                TRY(rd_u32(&c, &u32, err));
                size[k] = u32;
            }
        }
    } else {
        int fs = info->stz2_field_size;
        const uint8_t *q = buf + info->stz2.start + 12;
        if ((int64_t)(info->stz2.end - info->stz2.start - 12) < (nsamp * fs + 7) / 8)
            return fail(err, LRS_E_TRUNCATED, STZ2, foff + info->stz2.start, "stz2 entries");
        for (k = 0; k < nsamp; k++) {
            if (fs == 16)
                size[k] = ((uint32_t)q[2 * k] << 8) | q[2 * k + 1];
            else if (fs == 8)
                size[k] = q[k];
            else
                size[k] = (k & 1) ? (q[k >> 1] & 0x0f) : (q[k >> 1] >> 4);
        }
    }

    /* offsets: stsc x stco/co64 */
    {
        int is64 = info->co64.present;
        const lrs_span *co = is64 ? &info->co64 : &info->stco;
        uint32_t nst;
        int64_t s = 0, chunk = 1; /* 1-based chunk */
        TRY(table_head(buf, co, foff, is64 ? CO64 : STCO, is64 ? 8 : 4, 0, &c2, &n, err));
        TRY(table_head(buf, &info->stsc, foff, STSC, 12, 0, &c, &nst, err));
        for (i = 0; i < nst; i++) {
            uint32_t first, spc, next_first, sdi;
            int64_t last;
            TRY(rd_u32(&c, &first, err));
            TRY(rd_u32(&c, &spc, err));
            TRY(rd_u32(&c, &sdi, err));
            if (i + 1 < nst) {
                next_first = be32(buf + c.pos); /* scan checked the table fits */
                last = (int64_t)next_first - 1;
            } else {
                last = info->num_chunks;
            }
            for (chunk = first; chunk <= last; chunk++) {
                int64_t at = c2.pos, off;
                uint32_t j;
                if (is64) {
                    uint64_t u64;
                    TRY(rd_u64(&c2, &u64, err));
                    if (u64 > (uint64_t)INT64_MAX)
                        return fail(err, LRS_E_INCONSISTENT, CO64, foff + at, "chunk offset %llu is outside the file",
                                    (unsigned long long)u64);
                    off = (int64_t)u64;
                } else {
                    TRY(rd_u32(&c2, &u32, err));
                    off = u32;
                }
                for (j = 0; j < spc; j++) {
                    if (s >= nsamp)
                        return fail(err, LRS_E_INCONSISTENT, STSC, foff + info->stsc.start,
                                    "stsc maps more samples than stsz holds");
                    if (off > file_size || size[s] > file_size - off)
                        return fail(err, LRS_E_INCONSISTENT, is64 ? CO64 : STCO, foff + at,
                                    "sample %lld bytes [%lld, %lld) lie outside the file of %lld bytes", (long long)s,
                                    (long long)off, (long long)(off + size[s]), (long long)file_size);
                    offset[s] = off;
                    off += size[s];
                    s++;
                }
            }
        }
        if (s != nsamp)
            return fail(err, LRS_E_INCONSISTENT, STSC, foff + info->stsc.start,
                        "stsc maps %lld samples but stsz holds %lld", (long long)s, (long long)nsamp);
    }

    /* dts */
    TRY(table_head(buf, &info->stts, foff, STTS, 8, 0, &c, &n, err));
    {
        int64_t s = 0, t = 0;
        for (i = 0; i < n; i++) {
            uint32_t delta, j;
            TRY(rd_u32(&c, &cnt, err));
            TRY(rd_u32(&c, &delta, err));
            if ((int64_t)cnt > nsamp - s)
                return fail(err, LRS_E_INCONSISTENT, STTS, foff + info->stts.start, "stts describes too many samples");
            for (j = 0; j < cnt; j++) {
                dts[s++] = t;
                if (t > INT64_MAX - (int64_t)delta)
                    return fail(err, LRS_E_OVERFLOW, STTS, foff + info->stts.start, "decode time overflows int64");
                t += delta;
            }
        }
        if (s != nsamp) return fail(err, LRS_E_INCONSISTENT, STTS, foff + info->stts.start, "stts sample count");
    }

    /* composition offsets (signed: v0 values >= 2^31 are negative in practice) */
    if (info->ctts.present) {
        int64_t s = 0;
        TRY(table_head(buf, &info->ctts, foff, CTTS, 8, 0, &c, &n, err));
        for (i = 0; i < n; i++) {
            uint32_t j;
            int64_t v;
            TRY(rd_u32(&c, &cnt, err));
            TRY(rd_u32(&c, &u32, err));
            v = (int32_t)u32;
            if ((int64_t)cnt > nsamp - s)
                return fail(err, LRS_E_INCONSISTENT, CTTS, foff + info->ctts.start, "ctts describes too many samples");
            for (j = 0; j < cnt; j++) cts[s++] = v;
        }
        if (s != nsamp) return fail(err, LRS_E_INCONSISTENT, CTTS, foff + info->ctts.start, "ctts sample count");
    } else {
        for (k = 0; k < nsamp; k++) cts[k] = 0;
    }

    /* sync */
    if (info->stss.present) {
        for (k = 0; k < nsamp; k++) is_sync[k] = 0;
        TRY(table_head(buf, &info->stss, foff, STSS, 4, 0, &c, &n, err));
        for (i = 0; i < n; i++) {
            int64_t at = c.pos;
            TRY(rd_u32(&c, &u32, err));
            if (u32 < 1 || (int64_t)u32 > nsamp)
                return fail(err, LRS_E_INCONSISTENT, STSS, foff + at, "sync sample number %u outside 1..%lld", u32,
                            (long long)nsamp);
            is_sync[u32 - 1] = 1;
        }
    } else {
        for (k = 0; k < nsamp; k++) is_sync[k] = 1;
    }

    /* presentation time */
    {
        const i128 mts = info->media_timescale, Mts = info->movie_timescale;
        const i128 E = info->empty_edit_movie_ticks, mt = info->media_time;
        const i128 lim = (i128)1 << 53;
        const int fast = E == 0 && mts < lim; /* exact_seconds' single-rounding case, inline */
        const double dmts = (double)(int64_t)(fast ? mts : 1);
        for (k = 0; k < nsamp; k++) {
            i128 p = (i128)dts[k] + cts[k] - mt;
            if (p > INT64_MAX || p < INT64_MIN)
                return fail(err, LRS_E_OVERFLOW, CTTS, foff, "presentation time of sample %lld overflows int64",
                            (long long)k);
            pts[k] = (int64_t)p;
            if (fast && p < lim && p > -lim)
                pts_s[k] = (double)(int64_t)p / dmts;
            else if (E == 0)
                pts_s[k] = exact_seconds(p, mts);
            else
                pts_s[k] = exact_seconds(p * Mts + E * mts, mts * Mts);
        }
    }
    return LRS_OK;
}
