/* Mini-MP4 synthesis (see mp4_synth.h). Layout:
 *   ftyp | moov( mvhd v1 | trak( tkhd v1 | edts(elst v1) | mdia( mdhd v1 | hdlr |
 *          minf( vmhd | dinf(dref(url )) | stbl( stsd | stts | [ctts] | [stss] | stsz | stsc | stco/co64 ))))) | mdat
 * Every sample is its own chunk (stsc = one entry (1, 1, 1)); chunk offsets are rebased onto mdat.
 */
#include <string.h>
#include "mp4_synth.h"

#define U32MAX 0xFFFFFFFFLL

typedef struct {
    uint8_t *out;  /* NULL: count only */
    int64_t pos;
} wr;

static void put8(wr *w, uint32_t v) { if (w->out) w->out[w->pos] = (uint8_t)v; w->pos += 1; }
static void put16(wr *w, uint32_t v) { put8(w, v >> 8); put8(w, v); }
static void put32(wr *w, uint32_t v) { put16(w, v >> 16); put16(w, v & 0xFFFF); }
static void put64(wr *w, uint64_t v) { put32(w, (uint32_t)(v >> 32)); put32(w, (uint32_t)(v & U32MAX)); }
static void putn(wr *w, const uint8_t *p, int64_t n) { if (w->out) memcpy(w->out + w->pos, p, (size_t)n); w->pos += n; }
static void zeros(wr *w, int64_t n) { if (w->out) memset(w->out + w->pos, 0, (size_t)n); w->pos += n; }
static uint32_t fourcc(const char *s) { return ((uint32_t)s[0] << 24) | ((uint32_t)s[1] << 16) | ((uint32_t)s[2] << 8) | (uint32_t)s[3]; }

/* Box header for a payload of `payload` bytes: 8 bytes, or 16 (largesize) past 32 bits. */
static int64_t hdr_len(int64_t payload) { return payload + 8 > U32MAX ? 16 : 8; }
static int64_t box_len(int64_t payload) { return payload + hdr_len(payload); }
static void put_hdr(wr *w, const char *type, int64_t payload) {
    if (payload + 8 > U32MAX) { put32(w, 1); put32(w, fourcc(type)); put64(w, (uint64_t)(payload + 16)); }
    else { put32(w, (uint32_t)(payload + 8)); put32(w, fourcc(type)); }
}

static int64_t runs(const int64_t *v, int64_t n) {
    int64_t r = n > 0 ? 1 : 0;
    for (int64_t i = 1; i < n; i++) r += v[i] != v[i - 1];
    return r;
}

/* The source's display matrices, verbatim: FFmpeg multiplies tkhd's by mvhd's and rotates or
 * flips decoded frames by the product, so the mini-MP4 must carry both unchanged. */
static void put_matrix(wr *w, const int32_t m[9]) {
    for (int i = 0; i < 9; i++) put32(w, (uint32_t)m[i]);
}

/* Payload sizes of the fixed boxes (version 1 where there is a version). */
#define MVHD_P 112
#define TKHD_P 96
#define MDHD_P 36
#define HDLR_P 37   /* 4 + 4 + 4 + 12 + "VideoHandler\0" */
#define VMHD_P 12
#define ELST_P 28
#define FTYP_P 24   /* major, minor, 4 compatible brands */

typedef struct {
    int64_t stts_p, ctts_p, stss_p, stsz_p, stsc_p, co_p, stsd_p, stbl_p, minf_p, mdia_p, edts_p,
        trak_p, moov_p, dinf_p, nsync, stts_runs, ctts_runs;
    int has_ctts, ctts_v1, has_stss;
} layout;

