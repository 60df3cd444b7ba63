/* if_native_model.h - if_native_test.c's reader of llama2.c v0 (fp32) and v2 (Q8) files into
 * if_config / if_weights for its forward command: every read checked against the file's size,
 * every allocation kept for one free. Included once by if_native_test.c, after its helpers
 * (xmalloc); a header of its own so the driver stays one job per file. */
#ifndef IF_NATIVE_MODEL_H
#define IF_NATIVE_MODEL_H

/* ---------------------------------------------------------------------------------------------
 * forward: a llama2.c v0 / v2 reader
 * ------------------------------------------------------------------------------------------- */

typedef struct reader {
    FILE *f;
    const char *path;
    uint64_t size, off;
} reader;

static int rd(reader *r, void *dst, uint64_t n, const char *what) {
    if (n > r->size - r->off) {
        fprintf(stderr, "%s: truncated reading %s (%llu bytes at offset %llu, file has %llu)\n",
                r->path, what, (unsigned long long)n, (unsigned long long)r->off,
                (unsigned long long)r->size);
        return 0;
    }
    if (n && fread(dst, 1, (size_t)n, r->f) != n) {
        fprintf(stderr, "%s: read error in %s\n", r->path, what);
        return 0;
    }
    r->off += n;
    return 1;
}

static float *rd_f32(reader *r, uint64_t n, const char *what) {
    float *p = xmalloc((size_t)n * sizeof(float));
    if (!rd(r, p, n * sizeof(float), what)) {
        free(p);
        return NULL;
    }
    return p;
}

static int32_t le32(const unsigned char *p) {
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                 (uint32_t)p[3] << 24;
    int32_t v;
    memcpy(&v, &u, 4);
    return v;
}

typedef struct model_file {
    int version;
    if_config cfg;
    if_weights w;
    if_layer_weights *layers;
    void *blocks[64]; /* everything allocated, freed at the end */
    size_t n_blocks;
} model_file;

static void *keep(model_file *mf, void *p) {
    if (p && mf->n_blocks < sizeof mf->blocks / sizeof mf->blocks[0]) mf->blocks[mf->n_blocks++] = p;
    return p;
}

static void model_file_free(model_file *mf) {
    for (size_t i = 0; i < mf->n_blocks; i++) free(mf->blocks[i]);
    free(mf->layers);
}

static if_matrix f32_mat(const float *p, size_t rows, size_t cols) {
    if_matrix m = {IF_F32, rows, cols, 0, p, NULL, NULL};
    return m;
}

/* n_layers consecutive Q8 tensors of (rows, cols) each: q (rows*cols int8) then s. */
static int rd_q8_layers(model_file *mf, reader *r, size_t L, size_t rows, size_t cols, size_t gs,
                        size_t field_off, const char *what) {
    uint64_t n = (uint64_t)rows * cols;
    int8_t *q = keep(mf, xmalloc((size_t)(n * L)));
    float *s = keep(mf, xmalloc((size_t)(n / gs * L) * sizeof(float)));
    for (size_t l = 0; l < L; l++) {
        if (!rd(r, q + l * n, n, what) || !rd(r, s + l * (n / gs), n / gs * sizeof(float), what))
            return 0;
        if_matrix *m = (if_matrix *)((char *)&mf->layers[l] + field_off);
        if_matrix mm = {IF_Q8, rows, cols, gs, NULL, q + l * n, s + l * (n / gs)};
        *m = mm;
    }
    return 1;
}

