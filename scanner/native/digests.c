/*
 * Whether a stored entry's digest holds: CRC32C, CRC32 and HMAC-SHA1 (BookKeeper's MAC digest), for the record walker
 * (record_walk.c), and CRC32C and CRC32 as functions for Python (the crc32c package and zlib are the reference).
 *
 * CRC32C uses SSE4.2 (three interleaved lanes over long stretches) when the CPU has it, checked at import;
 * otherwise, and for CRC32, tables eight bytes at a time. MAC digests are HMAC-SHA1, SHA-1 written out here.
 */

#include "native.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
#define HAVE_X86_CRC32C 1
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

#define CRC32C_DIGEST 4
#define CRC32_DIGEST 8

/* ---- SHA-1 and HMAC-SHA1 (BookKeeper's MAC digest) ------------------------------------------------------ */

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

void mac_key_from(MacKey *mac, const uint8_t *key, size_t length) {
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

int mac_holds(const MacKey *mac, const uint8_t *entry, int64_t length) {
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

int digest_holds(int method, const uint8_t *entry, int64_t length) {
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

/* ---- for Python ---------------------------------------------------------------------------------------- */

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

static PyMethodDef methods[] = {
    {"crc32c", native_crc32c, METH_VARARGS, "crc32c(data, value=0): CRC32C as the crc32c package computes it"},
    {"crc32c_portable", native_crc32c_portable, METH_VARARGS, "crc32c(data, value=0) without CPU instructions"},
    {"crc32", native_crc32, METH_VARARGS, "crc32(data, value=0): CRC32 as zlib computes it"},
    {NULL},
};

int digests_add(PyObject *m) {
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
    if (PyModule_AddFunctions(m, methods) < 0 ||
        PyModule_AddStringConstant(m, "CRC32C_INSTRUCTIONS", crc32c_kind) < 0 ||
        PyModule_AddIntConstant(m, "SKIP", SKIP) < 0 || PyModule_AddIntConstant(m, "CRC32C", CRC32C) < 0 ||
        PyModule_AddIntConstant(m, "CRC32", CRC32) < 0 || PyModule_AddIntConstant(m, "DUMMY", DUMMY) < 0 ||
        PyModule_AddIntConstant(m, "PYTHON", PYTHON) < 0 || PyModule_AddIntConstant(m, "HMAC", HMAC) < 0)
        return -1;
    return 0;
}