static void plan(const lrs_synth_in *in, int co64, layout *L) {
    int64_t n = in->n;
    L->stts_runs = 0;
    /* stts run count over durations */
    L->stts_runs = runs(in->duration, n);
    L->stts_p = 8 + 8 * L->stts_runs;
    L->has_ctts = 0; L->ctts_v1 = 0;
    for (int64_t i = 0; i < n; i++) { if (in->cts[i] != 0) L->has_ctts = 1; if (in->cts[i] < 0) L->ctts_v1 = 1; }
    L->ctts_runs = L->has_ctts ? runs(in->cts, n) : 0;
    L->ctts_p = 8 + 8 * L->ctts_runs;
    L->nsync = 0;
    for (int64_t i = 0; i < n; i++) L->nsync += in->is_sync[i] != 0;
    L->has_stss = L->nsync != n;
    L->stss_p = 8 + 4 * L->nsync;
    L->stsz_p = 12 + 4 * n;
    L->stsc_p = 8 + 12;
    L->co_p = 8 + (co64 ? 8 : 4) * n;
    L->stsd_p = in->stsd_len;
    L->stbl_p = box_len(L->stsd_p) + box_len(L->stts_p) + (L->has_ctts ? box_len(L->ctts_p) : 0) +
                (L->has_stss ? box_len(L->stss_p) : 0) + box_len(L->stsz_p) + box_len(L->stsc_p) + box_len(L->co_p);
    L->dinf_p = box_len(8 + box_len(4));  /* dref: ver/flags + count + url (ver/flags) */
    L->minf_p = box_len(VMHD_P) + box_len(L->dinf_p) + box_len(L->stbl_p);
    L->mdia_p = box_len(MDHD_P) + box_len(HDLR_P) + box_len(L->minf_p);
    L->edts_p = box_len(ELST_P);
    L->trak_p = box_len(TKHD_P) + box_len(L->edts_p) + box_len(L->mdia_p);
    L->moov_p = box_len(MVHD_P) + box_len(L->trak_p);
}