static int load_model(const char *path, model_file *mf) {
    memset(mf, 0, sizeof *mf);
    reader r = {fopen(path, "rb"), path, 0, 0};
    if (!r.f) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return 0;
    }
    int ok = 0;
    long sz = -1;
    if (fseek(r.f, 0, SEEK_END) == 0) sz = ftell(r.f);
    if (sz < 0 || fseek(r.f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "%s: cannot find the file size (not a regular file?)\n", path);
        goto done;
    }
    r.size = (uint64_t)sz;

    unsigned char head[256];
    if (!rd(&r, head, 28, "header")) goto done;
    uint32_t magic = (uint32_t)le32(head);
    int32_t h[7];
    int shared;
    size_t gs = 0;
    if (magic == 0x616b3432u) {
        if (!rd(&r, head + 28, 256 - 28, "v2 header")) goto done;
        int32_t version = le32(head + 4);
        if (version != 2) {
            fprintf(stderr, "%s: llama2.c version %d; this driver reads v0 and v2\n", path,
                    (int)version);
            goto done;
        }
        for (int i = 0; i < 7; i++) h[i] = le32(head + 8 + 4 * i);
        if (head[36] > 1) {
            fprintf(stderr, "%s: shared_classifier byte is %d\n", path, head[36]);
            goto done;
        }
        shared = head[36];
        int32_t g = le32(head + 37);
        if (g <= 0 || g > 65536) {
            fprintf(stderr, "%s: group size %d\n", path, (int)g);
            goto done;
        }
        gs = (size_t)g;
        mf->version = 2;
    } else {
        for (int i = 0; i < 7; i++) h[i] = le32(head + 4 * i);
        shared = h[5] > 0;
        if (h[5] < 0) h[5] = -h[5];
        mf->version = 0;
    }
    static const int32_t caps[7] = {1 << 16, 1 << 20, 1024, 1 << 16, 1 << 16, 1 << 24, 1 << 20};
    static const char *names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads",
                                   "vocab_size", "seq_len"};
    for (int i = 0; i < 7; i++) {
        if (h[i] <= 0 || h[i] > caps[i]) {
            fprintf(stderr, "%s: %s=%d out of range (1..%d); not a llama2.c v0/v2 file?\n", path,
                    names[i], (int)h[i], (int)caps[i]);
            goto done;
        }
    }
    const size_t dim = (size_t)h[0], hidden = (size_t)h[1], L = (size_t)h[2];
    const size_t heads = (size_t)h[3], kvh = (size_t)h[4], vocab = (size_t)h[5];
    const size_t seq = (size_t)h[6];
    if (dim % heads || heads % kvh || (dim / heads) % 2) {
        fprintf(stderr, "%s: bad head layout dim=%zu n_heads=%zu n_kv_heads=%zu\n", path, dim,
                heads, kvh);
        goto done;
    }
    if (gs && (dim % gs || hidden % gs)) {
        fprintf(stderr, "%s: group size %zu does not divide dim=%zu and hidden_dim=%zu\n", path,
                gs, dim, hidden);
        goto done;
    }
    const size_t hs = dim / heads, kv = hs * kvh;
    if_config c = {dim, hidden, L, heads, kvh, vocab, seq, 10000.0f, 1e-5f, 0, 0}; /* global attention */
    mf->cfg = c;

    /* The whole size first: every count is below 2^44, so these sums cannot overflow. */
    uint64_t mats = (uint64_t)L * (2 * dim * dim + 2 * kv * dim + 3 * hidden * dim);
    uint64_t norms = (uint64_t)L * 2 * dim + dim, tok = (uint64_t)vocab * dim, need;
    if (gs == 0) {
        need = 28 + 4 * (tok + norms + mats + (uint64_t)seq * hs + (shared ? 0 : tok));
    } else {
        uint64_t q8 = tok + mats + (shared ? 0 : tok);
        need = 256 + 4 * norms + q8 + 4 * (q8 / gs);
    }
    if (r.size < need) {
        fprintf(stderr, "%s: file is truncated: llama2.c v%d with this header needs %llu bytes, "
                "file has %llu\n", path, mf->version, (unsigned long long)need,
                (unsigned long long)r.size);
        goto done;
    }

    mf->layers = calloc(L, sizeof *mf->layers);
    if (!mf->layers) goto done;
    if (gs == 0) {
        float *t = keep(mf, rd_f32(&r, tok, "token embeddings"));
        float *ra = keep(mf, rd_f32(&r, (uint64_t)L * dim, "rms_att"));
        float *wq = keep(mf, rd_f32(&r, (uint64_t)L * dim * dim, "wq"));
        float *wk = keep(mf, rd_f32(&r, (uint64_t)L * kv * dim, "wk"));
        float *wv = keep(mf, rd_f32(&r, (uint64_t)L * kv * dim, "wv"));
        float *wo = keep(mf, rd_f32(&r, (uint64_t)L * dim * dim, "wo"));
        float *rf = keep(mf, rd_f32(&r, (uint64_t)L * dim, "rms_ffn"));
        float *w1 = keep(mf, rd_f32(&r, (uint64_t)L * hidden * dim, "w1"));
        float *w2 = keep(mf, rd_f32(&r, (uint64_t)L * dim * hidden, "w2"));
        float *w3 = keep(mf, rd_f32(&r, (uint64_t)L * hidden * dim, "w3"));
        float *fin = keep(mf, rd_f32(&r, dim, "rms_final"));
        if (!t || !ra || !wq || !wk || !wv || !wo || !rf || !w1 || !w2 || !w3 || !fin) goto done;
        /* skip the legacy RoPE tables (freq_cis_real, freq_cis_imag) */
        uint64_t skip = (uint64_t)seq * hs * 4;
        if (skip > (uint64_t)0x7fffffff || fseek(r.f, (long)skip, SEEK_CUR) != 0) {
            fprintf(stderr, "%s: cannot skip the RoPE tables\n", path);
            goto done;
        }
        r.off += skip;
        float *cls = t;
        if (!shared && !(cls = keep(mf, rd_f32(&r, tok, "classifier")))) goto done;
        for (size_t l = 0; l < L; l++) {
            if_layer_weights *lw = &mf->layers[l];
            lw->rms_att = ra + l * dim;
            lw->rms_ffn = rf + l * dim;
            lw->wq = f32_mat(wq + l * dim * dim, dim, dim);
            lw->wk = f32_mat(wk + l * kv * dim, kv, dim);
            lw->wv = f32_mat(wv + l * kv * dim, kv, dim);
            lw->wo = f32_mat(wo + l * dim * dim, dim, dim);
            lw->w1 = f32_mat(w1 + l * hidden * dim, hidden, dim);
            lw->w2 = f32_mat(w2 + l * dim * hidden, dim, hidden);
            lw->w3 = f32_mat(w3 + l * hidden * dim, hidden, dim);
        }
        mf->w.tok_embeddings = t;
        mf->w.rms_final = fin;
        mf->w.wcls = f32_mat(cls, vocab, dim);
    } else {
        float *ra = keep(mf, rd_f32(&r, (uint64_t)L * dim, "rms_att"));
        float *rf = keep(mf, rd_f32(&r, (uint64_t)L * dim, "rms_ffn"));
        float *fin = keep(mf, rd_f32(&r, dim, "rms_final"));
        if (!ra || !rf || !fin) goto done;
        int8_t *tq = keep(mf, xmalloc((size_t)tok));
        float *ts = keep(mf, xmalloc((size_t)(tok / gs) * sizeof(float)));
        if (!rd(&r, tq, tok, "token embeddings") ||
            !rd(&r, ts, tok / gs * sizeof(float), "token embedding scales"))
            goto done;
        /* dequantized as runq.c: x[i] = q[i] * s[i / gs] */
        float *t = keep(mf, xmalloc((size_t)tok * sizeof(float)));
        for (uint64_t i = 0; i < tok; i++) t[i] = (float)tq[i] * ts[i / gs];
#define Q8L(field, rows, cols)                                                                \
    if (!rd_q8_layers(mf, &r, L, rows, cols, gs, offsetof(if_layer_weights, field), #field)) \
        goto done;
        Q8L(wq, dim, dim)
        Q8L(wk, kv, dim)
        Q8L(wv, kv, dim)
        Q8L(wo, dim, dim)
        Q8L(w1, hidden, dim)
        Q8L(w2, dim, hidden)
        Q8L(w3, hidden, dim)
#undef Q8L
        if_matrix cls = {IF_Q8, vocab, dim, gs, NULL, tq, ts};
        if (!shared) {
            int8_t *cq = keep(mf, xmalloc((size_t)tok));
            float *cs = keep(mf, xmalloc((size_t)(tok / gs) * sizeof(float)));
            if (!rd(&r, cq, tok, "classifier") ||
                !rd(&r, cs, tok / gs * sizeof(float), "classifier scales"))
                goto done;
            cls.q = cq;
            cls.s = cs;
        }
        for (size_t l = 0; l < L; l++) {
            mf->layers[l].rms_att = ra + l * dim;
            mf->layers[l].rms_ffn = rf + l * dim;
        }
        mf->w.tok_embeddings = t;
        mf->w.rms_final = fin;
        mf->w.wcls = cls;
    }
    mf->w.layers = mf->layers;
    if (r.off != r.size)
        fprintf(stderr, "note: %s has %llu bytes after the last tensor\n", path,
                (unsigned long long)(r.size - r.off));
    ok = 1;
done:
    if (!ok && ferror(r.f)) fprintf(stderr, "%s: read error\n", path);
    fclose(r.f);
    if (!ok) model_file_free(mf);
    return ok;
}

#endif
