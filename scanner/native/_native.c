/*
 * The record walker's per-record work in C: framing, header parse, CRC32C and CRC32 digests, the comparison
 * with the stored digest, and the match with the index's locations. scanner/scan/record_walk_in_c.py drives it
 * chunk by chunk; scanner/scan/record_walk_in_python.py is the reference it must agree with.
 *
 * A call walks the records of one chunk (a buffer holding bytes [base, base + len) of the file) from a record
 * boundary, with the GIL released, and returns at the first thing it cannot decide alone: a pace stop, a record
 * that does not lie whole in the chunk, an irregular record, a ledger it has not been told about, the end of a
 * window of locations, a digest failure, a record Python verifies (MAC), or a full list of index faults. Every
 * length and offset read from the chunk is checked against the chunk before it is used.
 *
 * The index's `.idx` files are read here too, a window of small ones per call (see the section on them), and the
 * index's locations sorted and merged for the walks.
 *
 * CRC32C uses SSE4.2 (three interleaved lanes over long stretches) when the CPU has it, checked at import;
 * otherwise, and for CRC32, tables eight bytes at a time. MAC digests are HMAC-SHA1, SHA-1 written out here.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
#define HAVE_X86_CRC32C 1
#endif

/* What only Linux has, guarded so that the rest (the record walker above all) builds on any POSIX system with GCC or
 * Clang. The `.idx` listing reads directories with glibc's getdents64 (since 2.30); without it list_index_files is not
 * built and indexfile.py lists them. Without O_NOATIME files open plainly; without posix_fadvise nothing is advised.
 * Without a thread's count of blocks read the process's is taken, and not trusted (READS_COUNTED: /proc/self/io). */
#if defined(__linux__) && defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 30)
#define HAVE_GETDENTS64 1
#endif
#ifndef O_NOATIME
#define O_NOATIME 0
#endif
#ifndef RUSAGE_THREAD
#define RUSAGE_THREAD RUSAGE_SELF
#endif
#ifndef POSIX_FADV_WILLNEED
#define POSIX_FADV_WILLNEED 0
#define POSIX_FADV_DONTNEED 0
static int posix_fadvise(int fd, off_t offset, off_t length, int advice) { return 0; }
#endif

/* ---- CRCs on the raw register (callers invert before and after, as zlib and crc32c do) ---------------- */

#define CRC32C_POLY 0x82F63B78u /* Castagnoli, reflected */
#define CRC32_POLY 0xEDB88320u  /* IEEE 802.3 (zlib), reflected */

static uint32_t crc32c_table[8][256];
static uint32_t crc32_table[8][256];

static void fill_table(uint32_t table[8][256], uint32_t poly) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
        table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 1; k < 8; k++)
            table[k][n] = (table[k - 1][n] >> 8) ^ table[0][table[k - 1][n] & 0xff];
}