int64_t lrs_synth_header(const lrs_synth_in *in, uint8_t *out, int *use_co64) {
    if (in->n < 1 || in->stsd_len < 8 || in->media_timescale <= 0 || in->media_timescale > U32MAX ||
        in->payload_len < 0 || in->edit_duration < 0 || in->track_id <= 0 || in->track_id >= U32MAX)
        return -1;
    int64_t total_dur = 0, max_rel = 0;
    for (int64_t i = 0; i < in->n; i++) {
        if (in->size[i] < 0 || in->size[i] > U32MAX || in->duration[i] < 0 || in->duration[i] > U32MAX) return -1;
        if (in->cts[i] < -2147483648LL || in->cts[i] > 2147483647LL) return -1;
        if (in->rel_offset[i] < 0 || in->rel_offset[i] + in->size[i] > in->payload_len) return -2;
        if (in->rel_offset[i] > max_rel) max_rel = in->rel_offset[i];
        total_dur += in->duration[i];
    }
    /* Fixed point of the chunk-offset width: co64 only grows the moov, so two rounds settle it. */
    layout L;
    int co64 = 0;
    int64_t head = 0;
    for (int it = 0; it < 3; it++) {
        plan(in, co64, &L);
        head = box_len(FTYP_P) + box_len(L.moov_p) + hdr_len(in->payload_len);
        int need = head + max_rel > U32MAX;
        if (need == co64) break;
        co64 = need;
    }
    *use_co64 = co64;
    if (!out) return head;

    wr w = {out, 0};
    put_hdr(&w, "ftyp", FTYP_P);
    put32(&w, fourcc("isom")); put32(&w, 0x200);
    put32(&w, fourcc("isom")); put32(&w, fourcc("iso2")); put32(&w, in->brand); put32(&w, fourcc("mp41"));

    put_hdr(&w, "moov", L.moov_p);
    put_hdr(&w, "mvhd", MVHD_P);
    put32(&w, 0x01000000); put64(&w, 0); put64(&w, 0);
    put32(&w, (uint32_t)in->media_timescale); put64(&w, (uint64_t)in->edit_duration);
    put32(&w, 0x00010000); put16(&w, 0x0100); zeros(&w, 10); put_matrix(&w, in->movie_matrix); zeros(&w, 24);
    put32(&w, (uint32_t)(in->track_id + 1));

    put_hdr(&w, "trak", L.trak_p);
    put_hdr(&w, "tkhd", TKHD_P);
    put32(&w, 0x01000007); put64(&w, 0); put64(&w, 0); put32(&w, (uint32_t)in->track_id); put32(&w, 0);
    put64(&w, (uint64_t)in->edit_duration); zeros(&w, 8); put16(&w, 0); put16(&w, 0); put16(&w, 0); put16(&w, 0);
    put_matrix(&w, in->matrix);
    put32(&w, (uint32_t)((in->width & 0xFFFF) << 16)); put32(&w, (uint32_t)((in->height & 0xFFFF) << 16));

    put_hdr(&w, "edts", L.edts_p);
    put_hdr(&w, "elst", ELST_P);
    put32(&w, 0x01000000); put32(&w, 1);
    put64(&w, (uint64_t)in->edit_duration); put64(&w, (uint64_t)in->edit_media_time); put16(&w, 1); put16(&w, 0);

    put_hdr(&w, "mdia", L.mdia_p);
    put_hdr(&w, "mdhd", MDHD_P);
    put32(&w, 0x01000000); put64(&w, 0); put64(&w, 0);
    put32(&w, (uint32_t)in->media_timescale); put64(&w, (uint64_t)total_dur); put16(&w, 0x55C4); put16(&w, 0);
    put_hdr(&w, "hdlr", HDLR_P);
    put32(&w, 0); put32(&w, 0); put32(&w, fourcc("vide")); zeros(&w, 12); putn(&w, (const uint8_t *)"VideoHandler", 13);

    put_hdr(&w, "minf", L.minf_p);
    put_hdr(&w, "vmhd", VMHD_P);
    put32(&w, 1); zeros(&w, 8);
    put_hdr(&w, "dinf", L.dinf_p);
    put_hdr(&w, "dref", 8 + box_len(4));
    put32(&w, 0); put32(&w, 1);
    put_hdr(&w, "url ", 4); put32(&w, 1);

    put_hdr(&w, "stbl", L.stbl_p);
    put_hdr(&w, "stsd", L.stsd_p); putn(&w, in->stsd, in->stsd_len);
    put_hdr(&w, "stts", L.stts_p);
    put32(&w, 0); put32(&w, (uint32_t)L.stts_runs);
    for (int64_t i = 0; i < in->n;) {
        int64_t j = i;
        while (j < in->n && in->duration[j] == in->duration[i]) j++;
        put32(&w, (uint32_t)(j - i)); put32(&w, (uint32_t)in->duration[i]);
        i = j;
    }
    if (L.has_ctts) {
        put_hdr(&w, "ctts", L.ctts_p);
        put32(&w, L.ctts_v1 ? 0x01000000 : 0); put32(&w, (uint32_t)L.ctts_runs);
        for (int64_t i = 0; i < in->n;) {
            int64_t j = i;
            while (j < in->n && in->cts[j] == in->cts[i]) j++;
            put32(&w, (uint32_t)(j - i)); put32(&w, (uint32_t)(int32_t)in->cts[i]);
            i = j;
        }
    }
    if (L.has_stss) {
        put_hdr(&w, "stss", L.stss_p);
        put32(&w, 0); put32(&w, (uint32_t)L.nsync);
        for (int64_t i = 0; i < in->n; i++) if (in->is_sync[i]) put32(&w, (uint32_t)(i + 1));
    }
    put_hdr(&w, "stsz", L.stsz_p);
    put32(&w, 0); put32(&w, 0); put32(&w, (uint32_t)in->n);
    for (int64_t i = 0; i < in->n; i++) put32(&w, (uint32_t)in->size[i]);
    put_hdr(&w, "stsc", L.stsc_p);
    put32(&w, 0); put32(&w, 1); put32(&w, 1); put32(&w, 1); put32(&w, 1);
    int64_t data_off = head;
    put_hdr(&w, co64 ? "co64" : "stco", L.co_p);
    put32(&w, 0); put32(&w, (uint32_t)in->n);
    for (int64_t i = 0; i < in->n; i++) {
        if (co64) put64(&w, (uint64_t)(data_off + in->rel_offset[i]));
        else put32(&w, (uint32_t)(data_off + in->rel_offset[i]));
    }
    put_hdr(&w, "mdat", in->payload_len);
    return w.pos == head ? head : -3;
}
