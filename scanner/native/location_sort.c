/*
 * The index's locations sorted by where they point (the runs a pass merges per entry log, and the ledger table's ids),
 * and the location runs' columns packed narrow for their scratch file and widened back. scanner/scan/location_sort.py
 * and scanner/scan/location_runs.py hold the Python forms (pyarrow), the reference.
 */

#include "native.h"

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

/* repeated_ids(ledger_ids, columns) -> bytes: each ledger id (a uint64) as many times as its column (a uint64 buffer,
 * its entries) has values, one after the other, as native uint64: the ledger column of several ledgers' locations
 * (scanner/scan/location_runs.py's chain of repeats is the reference). */
static PyObject *native_repeated_ids(PyObject *m, PyObject *args) {
    PyObject *ids, *columns;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &ids, &PyList_Type, &columns))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(ids), total = 0;
    if (PyList_GET_SIZE(columns) != n) {
        PyErr_SetString(PyExc_ValueError, "ledger ids and columns must be lists of one length");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_buffer view;
        if (uint64_column(PyList_GET_ITEM(columns, i), &view) < 0)
            return NULL;
        total += view.len / 8;
        PyBuffer_Release(&view);
    }
    PyObject *result = PyBytes_FromStringAndSize(NULL, total * 8);
    if (result == NULL)
        return NULL;
    uint64_t *out = (uint64_t *)PyBytes_AS_STRING(result);
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t id = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(ids, i));
        Py_buffer view;
        if ((id == (uint64_t)-1 && PyErr_Occurred()) || uint64_column(PyList_GET_ITEM(columns, i), &view) < 0) {
            Py_DECREF(result);
            return NULL;
        }
        Py_ssize_t count = view.len / 8;
        PyBuffer_Release(&view);
        if (count > total - at) { /* a column grown since it was counted */
            Py_DECREF(result);
            PyErr_SetString(PyExc_ValueError, "a column changed length while its ledger ids were made");
            return NULL;
        }
        for (Py_ssize_t k = 0; k < count; k++)
            out[at++] = id;
    }
    if (at != total) {
        Py_DECREF(result);
        PyErr_SetString(PyExc_ValueError, "a column changed length while its ledger ids were made");
        return NULL;
    }
    return result;
}

static PyMethodDef methods[] = {
    {"repeated_ids", native_repeated_ids, METH_VARARGS,
     "repeated_ids(ledger_ids, columns) -> bytes: each id as many times as its column has values, as native uint64"},
    {"sort_by_location", native_sort_by_location, METH_VARARGS,
     "sort_by_location(locations, ledgers, entries, positions=None, coarse=0): sorted by location >> coarse, "
     "stably, in place; positions filled with the sorted locations' low 32 bits"},
    {"sort_pairs", native_sort_pairs, METH_VARARGS,
     "sort_pairs(keys, values): two uint64 columns sorted by the first, stably, in place"},
    {"narrow", native_narrow, METH_VARARGS, "narrow(column) -> (code, bytes): a uint64 column packed narrow"},
    {"widen", native_widen, METH_VARARGS, "widen(data, out, code): a column narrow() packed, into a uint64 buffer"},
    {NULL},
};

int location_sort_add(PyObject *m) { return PyModule_AddFunctions(m, methods); }
