/*
 * What the parts of the scanner's native extension (scanner.native._native, one C file per job) share: the buffers
 * they accept from Python and read big-endian fields from, the layout of a stored entry, the digest methods, and the
 * call by which each part adds its functions and types to the module (module.c).
 *
 *   digests.c         CRC32C (SSE4.2 where the CPU has it), CRC32, HMAC-SHA1: whether a stored entry's digest holds
 *   record_walk.c     the record walker: one entry log's records walked and matched with the index's locations
 *   location_sort.c   the index's locations sorted by where they point, and the location runs' columns packed narrow
 *   index_files.c     `.idx` files listed or opened by name, and read, a window of small ones at a time
 *   locations_db.c    DbLedgerStorage's `locations` DB: a RocksDB cursor's pairs decoded into columns
 *   lean_metadata.c   what a pass's index step needs from each ledger's metadata, and the completeness count
 *   dump_records.c    the dump store's scratch file: records packed, found by path hash, parsed
 *
 * Each part's Python form is the reference it must agree with (named in each file).
 */
#ifndef SCANNER_NATIVE_H
#define SCANNER_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ---- buffers ------------------------------------------------------------------------------------------------- */

/* A one-dimensional contiguous buffer of uint64 (array('Q'), or 'L' where it is 8 bytes, or a memoryview of one);
 * writable if asked. -1 with TypeError otherwise. Every part takes uint64 columns through this. */
static inline int uint64_buffer(PyObject *object, Py_buffer *view, int writable) {
    if (PyObject_GetBuffer(object, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (view->itemsize != 8 || view->ndim != 1 || view->format == NULL || view->format[0] == '\0' ||
        strchr("QLK", view->format[0]) == NULL || view->format[1] != '\0') {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_TypeError, "expected a contiguous buffer of uint64");
        return -1;
    }
    return 0;
}

static inline int uint64_column(PyObject *object, Py_buffer *view) { return uint64_buffer(object, view, 0); }
static inline int writable_uint64(PyObject *object, Py_buffer *view) { return uint64_buffer(object, view, 1); }

/* `n` such buffers, all of them or none (those taken let go of again when one fails). */
static inline int uint64_columns(PyObject *const *objects, Py_buffer *views, int n, int writable) {
    for (int i = 0; i < n; i++)
        if (uint64_buffer(objects[i], &views[i], writable) < 0) {
            while (i--)
                PyBuffer_Release(&views[i]);
            return -1;
        }
    return 0;
}

/* Big-endian fields (BookKeeper's records, index slots and RocksDB keys). */
static inline uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t be64(const uint8_t *p) { return ((uint64_t)be32(p) << 32) | be32(p + 4); }

/* ---- a stored entry, and its digest (digests.c) ------------------------------------------------------------- */

/* A record: its length (4 bytes), then the stored entry: ledgerId, entryId, lastAddConfirmed, length (8 bytes
 * each: the 32-byte entry header), the digest, the payload. The digest covers the header and the payload. */
#define LENGTH_PREFIX 4
#define RECORD_START (LENGTH_PREFIX + 16)
#define ENTRY_HEADER 32

/* How a ledger's entries are verified (PYTHON: by Python, through a wrapper of its verifier). */
enum method { SKIP = 0, CRC32C = 1, CRC32 = 2, DUMMY = 3, PYTHON = 4, HMAC = 5 };

typedef struct {
    uint32_t h[5];
} Sha1State;

/* An HMAC-SHA1 key (up to 64 bytes: BookKeeper's is SHA-1 of "mac" and the password) as the two states after
 * its padded blocks, so each entry costs its own blocks only. */
typedef struct {
    Sha1State inner, outer;
} MacKey;

void mac_key_from(MacKey *mac, const uint8_t *key, size_t length);
int mac_holds(const MacKey *mac, const uint8_t *entry, int64_t length);
/* Whether the digest of `entry` (`length` bytes) holds, by `method` (CRC32C, CRC32 or DUMMY). */
int digest_holds(int method, const uint8_t *entry, int64_t length);

/* ---- the module: each part adds its functions, types and constants; 0, or -1 with an exception ----------- */

int digests_add(PyObject *module);
int record_walk_add(PyObject *module);
int location_sort_add(PyObject *module);
int index_files_add(PyObject *module);
int locations_db_add(PyObject *module);
int lean_metadata_add(PyObject *module);
int dump_records_add(PyObject *module);
int ledger_paths_add(PyObject *module);

#endif
