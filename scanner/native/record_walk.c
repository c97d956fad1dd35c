/*
 * The record walker's per-record work: framing, header parse, the digest check (digests.c), and the match with the
 * index's locations. scanner/scan/record_walk_in_c.py drives it chunk by chunk; scanner/scan/record_walk_in_python.py
 * is the reference it must agree with.
 *
 * A call walks the records of one chunk (a buffer holding bytes [base, base + len) of the file) from a record
 * boundary, with the GIL released, and returns at the first thing it cannot decide alone: a pace stop, a record
 * that does not lie whole in the chunk, an irregular record, a ledger it has not been told about, the end of a
 * window of locations, a digest failure, a record Python verifies (MAC), or a full list of index faults. Every
 * length and offset read from the chunk is checked against the chunk before it is used.
 */

#include "native.h"

/* ---- the ledgers of one walk: how each is verified, and the bytes of its records ---------------------- */

typedef struct {
    uint64_t ledger;
    uint64_t bytes;
    uint32_t key; /* HMAC: the index of its key among the walker's keys */
    uint8_t method;
    uint8_t used;
    uint8_t matched; /* met in the ledgers map being compared (agrees_with_map), for that call only */
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
    l->slots[i] = (Ledger){ledger, 0, key, (uint8_t)method, 1, 0};
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

static uint64_t big_endian64(const uint8_t *at) {
    uint64_t value = 0;
    for (int i = 0; i < 8; i++)
        value = value << 8 | at[i];
    return value;
}

/* Whether the log's ledgers map (its items as stored: 16 bytes each, a ledger id and the bytes of its records,
 * big-endian) is what ledger_bytes() gives, confirmed here: True only when every item's ledger and bytes are positive,
 * no ledger is listed twice, and the items are exactly the ledgers walked with their bytes. False: not confirmed (a
 * map that differs, or one this leaves to the Python comparison, scanner.storage.entrylog.ledgers_map_of). */
static PyObject *Walker_agrees_with_map(Walker *w, PyObject *args) {
    Py_buffer items;
    if (!PyArg_ParseTuple(args, "y*", &items))
        return NULL;
    const uint8_t *at = items.buf;
    Py_ssize_t n = items.len / 16, walked = 0, i;
    for (size_t k = 0; k < w->ledgers.capacity; k++)
        walked += w->ledgers.slots[k].used && w->ledgers.slots[k].bytes != 0;
    int agrees = items.len % 16 == 0 && n == walked;
    for (i = 0; agrees && i < n; i++) {
        uint64_t ledger = big_endian64(at + 16 * i), bytes = big_endian64(at + 16 * i + 8);
        Ledger *s = (int64_t)ledger < 0 || (int64_t)bytes <= 0 ? NULL : find_ledger(&w->ledgers, ledger);
        if (s == NULL || s->matched || s->bytes != bytes)
            agrees = 0;
        else
            s->matched = 1;
    }
    for (Py_ssize_t j = 0; j < i; j++) { /* the marks of this call cleared: each item before where it stopped */
        Ledger *s = find_ledger(&w->ledgers, big_endian64(at + 16 * j));
        if (s != NULL)
            s->matched = 0;
    }
    PyBuffer_Release(&items);
    return PyBool_FromLong(agrees);
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
    {"agrees_with_map", (PyCFunction)Walker_agrees_with_map, METH_VARARGS,
     "agrees_with_map(items) -> True where the ledgers map's items are confirmed to be ledger_bytes(), else False"},
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

int record_walk_add(PyObject *m) {
    if (PyType_Ready(&WalkerType) < 0)
        return -1;
    Py_INCREF(&WalkerType);
    if (PyModule_AddObject(m, "Walker", (PyObject *)&WalkerType) < 0) {
        Py_DECREF(&WalkerType);
        return -1;
    }
    return 0;
}