static inline uint64_t load_le64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* Eight bytes a step through eight tables (the portable path). */
static uint32_t crc_tables(uint32_t table[8][256], uint32_t reg, const uint8_t *p, size_t n) {
    while (n >= 8) {
        uint64_t v = load_le64(p) ^ reg;
        reg = table[7][v & 0xff] ^ table[6][(v >> 8) & 0xff] ^ table[5][(v >> 16) & 0xff] ^
              table[4][(v >> 24) & 0xff] ^ table[3][(v >> 32) & 0xff] ^ table[2][(v >> 40) & 0xff] ^
              table[1][(v >> 48) & 0xff] ^ table[0][v >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        reg = (reg >> 8) ^ table[0][(reg ^ *p++) & 0xff];
    return reg;
}

static uint32_t crc32c_portable(uint32_t reg, const uint8_t *p, size_t n) { return crc_tables(crc32c_table, reg, p, n); }
static uint32_t crc32_raw(uint32_t reg, const uint8_t *p, size_t n) { return crc_tables(crc32_table, reg, p, n); }

#ifdef HAVE_X86_CRC32C
/* Three lanes of LANE bytes are CRCed side by side (the instruction's latency is three times its throughput),
 * then joined: the register after A then B is shift_B(register after A) ^ (register of B from zero), where
 * shift_B is what LANE zero bytes do to a register: a linear map, kept as four byte tables. */
#define LONG_LANE 4096
#define SHORT_LANE 256
static uint32_t long_shift[4][256];
static uint32_t short_shift[4][256];

static void fill_shift(uint32_t shift[4][256], size_t lane) {
    static const uint8_t zeros[LONG_LANE];
    uint32_t bit[32];
    for (int b = 0; b < 32; b++)
        bit[b] = crc32c_portable(1u << b, zeros, lane);
    for (int k = 0; k < 4; k++)
        for (uint32_t v = 0; v < 256; v++) {
            uint32_t r = 0;
            for (int b = 0; b < 8; b++)
                if (v & (1u << b))
                    r ^= bit[8 * k + b];
            shift[k][v] = r;
        }
}

static inline uint32_t shifted(uint32_t shift[4][256], uint32_t reg) {
    return shift[0][reg & 0xff] ^ shift[1][(reg >> 8) & 0xff] ^ shift[2][(reg >> 16) & 0xff] ^ shift[3][reg >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_lanes(uint32_t reg, const uint8_t *p, size_t lane,
                                                               uint32_t shift[4][256]) {
    uint64_t a = reg, b = 0, c = 0;
    for (size_t i = 0; i < lane; i += 8) {
        uint64_t x, y, z;
        memcpy(&x, p + i, 8);
        memcpy(&y, p + lane + i, 8);
        memcpy(&z, p + 2 * lane + i, 8);
        a = _mm_crc32_u64(a, x);
        b = _mm_crc32_u64(b, y);
        c = _mm_crc32_u64(c, z);
    }
    return shifted(shift, shifted(shift, (uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)c;
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t reg, const uint8_t *p, size_t n) {
    while (n >= 3 * LONG_LANE) {
        reg = crc32c_lanes(reg, p, LONG_LANE, long_shift);
        p += 3 * LONG_LANE;
        n -= 3 * LONG_LANE;
    }
    while (n >= 3 * SHORT_LANE) {
        reg = crc32c_lanes(reg, p, SHORT_LANE, short_shift);
        p += 3 * SHORT_LANE;
        n -= 3 * SHORT_LANE;
    }
    uint64_t r = reg;
    while (n >= 8) {
        uint64_t x;
        memcpy(&x, p, 8);
        r = _mm_crc32_u64(r, x);
        p += 8;
        n -= 8;
    }
    reg = (uint32_t)r;
    if (n >= 4) { /* the tail in as few steps as its length allows: each step waits for the one before */
        uint32_t x;
        memcpy(&x, p, 4);
        reg = _mm_crc32_u32(reg, x);
        p += 4, n -= 4;
    }
    if (n >= 2) {
        uint16_t x;
        memcpy(&x, p, 2);
        reg = _mm_crc32_u16(reg, x);
        p += 2, n -= 2;
    }
    if (n)
        reg = _mm_crc32_u8(reg, *p);
    return reg;
}
#endif

static uint32_t (*crc32c_raw)(uint32_t, const uint8_t *, size_t) = crc32c_portable;
static const char *crc32c_kind = "portable";

/* ---- big-endian fields of a record ------------------------------------------------------------------- */

static inline uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t be64(const uint8_t *p) { return ((uint64_t)be32(p) << 32) | be32(p + 4); }

/* A record: its length (4 bytes), then the stored entry: ledgerId, entryId, lastAddConfirmed, length (8 bytes
 * each: the 32-byte entry header), the digest, the payload. The digest covers the header and the payload. */
#define LENGTH_PREFIX 4
#define RECORD_START (LENGTH_PREFIX + 16)
#define ENTRY_HEADER 32
#define CRC32C_DIGEST 4
#define CRC32_DIGEST 8

/* ---- SHA-1 and HMAC-SHA1 (BookKeeper's MAC digest) ------------------------------------------------------ */

typedef struct {
    uint32_t h[5];
} Sha1State;

static inline uint32_t rol(uint32_t v, int n) { return (v << n) | (v >> (32 - n)); }

/* One 64-byte block: the message schedule kept in 16 words, the rounds unrolled five at a time (the variables
 * rotate by name, not by copying), the round functions without branches. */
#define SHA1_W(i) (w[(i) & 15] = rol(w[((i) + 13) & 15] ^ w[((i) + 8) & 15] ^ w[((i) + 2) & 15] ^ w[(i) & 15], 1))
#define SHA1_CH(b, c, d) ((d) ^ ((b) & ((c) ^ (d))))
#define SHA1_PARITY(b, c, d) ((b) ^ (c) ^ (d))
#define SHA1_MAJ(b, c, d) (((b) & (c)) | ((d) & ((b) | (c))))
#define SHA1_ROUND(f, k, a, b, c, d, e, wi) (e += rol(a, 5) + f(b, c, d) + (k) + (wi), b = rol(b, 30))
#define SHA1_FIVE(f, k, i, word)                                                                                   \
    (SHA1_ROUND(f, k, a, b, c, d, e, word(i)), SHA1_ROUND(f, k, e, a, b, c, d, word((i) + 1)),                      \
     SHA1_ROUND(f, k, d, e, a, b, c, word((i) + 2)), SHA1_ROUND(f, k, c, d, e, a, b, word((i) + 3)),                \
     SHA1_ROUND(f, k, b, c, d, e, a, word((i) + 4)))
#define SHA1_GIVEN(i) w[(i) & 15]

static void sha1_block(uint32_t h[5], const uint8_t *p) {
    uint32_t w[16];
    for (int i = 0; i < 16; i++)
        w[i] = be32(p + 4 * i);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 15; i += 5)
        SHA1_FIVE(SHA1_CH, 0x5A827999u, i, SHA1_GIVEN);
    SHA1_ROUND(SHA1_CH, 0x5A827999u, a, b, c, d, e, w[15]);
    SHA1_ROUND(SHA1_CH, 0x5A827999u, e, a, b, c, d, SHA1_W(16));
    SHA1_ROUND(SHA1_CH, 0x5A827999u, d, e, a, b, c, SHA1_W(17));
    SHA1_ROUND(SHA1_CH, 0x5A827999u, c, d, e, a, b, SHA1_W(18));
    SHA1_ROUND(SHA1_CH, 0x5A827999u, b, c, d, e, a, SHA1_W(19));
    for (int i = 20; i < 40; i += 5)
        SHA1_FIVE(SHA1_PARITY, 0x6ED9EBA1u, i, SHA1_W);
    for (int i = 40; i < 60; i += 5)
        SHA1_FIVE(SHA1_MAJ, 0x8F1BBCDCu, i, SHA1_W);
    for (int i = 60; i < 80; i += 5)
        SHA1_FIVE(SHA1_PARITY, 0xCA62C1D6u, i, SHA1_W);
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
}

/* SHA-1 of `prefix` (64 bytes already in `state`), then the pieces, finished into `out`. */
static void sha1_finish(Sha1State state, const uint8_t *pieces[], const size_t sizes[], int count, uint8_t out[20]) {
    uint8_t block[64];
    size_t used = 0;
    uint64_t total = 64;
    for (int i = 0; i < count; i++) {
        const uint8_t *p = pieces[i];
        size_t n = sizes[i];
        total += n;
        while (n > 0) {
            if (used == 0 && n >= 64) {
                sha1_block(state.h, p);
                p += 64, n -= 64;
                continue;
            }
            size_t take = 64 - used < n ? 64 - used : n;
            memcpy(block + used, p, take);
            used += take, p += take, n -= take;
            if (used == 64) {
                sha1_block(state.h, block);
                used = 0;
            }
        }
    }
    block[used++] = 0x80;
    if (used > 56) {
        memset(block + used, 0, 64 - used);
        sha1_block(state.h, block);
        used = 0;
    }
    memset(block + used, 0, 56 - used);
    uint64_t bits = total * 8;
    for (int i = 0; i < 8; i++)
        block[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    sha1_block(state.h, block);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 4; j++)
            out[4 * i + j] = (uint8_t)(state.h[i] >> (24 - 8 * j));
}

/* An HMAC-SHA1 key (up to 64 bytes: BookKeeper's is SHA-1 of "mac" and the password) as the two states after
 * its padded blocks, so each entry costs its own blocks only. */
typedef struct {
    Sha1State inner, outer;
} MacKey;

static void mac_key_from(MacKey *mac, const uint8_t *key, size_t length) {
    uint8_t pad[64];
    const Sha1State start = {{0x67452301u, 0xEFCDAB89u, 0x98BADCFEu, 0x10325476u, 0xC3D2E1F0u}};
    mac->inner = start, mac->outer = start;
    for (int i = 0; i < 64; i++)
        pad[i] = (uint8_t)((i < (int)length ? key[i] : 0) ^ 0x36);
    sha1_block(mac->inner.h, pad);
    for (int i = 0; i < 64; i++)
        pad[i] = (uint8_t)((i < (int)length ? key[i] : 0) ^ 0x5c);
    sha1_block(mac->outer.h, pad);
}

#define MAC_DIGEST 20

static int mac_holds(const MacKey *mac, const uint8_t *entry, int64_t length) {
    if (length < ENTRY_HEADER + MAC_DIGEST)
        return 0;
    uint8_t inner[20], outer[20];
    const uint8_t *pieces[2] = {entry, entry + ENTRY_HEADER + MAC_DIGEST};
    size_t sizes[2] = {ENTRY_HEADER, (size_t)(length - ENTRY_HEADER - MAC_DIGEST)};
    sha1_finish(mac->inner, pieces, sizes, 2, inner);
    const uint8_t *digest[1] = {inner};
    size_t digest_size[1] = {20};
    sha1_finish(mac->outer, digest, digest_size, 1, outer);
    return memcmp(outer, entry + ENTRY_HEADER, MAC_DIGEST) == 0;
}

enum method { SKIP = 0, CRC32C = 1, CRC32 = 2, DUMMY = 3, PYTHON = 4, HMAC = 5 };

static int digest_holds(int method, const uint8_t *entry, int64_t length) {
    if (method == CRC32C) {
        if (length < ENTRY_HEADER + CRC32C_DIGEST)
            return 0;
        uint32_t reg = crc32c_raw(0xFFFFFFFFu, entry, ENTRY_HEADER);
        reg = crc32c_raw(reg, entry + ENTRY_HEADER + CRC32C_DIGEST, (size_t)(length - ENTRY_HEADER - CRC32C_DIGEST));
        return ~reg == be32(entry + ENTRY_HEADER);
    }
    if (method == CRC32) {
        if (length < ENTRY_HEADER + CRC32_DIGEST)
            return 0;
        uint32_t reg = crc32_raw(0xFFFFFFFFu, entry, ENTRY_HEADER);
        reg = crc32_raw(reg, entry + ENTRY_HEADER + CRC32_DIGEST, (size_t)(length - ENTRY_HEADER - CRC32_DIGEST));
        return (uint64_t)(uint32_t)~reg == be64(entry + ENTRY_HEADER);
    }
    return length >= ENTRY_HEADER; /* DUMMY: only the header must be there */
}

/* ---- the ledgers of one walk: how each is verified, and the bytes of its records ---------------------- */

typedef struct {
    uint64_t ledger;
    uint64_t bytes;
    uint32_t key; /* HMAC: the index of its key among the walker's keys */
    uint8_t method;
    uint8_t used;
} Ledger;

typedef struct {
    Ledger *slots;
    size_t capacity; /* a power of two */
    size_t count;
} Ledgers;

static inline size_t slot_of(const Ledgers *l, uint64_t ledger) {
    return (size_t)((ledger * 0x9E3779B97F4A7C15ull) >> 16) & (l->capacity - 1);
}

static Ledger *find_ledger(const Ledgers *l, uint64_t ledger) {
    if (l->capacity == 0)
        return NULL;
    for (size_t i = slot_of(l, ledger);; i = (i + 1) & (l->capacity - 1)) {
        Ledger *s = &l->slots[i];
        if (!s->used)
            return NULL;
        if (s->ledger == ledger)
            return s;
    }
}

/* The table grows inside walk() too, where the GIL is released (a ledger learned from the pass's table): the raw
 * allocator, the one that needs no GIL, for its slots wherever they are allocated or freed. */
static int grow_ledgers(Ledgers *l) {
    size_t capacity = l->capacity ? l->capacity * 2 : 64;
    Ledger *slots = PyMem_RawCalloc(capacity, sizeof(Ledger));
    if (slots == NULL)
        return -1;
    Ledgers bigger = {slots, capacity, 0};
    for (size_t i = 0; i < l->capacity; i++)
        if (l->slots[i].used) {
            size_t j = slot_of(&bigger, l->slots[i].ledger);
            while (slots[j].used)
                j = (j + 1) & (capacity - 1);
            slots[j] = l->slots[i];
        }
    PyMem_RawFree(l->slots);
    bigger.count = l->count;
    *l = bigger;
    return 0;
}

static int add_ledger(Ledgers *l, uint64_t ledger, int method, uint32_t key) {
    Ledger *s = find_ledger(l, ledger);
    if (s != NULL) {
        s->method = (uint8_t)method;
        s->key = key;
        return 0;
    }
    if (2 * (l->count + 1) > l->capacity && grow_ledgers(l) < 0)
        return -1;
    size_t i = slot_of(l, ledger);
    while (l->slots[i].used)
        i = (i + 1) & (l->capacity - 1);
    l->slots[i] = (Ledger){ledger, 0, key, (uint8_t)method, 1};
    l->count++;
    return 0;
}

/* ---- the walker ------------------------------------------------------------------------------------- */

enum status {
    PACE = 0,        /* the walk reached the pace stop */
    NEED_BYTES = 1,  /* the record at pos needs `a` bytes from pos that the chunk does not hold */
    IRREGULAR = 2,   /* the record at pos is not a plausible entry record: the entry log judges it */
    NEED_LEDGER = 3, /* ledger `a` (of the record at pos) is not known: learn() it */
    NEED_WINDOW = 4, /* the window of locations is used up: set_window() the next */
    FAILED = 5,      /* the record before pos failed its digest: (ledger a, entry b, at pos c, length d, indexed e) */
    PY_RECORD = 6,   /* the record before pos is Python's to verify: as FAILED, and f its entry's offset in the chunk */
    FAULTS_FULL = 7, /* take_index_faults() before going on */
};

enum fault { NOT_A_RECORD_START = 0, ANOTHER_ENTRY = 1 };

typedef struct {
    uint64_t pos, ledger, entry, found_ledger, found_entry;
    int kind;
} Fault;

#define MAX_FAULTS 256

typedef struct {
    PyObject_HEAD
    int64_t end;        /* where the record region ends */
    int64_t max_length; /* the largest record length a bookie writes */
    Ledgers ledgers;
    Ledger *last; /* the ledger of the previous record: records of one ledger mostly come in runs */
    Py_buffer window[3]; /* positions, ledger ids, entry ids (uint64) */
    int have_window;
    size_t window_count, j;
    uint64_t window_end, next; /* the next location's pos, or the window's end once it is used up */
    uint64_t matched;          /* body pos of the record the join last found indexed */
    int64_t walked[4];         /* the last record walked: body pos, ledger, entry, length (pos -1: none yet) */
    uint64_t verified, skipped, failed;
    Fault faults[MAX_FAULTS];
    size_t fault_count;
    MacKey *keys; /* the keys of the MAC ledgers met */
    size_t key_count, key_capacity;
    /* The pass's ledger table (use_table): a ledger met that is not learned yet is looked up there first. */
    Py_buffer table_ids, table_kinds; /* sorted uint64 ids; each one's kind number (1 or 4 bytes) */
    Py_buffer table_asked;            /* sorted uint64 ids of the table that Python answers for */
    int have_table;
    uint8_t *kind_method; /* per kind: how its ledgers are verified; PYTHON: ask Python (learn()) */
    uint32_t *kind_key;   /* per kind: its MAC key's index among keys */
    size_t kind_count;
    int busy;
} Walker;

static void release_window(Walker *w) {
    if (w->have_window)
        for (int i = 0; i < 3; i++)
            PyBuffer_Release(&w->window[i]);
    w->have_window = 0;
    w->window_count = w->j = 0;
}

static void release_table(Walker *w) {
    if (w->have_table) {
        PyBuffer_Release(&w->table_ids);
        PyBuffer_Release(&w->table_kinds);
        PyBuffer_Release(&w->table_asked);
    }
    w->have_table = 0;
    PyMem_Free(w->kind_method);
    PyMem_Free(w->kind_key);
    w->kind_method = NULL, w->kind_key = NULL, w->kind_count = 0;
}

static void Walker_dealloc(Walker *w) {
    release_window(w);
    release_table(w);
    PyMem_RawFree(w->ledgers.slots);
    PyMem_Free(w->keys);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static int Walker_init(Walker *w, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"end", "max_length", NULL};
    long long end, max_length;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "LL", names, &end, &max_length))
        return -1;
    if (end < 0 || max_length < ENTRY_HEADER || max_length > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "end must be >= 0 and max_length within [32, 2^31)");
        return -1;
    }
    w->end = end;
    w->max_length = max_length;
    w->window_end = w->next = 0; /* the first record asks for a window */
    w->matched = UINT64_MAX;
    w->walked[0] = -1;
    return 0;
}

static inline const uint64_t *column(Walker *w, int i) { return (const uint64_t *)w->window[i].buf; }

/* The index's locations up to the record at `body`: those passed are faults, the one at `body` (if it names
 * this entry) marks it indexed. Returns a status when it must stop first, else -1. */
static int join(Walker *w, uint64_t body, uint64_t ledger, uint64_t entry, int *indexed) {
    *indexed = w->matched == body;
    while (body >= w->next) {
        if (w->j >= w->window_count)
            return NEED_WINDOW;
        uint64_t expected = column(w, 0)[w->j], el = column(w, 1)[w->j], ee = column(w, 2)[w->j];
        if (expected < body || el != ledger || ee != entry) {
            if (w->fault_count == MAX_FAULTS)
                return FAULTS_FULL;
            Fault *f = &w->faults[w->fault_count++];
            if (expected < body)
                *f = (Fault){expected, el, ee, 0, 0, NOT_A_RECORD_START};
            else
                *f = (Fault){body, el, ee, ledger, entry, ANOTHER_ENTRY};
        } else {
            *indexed = 1;
            w->matched = body;
        }
        w->j++;
        w->next = w->j < w->window_count ? column(w, 0)[w->j] : w->window_end;
    }
    return -1;
}

typedef struct {
    int status;
    int64_t pos;
    uint64_t a, b;
    int64_t c, d, e, f;
} Stop;

/* Where `value` is in the sorted uint64 column, or -1. */
static Py_ssize_t position_in(const Py_buffer *column, uint64_t value) {
    const uint64_t *values = column->buf;
    size_t low = 0, high = (size_t)(column->len / 8);
    while (low < high) {
        size_t middle = low + (high - low) / 2;
        if (values[middle] < value)
            low = middle + 1;
        else
            high = middle;
    }
    return low < (size_t)(column->len / 8) && values[low] == value ? (Py_ssize_t)low : -1;
}

/* The ledger learned from the pass's table, when the table has it, Python does not answer for it and its kind is
 * verified here; else NULL. */
static Ledger *learned_from_table(Walker *w, uint64_t ledger) {
    if (!w->have_table)
        return NULL;
    Py_ssize_t at = position_in(&w->table_ids, ledger);
    if (at < 0 || position_in(&w->table_asked, ledger) >= 0)
        return NULL;
    size_t kind = w->table_kinds.itemsize == 1 ? ((const uint8_t *)w->table_kinds.buf)[at]
                                                : ((const uint32_t *)w->table_kinds.buf)[at];
    if (kind >= w->kind_count || w->kind_method[kind] == PYTHON)
        return NULL;
    w->last = NULL; /* slots move when the table grows */
    if (add_ledger(&w->ledgers, ledger, w->kind_method[kind], w->kind_key[kind]) < 0)
        return NULL; /* out of memory: Python's learn() raises */
    return find_ledger(&w->ledgers, ledger);
}

/* Walks records of `chunk` (file bytes [base, base + len)) from `pos` until something stops it. */
static Stop walk_chunk(Walker *w, const uint8_t *chunk, int64_t base, int64_t len, int64_t pos, int64_t stop) {
    for (;;) {
        if (pos >= stop)
            return (Stop){PACE, pos};
        int64_t at = pos - base;
        if (len - at < RECORD_START)
            return (Stop){NEED_BYTES, pos, RECORD_START};
        const uint8_t *record = chunk + at;
        int64_t length = (int32_t)be32(record);
        int64_t ledger = (int64_t)be64(record + LENGTH_PREFIX), entry = (int64_t)be64(record + LENGTH_PREFIX + 8);
        int64_t following = pos + LENGTH_PREFIX + length;
        if (length < ENTRY_HEADER || length > w->max_length || ledger < 0 || entry < 0 || following > w->end)
            return (Stop){IRREGULAR, pos};
        if (following - base > len)
            return (Stop){NEED_BYTES, pos, (uint64_t)(LENGTH_PREFIX + length)};
        Ledger *l = w->last;
        if (l == NULL || l->ledger != (uint64_t)ledger) {
            l = find_ledger(&w->ledgers, (uint64_t)ledger);
            if (l == NULL)
                l = learned_from_table(w, (uint64_t)ledger);
            if (l == NULL)
                return (Stop){NEED_LEDGER, pos, (uint64_t)ledger};
            w->last = l;
        }
        int indexed, joined = join(w, (uint64_t)(pos + LENGTH_PREFIX), (uint64_t)ledger, (uint64_t)entry, &indexed);
        if (joined >= 0)
            return (Stop){joined, pos};
        w->matched = UINT64_MAX;
        l->bytes += (uint64_t)(LENGTH_PREFIX + length);
        const uint8_t *stored = record + LENGTH_PREFIX;
        int64_t body = pos + LENGTH_PREFIX;
        w->walked[0] = body;
        w->walked[1] = ledger;
        w->walked[2] = entry;
        w->walked[3] = length;
        pos = following;
        switch (l->method) {
        case SKIP:
            w->skipped++;
            break;
        case PYTHON:
            return (Stop){PY_RECORD, pos, (uint64_t)ledger, (uint64_t)entry, body, length, indexed, at + LENGTH_PREFIX};
        default:
            if (l->method == HMAC ? mac_holds(&w->keys[l->key], stored, length)
                                  : digest_holds(l->method, stored, length)) {
                w->verified++;
            } else {
                w->failed++;
                return (Stop){FAILED, pos, (uint64_t)ledger, (uint64_t)entry, body, length, indexed};
            }
        }
    }
}

static PyObject *Walker_walk(Walker *w, PyObject *args) {
    Py_buffer chunk;
    long long base, pos, stop;
    if (!PyArg_ParseTuple(args, "y*LLL", &chunk, &base, &pos, &stop))
        return NULL;
    if (w->busy || pos < base || pos > base + chunk.len || base < 0) {
        PyBuffer_Release(&chunk);
        PyErr_SetString(PyExc_ValueError, w->busy ? "the walker is in use" : "pos lies outside the chunk");
        return NULL;
    }
    w->busy = 1;
    Stop s;
    Py_BEGIN_ALLOW_THREADS
    s = walk_chunk(w, (const uint8_t *)chunk.buf, base, chunk.len, pos, stop);
    Py_END_ALLOW_THREADS
    w->busy = 0;
    PyBuffer_Release(&chunk);
    return Py_BuildValue("(iLKKLLLL)", s.status, (long long)s.pos, (unsigned long long)s.a, (unsigned long long)s.b,
                         (long long)s.c, (long long)s.d, (long long)s.e, (long long)s.f);
}

/* A MAC key (at most 64 bytes, checked by the caller) added to the walker's keys; its index in `index`. */
static int add_key(Walker *w, const Py_buffer *key, uint32_t *index) {
    if (w->key_count == w->key_capacity) {
        size_t capacity = w->key_capacity ? 2 * w->key_capacity : 8;
        MacKey *keys = PyMem_Realloc(w->keys, capacity * sizeof(MacKey));
        if (keys == NULL)
            return -1;
        w->keys = keys, w->key_capacity = capacity;
    }
    mac_key_from(&w->keys[w->key_count], key->buf, (size_t)key->len);
    *index = (uint32_t)w->key_count++;
    return 0;
}

static int uint64_column(PyObject *object, Py_buffer *view);

/* use_table(ids, kinds, methods, keys, asked): the pass's ledger table, consulted for every ledger met and not
 * learned: ids sorted (uint64), kinds (array 'B' or 'I', one per id), per kind its method (bytes) and MAC key (None
 * unless HMAC). A ledger the table lacks, one of `asked` (sorted uint64) and one of a kind whose method is PYTHON
 * are asked of Python (learn()). */
static PyObject *Walker_use_table(Walker *w, PyObject *args) {
    PyObject *ids, *kinds, *keys, *asked;
    Py_buffer methods;
    if (!PyArg_ParseTuple(args, "OOy*OO", &ids, &kinds, &methods, &keys, &asked))
        return NULL;
    PyObject *key_list = w->busy ? NULL : PySequence_Fast(keys, "keys must be a sequence");
    if (key_list == NULL) {
        PyBuffer_Release(&methods);
        if (w->busy)
            PyErr_SetString(PyExc_ValueError, "the walker is in use");
        return NULL;
    }
    PyObject *error_type = PyExc_ValueError;
    const char *problem = NULL;
    if (PySequence_Fast_GET_SIZE(key_list) != methods.len)
        problem = "one key (or None) per method";
    for (Py_ssize_t k = 0; problem == NULL && k < methods.len; k++) {
        int method = ((const uint8_t *)methods.buf)[k];
        PyObject *key = PySequence_Fast_GET_ITEM(key_list, k);
        if (method > HMAC)
            problem = "unknown verification method";
        else if (method == HMAC && (!PyBytes_Check(key) || PyBytes_GET_SIZE(key) > 64))
            problem = "a MAC kind needs its key (bytes, at most 64)";
    }
    release_table(w);
    if (problem == NULL) {
        w->kind_method = PyMem_Calloc((size_t)methods.len + 1, 1);
        w->kind_key = PyMem_Calloc((size_t)methods.len + 1, sizeof(uint32_t));
        if (w->kind_method == NULL || w->kind_key == NULL)
            problem = "out of memory", error_type = PyExc_MemoryError;
    }
    for (Py_ssize_t k = 0; problem == NULL && k < methods.len; k++) {
        w->kind_method[k] = ((const uint8_t *)methods.buf)[k];
        if (w->kind_method[k] == HMAC) {
            PyObject *key = PySequence_Fast_GET_ITEM(key_list, k);
            Py_buffer view = {.buf = PyBytes_AS_STRING(key), .len = PyBytes_GET_SIZE(key)};
            if (add_key(w, &view, &w->kind_key[k]) < 0)
                problem = "out of memory", error_type = PyExc_MemoryError;
        }
    }
    w->kind_count = (size_t)methods.len;
    PyBuffer_Release(&methods);
    Py_DECREF(key_list);
    if (problem == NULL && uint64_column(ids, &w->table_ids) == 0) {
        if (uint64_column(asked, &w->table_asked) < 0) {
            PyBuffer_Release(&w->table_ids);
        } else if (PyObject_GetBuffer(kinds, &w->table_kinds, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
            PyBuffer_Release(&w->table_ids);
            PyBuffer_Release(&w->table_asked);
        } else {
            w->have_table = 1;
            if ((w->table_kinds.itemsize != 1 && w->table_kinds.itemsize != 4) || w->table_kinds.ndim != 1 ||
                w->table_kinds.len / w->table_kinds.itemsize != w->table_ids.len / 8)
                problem = "kinds must be one unsigned byte or 4-byte number per id";
        }
    }
    if (problem != NULL || !w->have_table) {
        release_table(w);
        if (problem != NULL)
            PyErr_SetString(error_type, problem);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Walker_learn(Walker *w, PyObject *args) {
    unsigned long long ledger;
    int method;
    Py_buffer key = {0};
    if (!PyArg_ParseTuple(args, "Ki|y*", &ledger, &method, &key))
        return NULL;
    const char *problem = NULL;
    if (method < SKIP || method > HMAC)
        problem = "unknown verification method";
    else if (method == HMAC && (key.buf == NULL || key.len > 64))
        problem = "a MAC ledger needs its key (at most 64 bytes)";
    else if (w->busy)
        problem = "the walker is in use";
    uint32_t index = 0;
    if (problem == NULL && method == HMAC && add_key(w, &key, &index) < 0) {
        PyBuffer_Release(&key);
        return PyErr_NoMemory();
    }
    if (key.buf != NULL)
        PyBuffer_Release(&key);
    if (problem != NULL) {
        PyErr_SetString(PyExc_ValueError, problem);
        return NULL;
    }
    w->last = NULL; /* slots move when the table grows */
    if (add_ledger(&w->ledgers, ledger, method, index) < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* A one-dimensional contiguous buffer of uint64 (array('Q') or a memoryview of one); writable if asked. */
static int uint64_buffer(PyObject *object, Py_buffer *view, int writable) {
    if (PyObject_GetBuffer(object, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (view->itemsize != 8 || view->ndim != 1 || view->format == NULL || strchr("QLK", view->format[0]) == NULL ||
        view->format[1] != '\0') {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_TypeError, "expected a contiguous buffer of uint64");
        return -1;
    }
    return 0;
}

static int uint64_column(PyObject *object, Py_buffer *view) { return uint64_buffer(object, view, 0); }
static int writable_uint64(PyObject *object, Py_buffer *view) { return uint64_buffer(object, view, 1); }

/* `n` such buffers, all of them or none (those taken let go of again when one fails). */
static int uint64_columns(PyObject *const *objects, Py_buffer *views, int n, int writable) {
    for (int i = 0; i < n; i++)
        if (uint64_buffer(objects[i], &views[i], writable) < 0) {
            while (i--)
                PyBuffer_Release(&views[i]);
            return -1;
        }
    return 0;
}

static PyObject *Walker_set_window(Walker *w, PyObject *args) {
    PyObject *columns[3];
    PyObject *end;
    if (!PyArg_ParseTuple(args, "OOOO", &columns[0], &columns[1], &columns[2], &end))
        return NULL;
    if (w->busy) {
        PyErr_SetString(PyExc_ValueError, "the walker is in use");
        return NULL;
    }
    uint64_t window_end = PyLong_AsUnsignedLongLong(end);
    if (window_end == (uint64_t)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return NULL;
        PyErr_Clear(); /* 2**64: past every location */
    }
    Py_buffer views[3];
    if (uint64_columns(columns, views, 3, 0) < 0)
        return NULL;
    if (views[0].len != views[1].len || views[0].len != views[2].len) {
        for (int i = 0; i < 3; i++)
            PyBuffer_Release(&views[i]);
        PyErr_SetString(PyExc_ValueError, "the window's columns differ in length");
        return NULL;
    }
    release_window(w);
    memcpy(w->window, views, sizeof(views));
    w->have_window = 1;
    w->window_count = (size_t)(views[0].len / 8);
    w->j = 0;
    w->window_end = window_end;
    w->next = w->window_count ? column(w, 0)[0] : window_end;
    Py_RETURN_NONE;
}

static PyObject *Walker_take_index_faults(Walker *w, PyObject *unused) {
    PyObject *list = PyList_New((Py_ssize_t)w->fault_count);
    if (list == NULL)
        return NULL;
    for (size_t i = 0; i < w->fault_count; i++) {
        Fault *f = &w->faults[i];
        PyObject *item = Py_BuildValue("(iKKKKK)", f->kind, (unsigned long long)f->pos, (unsigned long long)f->ledger,
                                       (unsigned long long)f->entry, (unsigned long long)f->found_ledger,
                                       (unsigned long long)f->found_entry);
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    w->fault_count = 0;
    return list;
}

static PyObject *Walker_ledger_bytes(Walker *w, PyObject *unused) {
    PyObject *bytes = PyDict_New();
    if (bytes == NULL)
        return NULL;
    for (size_t i = 0; i < w->ledgers.capacity; i++) {
        Ledger *s = &w->ledgers.slots[i];
        if (!s->used || s->bytes == 0)
            continue;
        PyObject *key = PyLong_FromUnsignedLongLong(s->ledger), *value = PyLong_FromUnsignedLongLong(s->bytes);
        if (key == NULL || value == NULL || PyDict_SetItem(bytes, key, value) < 0) {
            Py_XDECREF(key);
            Py_XDECREF(value);
            Py_DECREF(bytes);
            return NULL;
        }
        Py_DECREF(key);
        Py_DECREF(value);
    }
    return bytes;
}

static PyObject *Walker_counts(Walker *w, PyObject *unused) {
    return Py_BuildValue("(KKKn)", (unsigned long long)w->verified, (unsigned long long)w->skipped,
                         (unsigned long long)w->failed, (Py_ssize_t)w->j);
}

static PyObject *Walker_last_record(Walker *w, PyObject *unused) {
    if (w->walked[0] < 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(LLLL)", (long long)w->walked[0], (long long)w->walked[1], (long long)w->walked[2],
                         (long long)w->walked[3]);
}

static PyMethodDef Walker_methods[] = {
    {"walk", (PyCFunction)Walker_walk, METH_VARARGS,
     "walk(chunk, base, pos, stop) -> (status, pos, a, b, c, d, e, f): walk the chunk's records from pos"},
    {"use_table", (PyCFunction)Walker_use_table, METH_VARARGS,
     "use_table(ids, kinds, methods, keys, asked): the pass's ledger table, looked up for every ledger not learned"},
    {"learn", (PyCFunction)Walker_learn, METH_VARARGS,
     "learn(ledger, method, key=None): how the ledger's records are verified (HMAC: with this key)"},
    {"set_window", (PyCFunction)Walker_set_window, METH_VARARGS,
     "set_window(positions, ledger_ids, entry_ids, end): the next window of the index's locations"},
    {"take_index_faults", (PyCFunction)Walker_take_index_faults, METH_NOARGS,
     "take_index_faults() -> [(kind, pos, ledger, entry, found_ledger, found_entry)], emptied"},
    {"ledger_bytes", (PyCFunction)Walker_ledger_bytes, METH_NOARGS, "ledger_bytes() -> {ledger: bytes of its records}"},
    {"last_record", (PyCFunction)Walker_last_record, METH_NOARGS,
     "last_record() -> (pos, ledger, entry, length) of the last record walked, or None"},
    {"counts", (PyCFunction)Walker_counts, METH_NOARGS,
     "counts() -> (verified, skipped, failed, index of the next location in the window)"},
    {NULL},
};

static PyTypeObject WalkerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "scanner.native._native.Walker",
    .tp_basicsize = sizeof(Walker),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Walker(end, max_length): the per-record work of one walk of one entry log",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Walker_init,
    .tp_dealloc = (destructor)Walker_dealloc,
    .tp_methods = Walker_methods,
};


/* ---- the index's locations: sorted runs, merged per log; the completeness count ------------------------ */

/* Sorting by a uint64 key, stably: a least-significant-digit radix sort over the key bits that differ.
 *
 * When those bits, packed as below, make one digit, each column is moved straight to its place (sort_one_digit).
 * Else, when the bits in which keys differ and an index fit in 64 bits together (the index's locations: a few entry logs
 * and positions within them differ in about 30 bits), each key is packed with its index into one uint64: the key's
 * bits from the lowest one that differs up, the widest gap of bits no key differs in squeezed out, above the index.
 * Those are sorted by digits of up to SORT_DIGIT bits (as few passes as that allows, the digits as even as they can
 * be: 24 bits in three passes of 8, not 10, 10 and 4; those digits that differ, every pass's counts taken in
 * one pass over the keys), the other columns then gathered by the index the low bits hold, and the keys rebuilt from
 * the high bits. Otherwise (key, index) pairs are sorted by the key's bytes that differ.
 *
 * Keys may be sorted by their bits from `coarse` up only (the index's runs: by window of positions, the order within
 * one left as it came); the keys are then gathered by the index like the other columns. */

#define SORT_DIGIT 10 /* 1024 counters of 4 bytes: 4 KiB. At 12 (24 bits in two passes of 12, not three of 8) a log's 10^5
                         * locations of equal-sized records took 25 ns each, at 10 18-20; random positions the same */
#define SORT_BUCKETS (1u << SORT_DIGIT)
#define SORT_PASSES ((64 + SORT_DIGIT - 1) / SORT_DIGIT)

static inline uint64_t low_bits(int n) { return n >= 64 ? ~0ull : (1ull << n) - 1; }

/* How keys are packed: bits [low, ...) of a key, with bits [gap, gap + gap_width) of those left out; `bits` remain. */
typedef struct {
    int low, gap, gap_width, bits;
} Packing;

static Packing packing_of(uint64_t differ) {
    Packing s = {__builtin_ctzll(differ), 0, 0, 0};
    uint64_t d = differ >> s.low; /* bit 0 set */
    int top = 63 - __builtin_clzll(d);
    for (int i = 1; i < top;) {
        if (d >> i & 1) {
            i++;
            continue;
        }
        int j = i;
        while (!(d >> j & 1))
            j++;
        if (j - i > s.gap_width)
            s.gap = i, s.gap_width = j - i;
        i = j;
    }
    s.bits = top + 1 - s.gap_width;
    return s;
}

/* Taken by value: a copy in locals is not reloaded per key where stores could alias the caller's struct. */
static inline uint64_t packed_key(const Packing s, uint64_t key) {
    uint64_t x = key >> s.low;
    return (x & low_bits(s.gap)) | ((x >> (s.gap + s.gap_width)) & low_bits(s.bits - s.gap)) << s.gap;
}

static inline uint64_t unpacked_key(const Packing s, uint64_t packed) {
    return ((packed & low_bits(s.gap)) | (packed >> s.gap) << (s.gap + s.gap_width)) << s.low;
}

/* The packed sort's counts and two arrays of n uint64 each, kept from one sort for the next (the runs' spills, the
 * walks' gathers: fresh pages for every sort cost a page fault and a cleared page each, more than the sort's passes
 * over them; the scan keeps glibc's mmap threshold fixed, so every freed buffer leaves the process): taken by one sort
 * at a time (the sorts run without the GIL; one that finds it taken allocates its own). Kept only up to SCRATCH_KEPT
 * entries, so the memory held between sorts is bounded whatever was sorted last. */
typedef struct {
    uint32_t counts[SORT_PASSES][SORT_BUCKETS];
    size_t capacity; /* entries of each of the two arrays */
    uint64_t values[];
} Scratch;

#define SCRATCH_KEPT ((size_t)1 << 19) /* above a run of the location runs (RUN_ENTRIES and its last ledger's) */

static Scratch *kept_scratch;

static Scratch *take_scratch(size_t n) {
    Scratch *s = __atomic_exchange_n(&kept_scratch, NULL, __ATOMIC_ACQUIRE);
    if (s != NULL && s->capacity >= n)
        return s;
    PyMem_RawFree(s);
    if (n > (SIZE_MAX - sizeof(Scratch)) / (2 * sizeof(uint64_t)))
        return NULL;
    s = PyMem_RawMalloc(sizeof(Scratch) + 2 * n * sizeof(uint64_t));
    if (s != NULL)
        s->capacity = n;
    return s;
}

static void give_back_scratch(Scratch *s) {
    if (s->capacity > SCRATCH_KEPT) {
        PyMem_RawFree(s);
        return;
    }
    PyMem_RawFree(__atomic_exchange_n(&kept_scratch, s, __ATOMIC_RELEASE));
}

static int sort_packed(uint64_t *keys, uint64_t *a, uint64_t *b, size_t n, uint64_t differ, int index_bits, int coarse) {
    Packing s = packing_of(differ);
    Scratch *scratch = take_scratch(n);
    if (scratch == NULL)
        return -1;
    uint64_t *p = scratch->values, *q = scratch->values + scratch->capacity;
    uint64_t varying = packed_key(s, differ);
    const int most = (s.bits + SORT_DIGIT - 1) / SORT_DIGIT, digit = (s.bits + most - 1) / most;
    const uint64_t digit_mask = low_bits(digit);
    int shifts[SORT_PASSES], passes = 0;
    for (int at = 0; at < s.bits; at += digit)
        if ((varying >> at) & digit_mask)
            shifts[passes++] = index_bits + at;
    /* Every pass's counts from one pass over the packed keys, as they are packed. */
    uint32_t(*counts)[SORT_BUCKETS] = scratch->counts;
    memset(counts, 0, (size_t)passes * sizeof counts[0]);
    /* The packing's fields in locals: the counts' stores could alias them, which would reload them per element. */
    const int low = s.low, gap = s.gap, skip = s.gap + s.gap_width;
    const uint64_t below_gap = low_bits(s.gap), above_gap = low_bits(s.bits - s.gap);
    for (size_t i = 0; i < n; i++) {
        uint64_t x = keys[i] >> low;
        uint64_t v = ((x & below_gap) | ((x >> skip) & above_gap) << gap) << index_bits | i;
        p[i] = v;
        for (int d = 0; d < passes; d++)
            counts[d][(v >> shifts[d]) & digit_mask]++;
    }
    for (int d = 0; d < passes; d++) {
        uint32_t *count = counts[d], sum = 0; /* n < 2^32 */
        for (uint64_t k = 0; k <= digit_mask; k++) {
            uint32_t c = count[k];
            count[k] = sum;
            sum += c;
        }
    }
    for (int d = 0; d < passes; d++) {
        const int shift = shifts[d];
        uint32_t *count = counts[d];
        for (size_t i = 0; i < n; i++) {
            uint64_t v = p[i];
            q[count[(v >> shift) & digit_mask]++] = v;
        }
        uint64_t *t = p;
        p = q, q = t;
    }
    uint64_t index_mask = low_bits(index_bits);
    uint64_t *columns[3] = {a, b, coarse ? keys : NULL};
    for (int c = 0; c < 3; c++) {
        if (columns[c] == NULL)
            continue;
        for (size_t i = 0; i < n; i++)
            q[i] = columns[c][p[i] & index_mask];
        memcpy(columns[c], q, n * sizeof(uint64_t));
    }
    if (!coarse) { /* the keys rebuilt: the bits no key differs in are keys[0]'s */
        uint64_t carried = unpacked_key(s, low_bits(s.bits)), base = keys[0] & ~carried;
        for (size_t i = 0; i < n; i++)
            keys[i] = base | unpacked_key(s, p[i] >> index_bits);
    }
    give_back_scratch(scratch);
    return 0;
}

/* Keys whose differing bits, packed, make one digit (the index's runs put in order of window: a few logs' and windows'
 * bits): a stable counting sort that moves each column straight to its place, its digit read from a column of digits
 * taken in the counting pass (no index packed with the keys, no gathers by it, no keys rebuilt). */
static int sort_one_digit(uint64_t *keys, uint64_t *a, uint64_t *b, size_t n, const Packing s) {
    Scratch *scratch = take_scratch(n);
    if (scratch == NULL)
        return -1;
    uint64_t *moved = scratch->values;
    uint16_t *digits = (uint16_t *)(scratch->values + scratch->capacity); /* s.bits <= SORT_DIGIT < 16 */
    uint32_t *count = scratch->counts[0], *next = scratch->counts[1];
    const size_t buckets = (size_t)1 << s.bits;
    memset(count, 0, buckets * sizeof count[0]);
    const int low = s.low, gap = s.gap, skip = s.gap + s.gap_width;
    const uint64_t below_gap = low_bits(s.gap), above_gap = low_bits(s.bits - s.gap);
    for (size_t i = 0; i < n; i++) {
        uint64_t x = keys[i] >> low;
        uint16_t d = (uint16_t)((x & below_gap) | ((x >> skip) & above_gap) << gap);
        digits[i] = d;
        count[d]++;
    }
    uint32_t sum = 0; /* n < 2^32 */
    for (size_t k = 0; k < buckets; k++) {
        uint32_t c = count[k];
        count[k] = sum;
        sum += c;
    }
    uint64_t *columns[3] = {keys, a, b};
    for (int c = 0; c < 3; c++) {
        uint64_t *column = columns[c];
        if (column == NULL)
            continue;
        memcpy(next, count, buckets * sizeof count[0]);
        /* The current digit's next place kept in a register: keys of one digit come in long stretches (a ledger's
         * locations in one window), and a counter incremented in memory per key would chain each store to the next. */
        uint16_t current = digits[0];
        uint32_t at = next[current];
        for (size_t i = 0; i < n; i++) {
            if (digits[i] != current) {
                next[current] = at;
                current = digits[i];
                at = next[current];
            }
            moved[at++] = column[i];
        }
        memcpy(column, moved, n * sizeof(uint64_t));
    }
    give_back_scratch(scratch);
    return 0;
}

/* (key, index) pairs sorted by the key bytes that differ, then the other columns gathered. */
static int sort_general(uint64_t *keys, uint64_t *a, uint64_t *b, size_t n, uint64_t differ) {
    const uint64_t sorted_bits = ~low_bits(__builtin_ctzll(differ)); /* those below `coarse` left out */
    uint64_t *k2 = PyMem_RawMalloc(n * sizeof(uint64_t)), *spare = PyMem_RawMalloc(n * sizeof(uint64_t));
    uint32_t *order = PyMem_RawMalloc(n * sizeof(uint32_t)), *o2 = PyMem_RawMalloc(n * sizeof(uint32_t));
    if (k2 == NULL || spare == NULL || order == NULL || o2 == NULL) {
        PyMem_RawFree(k2), PyMem_RawFree(spare), PyMem_RawFree(order), PyMem_RawFree(o2);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    uint64_t *from_k = keys, *to_k = k2;
    uint32_t *from_o = order, *to_o = o2;
    for (int shift = 0; shift < 64; shift += 8) {
        if (((differ >> shift) & 0xff) == 0)
            continue;
        size_t count[257] = {0};
        for (size_t i = 0; i < n; i++)
            count[((from_k[i] & sorted_bits) >> shift & 0xff) + 1]++;
        for (int d = 0; d < 256; d++)
            count[d + 1] += count[d];
        for (size_t i = 0; i < n; i++) {
            size_t at = count[(from_k[i] & sorted_bits) >> shift & 0xff]++;
            to_k[at] = from_k[i];
            to_o[at] = from_o[i];
        }
        uint64_t *tk = from_k; from_k = to_k; to_k = tk;
        uint32_t *to = from_o; from_o = to_o; to_o = to;
    }
    if (from_k != keys)
        memcpy(keys, from_k, n * sizeof(uint64_t));
    uint64_t *columns[2] = {a, b};
    for (int c = 0; c < 2 && columns[c] != NULL; c++) {
        for (size_t i = 0; i < n; i++)
            spare[i] = columns[c][from_o[i]];
        memcpy(columns[c], spare, n * sizeof(uint64_t));
    }
    PyMem_RawFree(k2), PyMem_RawFree(spare), PyMem_RawFree(order), PyMem_RawFree(o2);
    return 0;
}

/* Sorts (keys, a, b) by keys >> coarse, stably (b may be NULL: no such column); n in [2, 2^32), coarse in [0, 64). */
static int sort_triples(uint64_t *keys, uint64_t *a, uint64_t *b, size_t n, int coarse) {
    uint64_t differ = 0;
    for (size_t i = 1; i < n; i++)
        differ |= keys[i] ^ keys[0];
    differ &= ~low_bits(coarse);
    if (differ == 0)
        return 0; /* all equal: in order already */
    Packing s = packing_of(differ);
    if (s.bits <= SORT_DIGIT)
        return sort_one_digit(keys, a, b, n, s);
    int index_bits = 64 - __builtin_clzll((uint64_t)(n - 1));
    if (s.bits + index_bits <= 64)
        return sort_packed(keys, a, b, n, differ, index_bits, coarse);
    return sort_general(keys, a, b, n, differ);
}

/* sort_by_location(locations, ledgers, entries, positions=None, coarse=0): the three uint64 columns sorted by
 * location >> coarse, stably, in place (slices already sorted, one after the other, come out merged, ties in their
 * order); positions, when given, filled with each sorted location's position (its low 32 bits). */
static PyObject *native_sort_by_location(PyObject *m, PyObject *args) {
    PyObject *objects[4] = {NULL, NULL, NULL, NULL};
    int coarse = 0;
    if (!PyArg_ParseTuple(args, "OOO|Oi", &objects[0], &objects[1], &objects[2], &objects[3], &coarse))
        return NULL;
    if (coarse < 0 || coarse > 63) {
        PyErr_SetString(PyExc_ValueError, "coarse is in [0, 64)");
        return NULL;
    }
    int columns = objects[3] == NULL || objects[3] == Py_None ? 3 : 4;
    Py_buffer views[4];
    if (uint64_columns(objects, views, columns, 1) < 0)
        return NULL;
    size_t n = (size_t)(views[0].len / 8);
    int failed = 0;
    for (int i = 1; i < columns; i++)
        failed |= views[i].len != views[0].len;
    if (failed || n > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "columns of one length (below 2^32) are sorted");
        failed = 1;
    } else {
        Py_BEGIN_ALLOW_THREADS
        failed = n > 1 && sort_triples(views[0].buf, views[1].buf, views[2].buf, n, coarse) < 0;
        if (!failed && columns == 4) {
            const uint64_t *locations = views[0].buf;
            uint64_t *positions = views[3].buf;
            for (size_t i = 0; i < n; i++)
                positions[i] = locations[i] & 0xFFFFFFFFu;
        }
        Py_END_ALLOW_THREADS
        if (failed)
            PyErr_NoMemory();
    }
    for (int i = 0; i < columns; i++)
        PyBuffer_Release(&views[i]);
    if (failed)
        return NULL;
    Py_RETURN_NONE;
}

/* sort_pairs(keys, values): two uint64 columns sorted by the first, stably, in place. */
static PyObject *native_sort_pairs(PyObject *m, PyObject *args) {
    PyObject *objects[2];
    if (!PyArg_ParseTuple(args, "OO", &objects[0], &objects[1]))
        return NULL;
    Py_buffer views[2];
    if (uint64_columns(objects, views, 2, 1) < 0)
        return NULL;
    size_t n = (size_t)(views[0].len / 8);
    int failed = 0;
    if (views[1].len != views[0].len || n > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "two columns of one length (below 2^32) are sorted");
        failed = 1;
    } else if (n > 1) {
        Py_BEGIN_ALLOW_THREADS
        failed = sort_triples(views[0].buf, views[1].buf, NULL, n, 0) < 0;
        Py_END_ALLOW_THREADS
        if (failed)
            PyErr_NoMemory();
    }
    PyBuffer_Release(&views[0]);
    PyBuffer_Release(&views[1]);
    if (failed)
        return NULL;
    Py_RETURN_NONE;
}

/* The location runs' scratch file: each column of a run stored narrow. A column's values are packed as the sort packs
 * keys (their bits from the lowest that differs up, the widest gap of bits none differs in squeezed out) into 1, 2, 4
 * or 8 bytes each (none when all are equal); its code (base, low, gap, gap width, bits, width) brings them back. */

static int width_of(int bits) { return bits <= 8 ? 1 : bits <= 16 ? 2 : bits <= 32 ? 4 : 8; }

/* narrow(column) -> (code, bytes): the uint64 column packed. */
static PyObject *native_narrow(PyObject *m, PyObject *args) {
    PyObject *object;
    if (!PyArg_ParseTuple(args, "O", &object))
        return NULL;
    Py_buffer view;
    if (uint64_column(object, &view) < 0)
        return NULL;
    const uint64_t *values = view.buf;
    size_t n = (size_t)(view.len / 8);
    uint64_t differ = 0;
    for (size_t i = 1; i < n; i++)
        differ |= values[i] ^ values[0];
    Packing s = {0, 0, 0, 0};
    int width = 0;
    uint64_t base = n ? values[0] : 0;
    if (differ) {
        s = packing_of(differ);
        width = width_of(s.bits);
        base &= ~unpacked_key(s, low_bits(s.bits)); /* the bits no value differs in */
    }
    PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * (size_t)width));
    if (data == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(data);
    Py_BEGIN_ALLOW_THREADS
    switch (width) {
    case 1:
        for (size_t i = 0; i < n; i++)
            out[i] = (uint8_t)packed_key(s, values[i]);
        break;
    case 2:
        for (size_t i = 0; i < n; i++) {
            uint16_t v = (uint16_t)packed_key(s, values[i]);
            memcpy(out + 2 * i, &v, 2);
        }
        break;
    case 4:
        for (size_t i = 0; i < n; i++) {
            uint32_t v = (uint32_t)packed_key(s, values[i]);
            memcpy(out + 4 * i, &v, 4);
        }
        break;
    case 8:
        for (size_t i = 0; i < n; i++) {
            uint64_t v = packed_key(s, values[i]);
            memcpy(out + 8 * i, &v, 8);
        }
        break;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return Py_BuildValue("(Kiiiii)N", (unsigned long long)base, s.low, s.gap, s.gap_width, s.bits, width, data);
}

/* widen(data, out, code): the values narrow() packed into `data` under `code`, into the uint64 buffer `out`. */
static PyObject *native_widen(PyObject *m, PyObject *args) {
    Py_buffer data, view;
    unsigned long long base;
    Packing s;
    int width;
    PyObject *object;
    if (!PyArg_ParseTuple(args, "y*O(Kiiiii)", &data, &object, &base, &s.low, &s.gap, &s.gap_width, &s.bits, &width))
        return NULL;
    if (writable_uint64(object, &view) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    size_t n = (size_t)(view.len / 8);
    const char *wrong = NULL;
    if (width != 0 && width != 1 && width != 2 && width != 4 && width != 8)
        wrong = "a column's width is 0, 1, 2, 4 or 8 bytes";
    else if (s.low < 0 || s.gap < 0 || s.gap_width < 0 || s.bits < (width ? 1 : 0) || s.gap >= (width ? s.bits : 1) ||
             s.low + s.gap_width + s.bits > 64 || (width && width_of(s.bits) != width))
        wrong = "a column's packing is out of range";
    else if ((size_t)data.len != n * (size_t)width)
        wrong = "a column's bytes do not hold its values";
    if (wrong != NULL) {
        PyErr_SetString(PyExc_ValueError, wrong);
        PyBuffer_Release(&data);
        PyBuffer_Release(&view);
        return NULL;
    }
    const uint8_t *in = data.buf;
    uint64_t *out = view.buf;
    const Packing k = s; /* copies in locals: the addresses of s and base were taken, the stores could alias them */
    const uint64_t first = base;
    Py_BEGIN_ALLOW_THREADS
    switch (width) {
    case 0:
        for (size_t i = 0; i < n; i++)
            out[i] = first;
        break;
    case 1:
        for (size_t i = 0; i < n; i++)
            out[i] = first | unpacked_key(k, in[i]);
        break;
    case 2:
        for (size_t i = 0; i < n; i++) {
            uint16_t v;
            memcpy(&v, in + 2 * i, 2);
            out[i] = first | unpacked_key(k, v);
        }
        break;
    case 4:
        for (size_t i = 0; i < n; i++) {
            uint32_t v;
            memcpy(&v, in + 4 * i, 4);
            out[i] = first | unpacked_key(k, v);
        }
        break;
    case 8:
        for (size_t i = 0; i < n; i++) {
            uint64_t v;
            memcpy(&v, in + 8 * i, 8);
            out[i] = first | unpacked_key(k, v);
        }
        break;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* How many of entry_ids[low:high] have the bookie at ensemble `index` in their write set (striped placement). */
static PyObject *native_owned_count(PyObject *m, PyObject *args) {
    PyObject *object;
    Py_ssize_t low, high;
    long long index, size, quorum;
    if (!PyArg_ParseTuple(args, "OnnLLL", &object, &low, &high, &index, &size, &quorum))
        return NULL;
    Py_buffer view;
    if (uint64_column(object, &view) < 0)
        return NULL;
    Py_ssize_t n = view.len / 8;
    if (low < 0 || high > n || low > high || size <= 0 || index < 0 || index >= size) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "need 0 <= low <= high <= len and 0 <= index < size");
        return NULL;
    }
    const uint64_t *ids = view.buf;
    Py_ssize_t owned = 0;
    for (Py_ssize_t i = low; i < high; i++) {
        long long distance = index - (long long)(ids[i] % (uint64_t)size);
        if (distance < 0)
            distance += size;
        owned += distance < quorum;
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(owned);
}

/* ---- `.idx` files: listed; a window of small ones opened ahead, the cached ones read at once, the rest later ---- */

/*
 * scanner/storage/indexfile.py is the reference: its index_files lists the files as list_index_files does, and its
 * IndexFile reads one through a page-cache guest (scanner/storage/pagecache.py). Here only files whose header and
 * slots come in one read are read (most ledgers'); anything else (a larger file, a header that does not check, a
 * failed call) is left to that reader, by path, so every error is raised and worded where it always was.
 *
 * The guest's rule with fewer calls for a file read whole: when it is opened, its first page of slots is read without
 * waiting for the disk, and the file's size taken from that read where it can be (else from a stat, and the rest of
 * a larger file read the same way). If that gets all of it (the bookie had it cached), it is sifted and closed at
 * once: nothing of ours to drop, no count of reads from disk taken: open, read, close. Otherwise the disk is asked
 * for its first read ahead, and it is read when its window's turn comes; a window of such files is asked of the disk
 * at once. A file the non-blocking read found partly missing is ours, all of it, as the guest counts a range partly
 * missing (that read may itself have set the kernel's read-ahead going), and dropped at close; where such reads are
 * not to be had, the thread's count of blocks read says what the calls on it brought in. The kernel's read-ahead is
 * left on for these reads: a read of a whole file brings in nothing past its end. (A file over IDX_FIRST_READ, a
 * ledger of over 8,000 entries here, has its first page of slots read all the same before its size is known: a
 * read-ahead mark the bookie's reads left there would set the kernel reading ahead in it, uncounted.)
 */

#define IDX_HEADER 1024
#define IDX_SLOT 8
#define IDX_FIRST_READ (IDX_HEADER + 64 * 1024) /* indexfile.py's HEADER_SIZE + _READ_CHUNK */
#define IDX_ONE_PAGE_FILE (IDX_HEADER + 8192)   /* the header and one index page (1024 slots): most ledgers' file */
#define IDX_FETCHED 1                           /* asking the disk for the first read ahead brought pages in: ours */
#define IDX_LEAVE_TO_PYTHON (-1)
#define IDX_PENDING (-2) /* opened ahead, not cached: read when its window is */
#define IDX_MAX_DIGITS 16

static int64_t PAGE_BYTES = 4096; /* the system's, set at import */
static int READS_COUNTED = 0;     /* the kernel keeps each task's count of reads from disk (set at import) */

/* This thread's reads from disk so far, in blocks. */
static long blocks_read(void) {
    struct rusage usage;
    return getrusage(RUSAGE_THREAD, &usage) == 0 ? usage.ru_inblock : -1;
}

/* Whether this thread read anything from disk since it counted `before` (always, when reads are not counted). */
static int brought_in(long before) {
    return !READS_COUNTED || before < 0 || blocks_read() != before;
}

#ifdef HAVE_GETDENTS64
/* The entries of an open directory, read a buffer at a time. */
typedef struct {
    int fd;
    long length, at;
    _Alignas(struct dirent64) char buffer[32 * 1024];
} DirReader;

/* The next entry's name (not "." or "..") and d_type; NULL at the end (errno 0) or on an error (errno set). */
static const char *next_entry(DirReader *reader, unsigned char *type) {
    const long name_at = (long)offsetof(struct dirent64, d_name);
    for (;;) {
        if (reader->at >= reader->length) {
            ssize_t n;
            do
                n = getdents64(reader->fd, reader->buffer, sizeof reader->buffer);
            while (n < 0 && errno == EINTR);
            if (n <= 0) {
                if (n == 0)
                    errno = 0;
                return NULL;
            }
            reader->length = n, reader->at = 0;
        }
        long left = reader->length - reader->at;
        struct dirent64 *entry = (struct dirent64 *)(reader->buffer + reader->at);
        if (left <= name_at || entry->d_reclen <= name_at || entry->d_reclen > left ||
            entry->d_reclen % _Alignof(struct dirent64) != 0 ||
            memchr(entry->d_name, 0, (size_t)(entry->d_reclen - name_at)) == NULL) {
            errno = EIO; /* not a record as the kernel lays them out */
            return NULL;
        }
        reader->at += entry->d_reclen;
        if (strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0) {
            *type = entry->d_type;
            return entry->d_name;
        }
    }
}

/* Whether `name` in directory `fd` is of `kind` (S_IFDIR, S_IFREG), not following a symlink, as os.DirEntry's
 * is_dir / is_file(follow_symlinks=False) answer: from d_type, or from lstat where the filesystem does not give it. */
static int entry_is(int fd, const char *name, unsigned char type, mode_t kind) {
    if (type != DT_UNKNOWN)
        return type == (kind == S_IFDIR ? DT_DIR : DT_REG);
    struct stat st;
    return fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && (st.st_mode & S_IFMT) == kind;
}

/* The ledger id of a name indexfile._INDEX_NAME matches (1-16 lowercase hex digits, then `.idx` or `.rloc`), with
 * its digit count and whether it is a `.rloc`; -1 for any other name and for an id past 2**63 - 1. */
static int64_t index_file_ledger(const char *name, size_t *digits, int *rloc) {
    uint64_t id = 0;
    size_t n = 0;
    for (; n <= IDX_MAX_DIGITS && ((name[n] >= '0' && name[n] <= '9') || (name[n] >= 'a' && name[n] <= 'f')); n++)
        id = id << 4 | (uint64_t)(name[n] <= '9' ? name[n] - '0' : name[n] - 'a' + 10);
    if (n == 0 || n > IDX_MAX_DIGITS || name[n] != '.')
        return -1;
    if (strcmp(name + n + 1, "idx") == 0)
        *rloc = 0;
    else if (strcmp(name + n + 1, "rloc") == 0)
        *rloc = 1;
    else
        return -1;
    *digits = n;
    return id > (uint64_t)INT64_MAX ? -1 : (int64_t)id;
}

/* Whether a regular file (following a symlink, as os.path.isfile) `<digits>.idx` sits in directory `fd`. */
static int idx_beside(int fd, const char *name, size_t digits) {
    char idx[IDX_MAX_DIGITS + sizeof ".idx"];
    memcpy(idx, name, digits);
    memcpy(idx + digits, ".idx", sizeof ".idx");
    struct stat st;
    return fstatat(fd, idx, &st, 0) == 0 && S_ISREG(st.st_mode);
}

/* OSError for `path` (bytes, `length` of them) from `error`, its name decoded as os.scandir's would be. */
static void raise_for_path(int error, const char *path, size_t length) {
    PyObject *name = PyUnicode_DecodeFSDefaultAndSize(path, (Py_ssize_t)length);
    if (name != NULL) {
        errno = error ? error : EIO;
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, name);
        Py_DECREF(name);
    }
}

/* What a listing found, gathered without the GIL (a hung disk must not stop the agent's other threads): the ledger ids
 * and the paths (each ending in NUL, one after the other in `names`), or where it failed. Raw memory only. */
typedef struct {
    int64_t *ids;
    size_t *name_at;
    size_t count, capacity;
    char *names;
    size_t names_length, names_capacity;
    int error;           /* errno of a failed listing: `failed` is the path it names (none: out of memory) */
    char *failed;        /* a path of up to `failed_length` bytes */
    size_t failed_length;
} Listing;

static int listing_add(Listing *found, int64_t ledger_id, const char *path, size_t length) {
    if (found->count == found->capacity) {
        size_t capacity = found->capacity ? 2 * found->capacity : 1024;
        int64_t *ids = PyMem_RawRealloc(found->ids, capacity * sizeof(int64_t));
        if (ids == NULL)
            return -1;
        found->ids = ids;
        size_t *name_at = PyMem_RawRealloc(found->name_at, capacity * sizeof(size_t));
        if (name_at == NULL)
            return -1;
        found->name_at = name_at, found->capacity = capacity;
    }
    if (found->names_length + length + 1 > found->names_capacity) {
        size_t capacity = 2 * found->names_capacity + length + 1;
        char *names = PyMem_RawRealloc(found->names, capacity);
        if (names == NULL)
            return -1;
        found->names = names, found->names_capacity = capacity;
    }
    memcpy(found->names + found->names_length, path, length);
    found->names[found->names_length + length] = '\0';
    found->ids[found->count] = ledger_id;
    found->name_at[found->count++] = found->names_length;
    found->names_length += length + 1;
    return 0;
}

/* The listing's failure: `error` on `path`'s first `length` bytes (kept in `found->failed`, which has the room). */
static void listing_fails(Listing *found, int error, const char *path, size_t length) {
    found->error = error ? error : EIO;
    memcpy(found->failed, path, length);
    found->failed_length = length;
}

/* The listing itself, in `path` (holding the directory as given, `given` bytes and a NUL, and room for a `/` and two
 * names more), with only system calls and raw memory: it may run without the GIL. */
static void list_into(Listing *found, char *path, size_t given, DirReader *outer, DirReader *inner) {
    outer->fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), outer->length = outer->at = 0;
    size_t prefix = given;
    if (prefix == 0 || path[prefix - 1] != '/') /* os.path.join's way, as os.scandir's entries' paths are made */
        path[prefix++] = '/';
    if (outer->fd < 0) {
        listing_fails(found, errno, path, found->failed_length);
        return;
    }
    const char *sub;
    unsigned char type;
    while (found->error == 0 && (sub = next_entry(outer, &type)) != NULL) {
        if (!entry_is(outer->fd, sub, type, S_IFDIR))
            continue;
        size_t sub_length = strlen(sub), name_at = prefix + sub_length + 1;
        memcpy(path + prefix, sub, sub_length);
        path[name_at - 1] = '/';
        inner->fd = openat(outer->fd, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC), inner->length = inner->at = 0;
        if (inner->fd < 0) {
            listing_fails(found, errno, path, name_at - 1);
            break;
        }
        const char *name;
        while ((name = next_entry(inner, &type)) != NULL) {
            size_t digits;
            int rloc;
            int64_t ledger_id = index_file_ledger(name, &digits, &rloc);
            if (ledger_id < 0 || !entry_is(inner->fd, name, type, S_IFREG) ||
                (rloc && idx_beside(inner->fd, name, digits)))
                continue;
            size_t length = name_at + strlen(name);
            memcpy(path + name_at, name, length - name_at);
            if (listing_add(found, ledger_id, path, length) < 0) {
                found->error = ENOMEM, found->failed_length = 0; /* no path: out of memory */
                break;
            }
        }
        if (found->error == 0 && errno != 0)
            listing_fails(found, errno, path, name_at - 1);
        close(inner->fd);
    }
    if (found->error == 0 && errno != 0)
        listing_fails(found, errno, path, found->failed_length);
    close(outer->fd);
}

/* list_index_files(directory): [(ledger id, path)] of the `.idx` / `.rloc` files in the subdirectories of
 * `directory` (one first-level directory of an index dir's current/), in directory order, as indexfile.index_files
 * lists them there: a `.rloc` only where no `.idx` sits beside it. A directory that cannot be listed raises OSError.
 * The directories are read with the GIL released: a disk that hangs holds this thread only. */
static PyObject *native_list_index_files(PyObject *m, PyObject *args) {
    PyObject *encoded;
    if (!PyArg_ParseTuple(args, "O&", PyUnicode_FSConverter, &encoded))
        return NULL;
    const char *directory = PyBytes_AS_STRING(encoded);
    size_t given = (size_t)PyBytes_GET_SIZE(encoded);
    PyObject *result = NULL;
    Listing found = {0};
    DirReader *outer = PyMem_RawMalloc(sizeof(DirReader)), *inner = PyMem_RawMalloc(sizeof(DirReader));
    size_t room = given + 2 * (NAME_MAX + 1) + 2; /* directory/subdirectory/name */
    char *path = PyMem_RawMalloc(room);
    found.failed = PyMem_RawMalloc(room);
    if (outer == NULL || inner == NULL || path == NULL || found.failed == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(path, directory, given + 1);
    found.failed_length = given; /* a failure at the directory itself names it as given */
    Py_BEGIN_ALLOW_THREADS
    list_into(&found, path, given, outer, inner);
    Py_END_ALLOW_THREADS
    if (found.error == ENOMEM && found.failed_length == 0) {
        PyErr_NoMemory();
        goto done;
    }
    if (found.error != 0) {
        raise_for_path(found.error, found.failed, found.failed_length);
        goto done;
    }
    result = PyList_New((Py_ssize_t)found.count);
    for (size_t i = 0; result != NULL && i < found.count; i++) {
        const char *name = found.names + found.name_at[i];
        PyObject *item = Py_BuildValue("(LN)", (long long)found.ids[i],
                                       PyUnicode_DecodeFSDefaultAndSize(name, (Py_ssize_t)strlen(name)));
        if (item == NULL)
            Py_CLEAR(result);
        else
            PyList_SET_ITEM(result, (Py_ssize_t)i, item);
    }
done:
    PyMem_RawFree(outer);
    PyMem_RawFree(inner);
    PyMem_RawFree(path);
    PyMem_RawFree(found.ids);
    PyMem_RawFree(found.name_at);
    PyMem_RawFree(found.names);
    PyMem_RawFree(found.failed);
    Py_DECREF(encoded);
    return result;
}
#endif /* HAVE_GETDENTS64 */

static int open_read_only(const char *path) {
    int fd = open(path, O_RDONLY | O_NOATIME | O_CLOEXEC); /* reading must not touch the file's access time */
    if (fd < 0 && (errno == EPERM || errno == EACCES))
        fd = open(path, O_RDONLY | O_CLOEXEC);
    return fd;
}

/* Bytes of [offset, offset + length) read without waiting for the disk (what is cached); -1 if such reads fail. */
static ssize_t read_cached(int fd, uint8_t *buffer, size_t length, off_t offset) {
#ifdef RWF_NOWAIT
    struct iovec vector = {buffer, length};
    ssize_t n;
    do
        n = preadv2(fd, &vector, 1, offset, RWF_NOWAIT);
    while (n < 0 && errno == EINTR);
    if (n >= 0)
        return n;
    return errno == EAGAIN ? 0 : -1;
#else
    return -1;
#endif
}

/* Whether the first `available` bytes are a header indexfile.parse_index_header accepts. */
static int index_header_holds(const uint8_t *head, int64_t available) {
    if (available < 12 || memcmp(head, "BKLE", 4) != 0)
        return 0;
    int32_t version = (int32_t)be32(head + 4), key_length = (int32_t)be32(head + 8);
    if (version != 0 && version != 1)
        return 0;
    int64_t key_end = 12 + (int64_t)key_length, fields_end = key_end + (version >= 1 ? 8 : 4);
    if (key_length < 0 || fields_end > IDX_HEADER || fields_end > available)
        return 0;
    if (version >= 1) {
        int32_t lac_length = (int32_t)be32(head + key_end + 4);
        int64_t lac_end = fields_end + lac_length;
        if (lac_length != 0 && (lac_length < 16 || lac_end > IDX_HEADER || lac_end > available))
            return 0;
    }
    return 1;
}

/* Slots sifted: entry ids and locations, in columns of `capacity` the caller gave (`fixed`: they do not grow; the
 * slots of files that did not fit are counted in `wanted`), or grown here. */
typedef struct {
    uint64_t *ids, *locations;
    size_t count, capacity, wanted;
    int fixed;
} Slots;

/* Room in `out` for `more` slots; -1 when there is not the memory (or the room, in fixed columns). */
static int reserve_slots(Slots *out, size_t more) {
    if (out->count + more <= out->capacity)
        return 0;
    if (out->fixed) {
        out->wanted += more;
        return -1;
    }
    size_t capacity = out->capacity * 2 > out->count + more ? out->capacity * 2 : out->count + more;
    uint64_t *ids = PyMem_RawRealloc(out->ids, capacity * sizeof(uint64_t));
    if (ids == NULL)
        return -1;
    out->ids = ids;
    uint64_t *locations = PyMem_RawRealloc(out->locations, capacity * sizeof(uint64_t));
    if (locations == NULL)
        return -1;
    out->locations = locations;
    out->capacity = capacity;
    return 0;
}

/* The first `got` bytes of a file of `size` bytes checked and their non-empty slots added to `out`: how many, or
 * IDX_LEAVE_TO_PYTHON (none added: a header that does not check, or no memory for the slots). */
static Py_ssize_t sift_index(const uint8_t *buffer, int64_t got, int64_t size, Slots *out) {
    if (!index_header_holds(buffer, got < IDX_HEADER ? got : IDX_HEADER))
        return IDX_LEAVE_TO_PYTHON;
    int64_t slot_bytes = size > IDX_HEADER ? (size - IDX_HEADER) / IDX_SLOT * IDX_SLOT : 0;
    int64_t read_slots = got > IDX_HEADER ? got - IDX_HEADER : 0;
    int64_t slots = (slot_bytes < read_slots ? slot_bytes : read_slots) / IDX_SLOT;
    if (reserve_slots(out, (size_t)slots) < 0)
        return IDX_LEAVE_TO_PYTHON; /* out of memory: the Python reader tries, and raises if it must */
    size_t before = out->count;
    const uint8_t *slot = buffer + IDX_HEADER;
    for (int64_t block = 0; block < slots; block += 4) { /* most of a small ledger's page is empty: 4 slots a test */
        int64_t end = block + 4 < slots ? block + 4 : slots;
        uint64_t words[4];
        if (end - block == 4 && (memcpy(words, slot + block * IDX_SLOT, sizeof words),
                                 (words[0] | words[1] | words[2] | words[3]) == 0))
            continue;
        for (int64_t i = block; i < end; i++) {
            uint64_t raw = be64(slot + i * IDX_SLOT);
            if (raw) {
                out->ids[out->count] = (uint64_t)i;
                out->locations[out->count++] = raw;
            }
        }
    }
    return (Py_ssize_t)(out->count - before);
}

/* How large a file just read without waiting is, from what the read got: a read of a regular file stops short only at
 * its end or, not waiting, at the first page not cached (a page boundary), so a read that stopped short off a page
 * boundary met the end: the file is `got` bytes, no stat needed. An index file is its header and whole pages of slots
 * (1024 + n * 8192 bytes, never a whole number of 4 KiB pages): a cached one is sized by its read alone. -1: unknown. */
static int64_t size_from_short_read(ssize_t got, size_t asked) {
    return got >= 0 && (size_t)got < asked && got % PAGE_BYTES != 0 ? (int64_t)got : -1;
}

/* A file just opened: read, sifted into `out` and closed when all of it is cached and it is small enough (its slot
 * count), closed when it is too large for one read (IDX_LEAVE_TO_PYTHON), else its first read asked of the disk
 * ahead and left open (IDX_PENDING, with its flags and size). A cached file of one page of slots (most ledgers') costs one
 * read: its size comes from the read (size_from_short_read), and a read that waited for nothing brought nothing in
 * (no count of blocks read is taken). */
static Py_ssize_t read_at_open(int fd, uint8_t *buffer, Slots *out, int *flags, int64_t *pending_size) {
    *flags = 0;
    ssize_t cached = read_cached(fd, buffer, IDX_ONE_PAGE_FILE + 1, 0);
    int64_t size = size_from_short_read(cached, IDX_ONE_PAGE_FILE + 1);
    if (size < 0) { /* larger than one page of slots, not all cached, or not read: its size from a stat */
        struct stat st;
        if (fstat(fd, &st) != 0 || st.st_size > IDX_FIRST_READ) {
            close(fd);
            return IDX_LEAVE_TO_PYTHON;
        }
        size = st.st_size;
        if (cached > IDX_ONE_PAGE_FILE && size > cached) { /* the rest of a larger file, as far as it is cached */
            ssize_t more = read_cached(fd, buffer + cached, (size_t)(size - cached), cached);
            cached = more < 0 ? more : cached + more;
        }
    }
    if (cached >= size) { /* the bookie has all of it cached (or it is empty): nothing of ours to drop */
        Py_ssize_t count = sift_index(buffer, cached, size, out);
        close(fd);
        return count;
    }
    /* Not all cached: a read that came up short found a page missing (and may have set the kernel's read-ahead
     * going for it), so the file is ours, all of it, as the guest counts a range partly missing; only where such
     * reads are not to be had does the count of blocks read say whether the advice brought anything in. */
    long before = cached < 0 ? blocks_read() : -1;
    if (posix_fadvise(fd, 0, IDX_FIRST_READ, POSIX_FADV_WILLNEED) != 0 || cached >= 0 || brought_in(before))
        *flags |= IDX_FETCHED; /* (advice refused: the read fetches it, counted ours as nothing says otherwise) */
    *pending_size = size;
    return IDX_PENDING;
}

/* A file left open by read_at_open read (`size` bytes, as it was then: no second stat), checked and sifted into
 * `out`, then its pages that were not cached dropped and it closed. Returns how many slots it added, or IDX_LEAVE_TO_PYTHON (it added none). */
static Py_ssize_t read_pending(int fd, int flags, int64_t size, uint8_t *buffer, Slots *out) {
    Py_ssize_t result = IDX_LEAVE_TO_PYTHON;
    int64_t ours_end = flags & IDX_FETCHED ? IDX_FIRST_READ : 0, got = 0;
    int64_t want = size > IDX_HEADER ? size : IDX_HEADER;
    long before = flags & IDX_FETCHED ? -1 : blocks_read(); /* (already all ours: nothing to count) */
    while (got < want) {
        ssize_t n = pread(fd, buffer + got, (size_t)(want - got), got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            goto done;
        if (n == 0)
            break;
        got += n;
    }
    if (!(flags & IDX_FETCHED) && brought_in(before)) { /* (pages dropped since they were asked for) every page the
                                                          * read touched is ours */
        int64_t end = ((got > 0 ? got : 1) + PAGE_BYTES - 1) / PAGE_BYTES * PAGE_BYTES;
        ours_end = end > ours_end ? end : ours_end;
    }
    result = sift_index(buffer, got, size, out);
done:
    if (ours_end > 0)
        posix_fadvise(fd, 0, ours_end, POSIX_FADV_DONTNEED);
    close(fd);
    return result;
}

/* An opened file not read: closed, what was fetched for it dropped. */
static void release_pending(int fd, int flags) {
    if (flags & IDX_FETCHED)
        posix_fadvise(fd, 0, IDX_FIRST_READ, POSIX_FADV_DONTNEED);
    close(fd);
}

/* A window of files as open_index_files left it: per file, its slot count (its slots in `slots` from starts[i]),
 * IDX_LEAVE_TO_PYTHON, or IDX_PENDING (its fd and flags kept). `slots`: the caller's two columns (held in `views`
 * while `viewing`). Read (read_index_files) or closed once. */
typedef struct {
    PyObject_HEAD
    Py_ssize_t n;
    Py_ssize_t *counts, *starts;
    int *fds, *flags;
    int64_t *sizes; /* a pending file's size when it was opened */
    Slots slots;
    Py_buffer views[2];
    int viewing;
} IndexWindow;

/* Every pending file of the window closed unread, the caller's columns let go; the window then holds no files. */
static void IndexWindow_release(IndexWindow *self) {
    for (Py_ssize_t i = 0; i < self->n; i++)
        if (self->counts[i] == IDX_PENDING)
            release_pending(self->fds[i], self->flags[i]);
    self->n = 0;
    if (self->viewing) {
        PyBuffer_Release(&self->views[0]);
        PyBuffer_Release(&self->views[1]);
        self->viewing = 0;
    }
}

static void IndexWindow_dealloc(IndexWindow *self) {
    IndexWindow_release(self);
    PyMem_Free(self->counts);
    PyMem_Free(self->starts);
    PyMem_Free(self->fds);
    PyMem_Free(self->flags);
    PyMem_Free(self->sizes);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject IndexWindowType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "scanner.native._native.IndexWindow",
    .tp_basicsize = sizeof(IndexWindow),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "`.idx` files open_index_files opened: read_index_files reads them, close_index_files closes them",
    .tp_dealloc = (destructor)IndexWindow_dealloc,
};

/* open_index_files(paths, ids, locations): an IndexWindow of the files, each opened read-only: those all cached read at
 * once, the others' first bytes asked of the disk (one that would not open, or is too large, is left to the Python
 * reader). Their slots go to the two uint64 columns given (held until the window is read or closed): a file whose
 * slots no longer fit is left to the Python reader. */
static PyObject *native_open_index_files(PyObject *m, PyObject *args) {
    PyObject *paths, *columns[2];
    if (!PyArg_ParseTuple(args, "OOO", &paths, &columns[0], &columns[1]))
        return NULL;
    PyObject *sequence = PySequence_Fast(paths, "a list of paths");
    if (sequence == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(sequence);
    PyObject *encoded = PyList_New(n);
    for (Py_ssize_t i = 0; encoded != NULL && i < n; i++) {
        PyObject *path = NULL;
        if (!PyUnicode_FSConverter(PySequence_Fast_GET_ITEM(sequence, i), &path))
            Py_CLEAR(encoded);
        else
            PyList_SET_ITEM(encoded, i, path);
    }
    Py_DECREF(sequence);
    if (encoded == NULL)
        return NULL;
    IndexWindow *window = PyObject_New(IndexWindow, &IndexWindowType);
    uint8_t *buffer = PyMem_RawMalloc(IDX_FIRST_READ);
    if (window != NULL) {
        window->n = 0, window->viewing = 0;
        window->counts = PyMem_Calloc((size_t)n + 1, sizeof(Py_ssize_t));
        window->starts = PyMem_Calloc((size_t)n + 1, sizeof(Py_ssize_t));
        window->fds = PyMem_Calloc((size_t)n + 1, sizeof(int));
        window->flags = PyMem_Calloc((size_t)n + 1, sizeof(int));
        window->sizes = PyMem_Calloc((size_t)n + 1, sizeof(int64_t));
        if (window->counts == NULL || window->starts == NULL || window->fds == NULL || window->flags == NULL ||
            window->sizes == NULL ||
            buffer == NULL) {
            Py_CLEAR(window);
            PyErr_NoMemory();
        }
    }
    if (window != NULL) {
        if (uint64_columns(columns, window->views, 2, 1) < 0) {
            Py_CLEAR(window);
        } else {
            window->viewing = 1;
            Py_ssize_t length = window->views[0].len < window->views[1].len ? window->views[0].len
                                                                            : window->views[1].len;
            window->slots = (Slots){window->views[0].buf, window->views[1].buf, 0, (size_t)length / 8, 0, 1};
        }
    }
    if (window != NULL) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            int fd = open_read_only(PyBytes_AS_STRING(PyList_GET_ITEM(encoded, i)));
            window->starts[i] = (Py_ssize_t)window->slots.count;
            window->counts[i] = fd < 0 ? IDX_LEAVE_TO_PYTHON
                                       : read_at_open(fd, buffer, &window->slots, &window->flags[i],
                                                      &window->sizes[i]);
            window->fds[i] = window->counts[i] == IDX_PENDING ? fd : -1;
        }
        window->n = n;
        Py_END_ALLOW_THREADS
    }
    PyMem_RawFree(buffer);
    Py_DECREF(encoded);
    return (PyObject *)window;
}

/* read_index_files(window) -> (counts, starts, wanted): every file of the window read (then closed, its columns let
 * go). counts[i]: how many non-empty slots file i has (their entry ids and encoded locations in the window's columns
 * from starts[i]), or -1: file i is left to the Python reader. wanted: the slots of files left out for want of room in
 * the columns (longer columns would take them). */
static PyObject *native_read_index_files(PyObject *m, PyObject *args) {
    IndexWindow *window;
    if (!PyArg_ParseTuple(args, "O!", &IndexWindowType, &window))
        return NULL;
    Py_ssize_t n = window->n;
    uint8_t *buffer = PyMem_RawMalloc(IDX_FIRST_READ);
    PyObject *counts = buffer == NULL ? NULL : PyList_New(n), *starts = counts == NULL ? NULL : PyList_New(n);
    if (starts == NULL) {
        Py_XDECREF(counts);
        PyMem_RawFree(buffer);
        IndexWindow_release(window);
        return buffer == NULL ? PyErr_NoMemory() : NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        if (window->counts[i] == IDX_PENDING) {
            window->starts[i] = (Py_ssize_t)window->slots.count;
            window->counts[i] = read_pending(window->fds[i], window->flags[i], window->sizes[i], buffer,
                                             &window->slots);
        }
    window->n = 0; /* every file closed */
    Py_END_ALLOW_THREADS
    size_t wanted = window->slots.wanted;
    IndexWindow_release(window);
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; counts != NULL && i < n; i++) {
        Py_ssize_t count = window->counts[i] < 0 ? IDX_LEAVE_TO_PYTHON : window->counts[i];
        PyObject *c = PyLong_FromSsize_t(count), *at = PyLong_FromSsize_t(window->starts[i]);
        if (c == NULL || at == NULL) {
            Py_XDECREF(c), Py_XDECREF(at);
            Py_CLEAR(counts);
        } else {
            PyList_SET_ITEM(counts, i, c);
            PyList_SET_ITEM(starts, i, at);
        }
    }
    if (counts != NULL)
        result = Py_BuildValue("(NNn)", counts, starts, (Py_ssize_t)wanted);
    else
        Py_DECREF(starts);
    PyMem_RawFree(buffer);
    return result;
}

/* close_index_files(window): the window's files not read closed; what was fetched for them dropped; its columns let
 * go. */
static PyObject *native_close_index_files(PyObject *m, PyObject *args) {
    IndexWindow *window;
    if (!PyArg_ParseTuple(args, "O!", &IndexWindowType, &window))
        return NULL;
    IndexWindow_release(window);
    Py_RETURN_NONE;
}

/* ---- DbLedgerStorage's `locations` DB: a cursor's pairs decoded without a Python object per pair kept ------- */

/* decode_location_pairs(pairs, ledgers, entries, locations) -> (count, irregular, zero): up to the columns' length
 * (they are writable uint64 buffers of one length, at most 2^24) of (key, value) pairs taken from the iterator `pairs`
 * (rocksdict's, raw) and decoded from big-endian into the front of the three columns (fewer pairs at the iterator's
 * end); count: how many. irregular: the pair that stopped it early, a key not 16 bytes or a value not 8 (the caller
 * words the error), else None. zero: whether a location is 0 (no such entry, to BookKeeper). dbstorage.py's batches
 * are the reference. */
static PyObject *native_decode_location_pairs(PyObject *m, PyObject *args) {
    PyObject *pairs, *objects[3];
    if (!PyArg_ParseTuple(args, "OOOO", &pairs, &objects[0], &objects[1], &objects[2]))
        return NULL;
    Py_buffer views[3];
    if (uint64_columns(objects, views, 3, 1) < 0)
        return NULL;
    PyObject *irregular = NULL, *result = NULL;
    int failed = 0;
    if (views[1].len != views[0].len || views[2].len != views[0].len || views[0].len / 8 > (1 << 24)) {
        PyErr_SetString(PyExc_ValueError, "three columns of one length (at most 2**24) are filled");
        failed = 1;
    }
    const Py_ssize_t limit = views[0].len / 8;
    uint64_t *ledgers = views[0].buf, *entries = views[1].buf, *locations = views[2].buf;
    Py_ssize_t n = 0;
    int zero = 0; /* whether a location is 0 */
    while (!failed && n < limit) {
        PyObject *pair = PyIter_Next(pairs);
        if (pair == NULL) {
            failed = PyErr_Occurred() != NULL;
            break;
        }
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyBytes_Check(PyTuple_GET_ITEM(pair, 0)) ||
            !PyBytes_Check(PyTuple_GET_ITEM(pair, 1))) {
            Py_DECREF(pair);
            PyErr_SetString(PyExc_TypeError, "pairs must be (bytes, bytes) tuples");
            failed = 1;
            break;
        }
        PyObject *key = PyTuple_GET_ITEM(pair, 0), *value = PyTuple_GET_ITEM(pair, 1);
        if (PyBytes_GET_SIZE(key) != 16 || PyBytes_GET_SIZE(value) != 8) {
            irregular = pair;
            break;
        }
        const uint8_t *k = (const uint8_t *)PyBytes_AS_STRING(key);
        ledgers[n] = be64(k);
        entries[n] = be64(k + 8);
        locations[n] = be64((const uint8_t *)PyBytes_AS_STRING(value));
        zero |= locations[n++] == 0;
        Py_DECREF(pair);
    }
    for (int i = 0; i < 3; i++)
        PyBuffer_Release(&views[i]);
    if (!failed)
        result = Py_BuildValue("(nOO)", n, irregular ? irregular : Py_None, zero ? Py_True : Py_False);
    Py_XDECREF(irregular);
    return result;
}

/* ---- module ----------------------------------------------------------------------------------------- */

static PyObject *crc_call(PyObject *args, uint32_t (*raw)(uint32_t, const uint8_t *, size_t)) {
    Py_buffer data;
    unsigned long value = 0;
    if (!PyArg_ParseTuple(args, "y*|k", &data, &value))
        return NULL;
    uint32_t reg = raw(~(uint32_t)value, (const uint8_t *)data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(~reg);
}

static PyObject *native_crc32c(PyObject *m, PyObject *args) { return crc_call(args, crc32c_raw); }
static PyObject *native_crc32c_portable(PyObject *m, PyObject *args) { return crc_call(args, crc32c_portable); }
static PyObject *native_crc32(PyObject *m, PyObject *args) { return crc_call(args, crc32_raw); }

static PyMethodDef module_methods[] = {
    {"crc32c", native_crc32c, METH_VARARGS, "crc32c(data, value=0): CRC32C as the crc32c package computes it"},
    {"crc32c_portable", native_crc32c_portable, METH_VARARGS, "crc32c(data, value=0) without CPU instructions"},
    {"crc32", native_crc32, METH_VARARGS, "crc32(data, value=0): CRC32 as zlib computes it"},
    {"sort_by_location", native_sort_by_location, METH_VARARGS,
     "sort_by_location(locations, ledgers, entries, positions=None, coarse=0): sorted by location >> coarse, "
     "stably, in place; positions filled with the sorted locations' low 32 bits"},
    {"sort_pairs", native_sort_pairs, METH_VARARGS,
     "sort_pairs(keys, values): two uint64 columns sorted by the first, stably, in place"},
    {"narrow", native_narrow, METH_VARARGS, "narrow(column) -> (code, bytes): a uint64 column packed narrow"},
    {"widen", native_widen, METH_VARARGS, "widen(data, out, code): a column narrow() packed, into a uint64 buffer"},
    {"owned_count", native_owned_count, METH_VARARGS,
     "owned_count(entry_ids, low, high, index, size, quorum): entries of [low, high) striped onto ensemble index"},
#ifdef HAVE_GETDENTS64
    {"list_index_files", native_list_index_files, METH_VARARGS,
     "list_index_files(directory) -> [(ledger id, path)]: the `.idx` / `.rloc` files in directory's subdirectories"},
#endif
    {"open_index_files", native_open_index_files, METH_VARARGS,
     "open_index_files(paths, ids, locations) -> IndexWindow: `.idx` files opened, the cached ones read into the "
     "columns, the others fetched ahead"},
    {"read_index_files", native_read_index_files, METH_VARARGS,
     "read_index_files(window) -> (counts, starts, wanted): small `.idx` files read, checked, sifted, closed"},
    {"decode_location_pairs", native_decode_location_pairs, METH_VARARGS,
     "decode_location_pairs(pairs, ledgers, entries, locations) -> (count, irregular, zero): a `locations` DB "
     "batch decoded into the columns"},
    {"close_index_files", native_close_index_files, METH_VARARGS,
     "close_index_files(window): files opened ahead and not read, closed"},
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "The record walker's per-record work in C.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__native(void) {
    long page = sysconf(_SC_PAGESIZE);
    if (page > 0)
        PAGE_BYTES = page;
    READS_COUNTED = access("/proc/self/io", F_OK) == 0;
    fill_table(crc32c_table, CRC32C_POLY);
    fill_table(crc32_table, CRC32_POLY);
#ifdef HAVE_X86_CRC32C
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) {
        fill_shift(long_shift, LONG_LANE);
        fill_shift(short_shift, SHORT_LANE);
        crc32c_raw = crc32c_sse42;
        crc32c_kind = "SSE4.2";
    }
#endif
    if (PyType_Ready(&WalkerType) < 0 || PyType_Ready(&IndexWindowType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&WalkerType);
    if (PyModule_AddObject(m, "Walker", (PyObject *)&WalkerType) < 0 ||
        PyModule_AddStringConstant(m, "CRC32C_INSTRUCTIONS", crc32c_kind) < 0 ||
        PyModule_AddIntConstant(m, "SKIP", SKIP) < 0 || PyModule_AddIntConstant(m, "CRC32C", CRC32C) < 0 ||
        PyModule_AddIntConstant(m, "CRC32", CRC32) < 0 || PyModule_AddIntConstant(m, "DUMMY", DUMMY) < 0 ||
        PyModule_AddIntConstant(m, "PYTHON", PYTHON) < 0 || PyModule_AddIntConstant(m, "HMAC", HMAC) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
