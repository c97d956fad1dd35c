/* What a pass's index step needs from each ledger's metadata, decoded lean and in batches.
 *
 * For each ledger of a batch: its digest type and password (for the ledger table) and whether its index holds
 * every entry its write sets give this bookie (the completeness count of scanner/scan/completeness.py), from the
 * znode's bytes, with no metadata object in between. Only the common form is taken: format version 3, a
 * protobuf body of LedgerMetadataFormat's known fields, each of the wire type and range its declaration gives,
 * enum values BookKeeper defines, ASCII strings, every required field present and every invariant
 * LedgerMetadata checks holding. Anything else (another version, an unknown field, damage, a violated invariant,
 * an index not held in a 64-bit unsigned array) gives None: the caller then decodes that ledger with the Python
 * reference (scanner.metadata.ledger), which words the error. Every length read from the bytes is checked
 * against what is left before use.
 *
 * From the same decode, whether any ensemble of a ledger has this bookie (placed_batch; scanner/scan/lean_metadata.py's
 * placed_reference is the reference): a `.idx` bookie's index files are looked for where the metadata places them. A
 * placed ledger's decode is kept (a few dozen bytes) until its index is read, then answered from (lean_placed_batch):
 * each znode is decoded once.
 *
 * Also here, the completeness count for a ledger decoded whole (owned_count: scanner/scan/completeness.py is the
 * reference).
 */

#include "native.h"

static const char HEADER[] = "BookieMetadataFormatVersion\t3\n";
#define HEADER_LENGTH (sizeof(HEADER) - 1)
#define MAX_SEGMENTS 64 /* more ensembles than this: the Python reference decodes the ledger */

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LENGTH = 2, WIRE_FIXED32 = 5 };

typedef struct {
    int64_t first_entry_id;
    Py_ssize_t members;
    Py_ssize_t bookie_index; /* the first member equal to the bookie asked about; -1: not a member */
} Segment;

typedef struct {
    int64_t write_quorum, ensemble_size, ack_quorum, last_entry_id, state, digest_type;
    int has_write_quorum, has_ensemble_size, has_length, has_state, has_ack_quorum, has_password;
    const uint8_t *password;
    Py_ssize_t password_length;
    Segment segments[MAX_SEGMENTS];
    int segment_count;
} Lean;

/* A varint of at most 10 bytes into *value; 0 when it is cut or longer. */
static int read_varint(const uint8_t **at, const uint8_t *end, uint64_t *value) {
    uint64_t result = 0;
    for (int shift = 0; shift < 70 && *at < end; shift += 7) {
        uint8_t byte = *(*at)++;
        if (shift == 63 && byte > 1)
            return 0;
        result |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *value = result;
            return 1;
        }
    }
    return 0;
}

/* A length-delimited field's bytes: checked against what is left. */
static int read_length(const uint8_t **at, const uint8_t *end, const uint8_t **start, Py_ssize_t *length) {
    uint64_t size;
    if (!read_varint(at, end, &size) || size > (uint64_t)(end - *at))
        return 0;
    *start = *at;
    *length = (Py_ssize_t)size;
    *at += size;
    return 1;
}

static int ascii(const uint8_t *text, Py_ssize_t length) {
    for (Py_ssize_t i = 0; i < length; i++)
        if (text[i] & 0x80)
            return 0;
    return 1;
}

static int int32_value(uint64_t raw, int64_t *value) {
    int64_t signed_value = (int64_t)raw;
    if (signed_value < INT32_MIN || signed_value > INT32_MAX)
        return 0;
    *value = signed_value;
    return 1;
}

static int read_segment(const uint8_t *at, const uint8_t *end, const uint8_t *bookie, Py_ssize_t bookie_length,
                        Segment *segment) {
    int has_first = 0;
    segment->members = 0;
    segment->bookie_index = -1;
    while (at < end) {
        uint64_t key, raw;
        if (!read_varint(&at, end, &key))
            return 0;
        if (key == ((1 << 3) | WIRE_LENGTH)) {
            const uint8_t *member;
            Py_ssize_t length;
            if (!read_length(&at, end, &member, &length) || !ascii(member, length))
                return 0;
            if (segment->bookie_index < 0 && length == bookie_length && memcmp(member, bookie, length) == 0)
                segment->bookie_index = segment->members;
            segment->members++;
        } else if (key == ((2 << 3) | WIRE_VARINT)) {
            if (!read_varint(&at, end, &raw))
                return 0;
            segment->first_entry_id = (int64_t)raw;
            has_first = 1;
        } else {
            return 0;
        }
    }
    return has_first;
}

static int read_custom_entry(const uint8_t *at, const uint8_t *end) {
    while (at < end) {
        uint64_t key;
        const uint8_t *start;
        Py_ssize_t length;
        if (!read_varint(&at, end, &key) || (key != ((1 << 3) | WIRE_LENGTH) && key != ((2 << 3) | WIRE_LENGTH))
            || !read_length(&at, end, &start, &length))
            return 0;
        if (key == ((1 << 3) | WIRE_LENGTH) && !ascii(start, length))
            return 0;
    }
    return 1;
}

/* The body's fields into *lean; 0 for anything but the common form. */
static int read_body(const uint8_t *at, const uint8_t *end, const uint8_t *bookie, Py_ssize_t bookie_length,
                     Lean *lean) {
    while (at < end) {
        uint64_t key, raw;
        const uint8_t *start;
        Py_ssize_t length;
        if (!read_varint(&at, end, &key))
            return 0;
        uint64_t field = key >> 3;
        int wire = (int)(key & 7);
        if (field == 6 || field == 8 || field == 11) {
            if (wire != WIRE_LENGTH || !read_length(&at, end, &start, &length))
                return 0;
            if (field == 6) {
                if (lean->segment_count == MAX_SEGMENTS)
                    return 0;
                if (!read_segment(start, start + length, bookie, bookie_length, &lean->segments[lean->segment_count++]))
                    return 0;
            } else if (field == 8) {
                lean->password = start;
                lean->password_length = length;
                lean->has_password = 1;
            } else if (!read_custom_entry(start, start + length)) {
                return 0;
            }
            continue;
        }
        if (wire != WIRE_VARINT || field < 1 || field > 12 || !read_varint(&at, end, &raw))
            return 0;
        switch (field) {
        case 1:
            if (!int32_value(raw, &lean->write_quorum))
                return 0;
            lean->has_write_quorum = 1;
            break;
        case 2:
            if (!int32_value(raw, &lean->ensemble_size))
                return 0;
            lean->has_ensemble_size = 1;
            break;
        case 3:
            lean->has_length = 1;
            break;
        case 4:
            lean->last_entry_id = (int64_t)raw;
            break;
        case 5:
            if (raw < 1 || raw > 3)
                return 0;
            lean->state = (int64_t)raw;
            lean->has_state = 1;
            break;
        case 7:
            if (raw < 1 || raw > 4)
                return 0;
            lean->digest_type = (int64_t)raw;
            break;
        case 9:
            if (!int32_value(raw, &lean->ack_quorum))
                return 0;
            lean->has_ack_quorum = 1;
            break;
        default: /* 10 ctime, 12 cToken: int64, not needed */
            break;
        }
    }
    return 1;
}

/* The checks LedgerMetadata makes when it is built (scanner.metadata.ledger._invariant_violation). */
static int holds_invariants(const Lean *lean) {
    int64_t ack = lean->has_ack_quorum ? lean->ack_quorum : lean->write_quorum;
    if (lean->write_quorum < 1 || lean->write_quorum > lean->ensemble_size || ack > lean->write_quorum
        || lean->segment_count == 0)
        return 0;
    for (int i = 0; i < lean->segment_count; i++) {
        if (lean->segments[i].members != lean->ensemble_size)
            return 0;
        if (i > 0 && lean->segments[i].first_entry_id < lean->segments[i - 1].first_entry_id)
            return 0;
    }
    return 1;
}

/* The completeness count's sums need 128 bits (a 64-bit GCC or Clang has them); without, the Python reference counts. */
#ifdef __SIZEOF_INT128__
#define COUNTS_COMPLETENESS 1
#else
#define COUNTS_COMPLETENESS 0
#endif

#if COUNTS_COMPLETENESS
/* How many of the ascending ids are below key (bisect_left), at or below key (bisect_right). */
static Py_ssize_t count_below(const uint64_t *ids, Py_ssize_t n, __int128 key, int or_equal) {
    Py_ssize_t low = 0, high = n;
    while (low < high) {
        Py_ssize_t middle = low + (high - low) / 2;
        __int128 id = ids[middle];
        if (id < key || (or_equal && id == key))
            low = middle + 1;
        else
            high = middle;
    }
    return low;
}

static int owed(__int128 entry, int64_t index, int64_t size, int64_t quorum) {
    __int128 offset = ((__int128)index - entry) % size;
    if (offset < 0)
        offset += size;
    return offset < quorum;
}

/* Whether every one of the ascending ids is owed to ensemble index `index`: (index - id) mod size < quorum. Each id's
 * residue mod size follows from the previous one's when it is less than size further (no division per entry). */
static int all_owed(const uint64_t *ids, Py_ssize_t n, int64_t index, int64_t size, int64_t quorum) {
    uint64_t residue = 0, previous = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        uint64_t id = ids[j], step = id - previous;
        if (j == 0 || step >= (uint64_t)size) {
            residue = id % (uint64_t)size;
        } else {
            residue += step;
            if (residue >= (uint64_t)size)
                residue -= (uint64_t)size;
        }
        previous = id;
        int64_t offset = index - (int64_t)residue;
        if (offset < 0)
            offset += size;
        if (offset >= quorum)
            return 0;
    }
    return 1;
}

/* completeness.holds_every_entry on the lean fields. */
static int holds_every_entry(const Lean *lean, const uint64_t *ids, Py_ssize_t n) {
    int64_t size = lean->ensemble_size, quorum = lean->write_quorum;
    int closed = lean->state == 3;
    for (int i = 0; i < lean->segment_count; i++) {
        const Segment *segment = &lean->segments[i];
        if (segment->bookie_index < 0)
            continue;
        __int128 first = segment->first_entry_id, last;
        int bounded = i + 1 < lean->segment_count || closed;
        if (!bounded)
            continue; /* the open end of a ledger still written */
        if (i + 1 < lean->segment_count) {
            last = (__int128)lean->segments[i + 1].first_entry_id - 1;
            if (closed && lean->last_entry_id < last)
                last = lean->last_entry_id;
        } else {
            last = lean->last_entry_id;
        }
        if (last < first)
            continue;
        Py_ssize_t low = count_below(ids, n, first, 0), high = count_below(ids, n, last, 1);
        __int128 listed = high - low;
        if (quorum == size) {
            if (listed != last - first + 1)
                return 0;
            continue;
        }
        __int128 span = last - first + 1, whole = span / size, rest = span % size;
        __int128 striped = whole * quorum;
        for (__int128 e = first; e < first + rest; e++)
            striped += owed(e, segment->bookie_index, size, quorum);
        if (listed != striped)
            return 0;
        if (!all_owed(ids + low, high - low, segment->bookie_index, size, quorum))
            return 0;
    }
    return 1;
}
#endif /* COUNTS_COMPLETENESS */

/* A znode's bytes (a bytes object) into *lean; 0 for anything but the common form. */
static int decode_lean(PyObject *data, const uint8_t *bookie, Py_ssize_t bookie_length, Lean *lean) {
    const uint8_t *at = (const uint8_t *)PyBytes_AS_STRING(data), *end = at + PyBytes_GET_SIZE(data);
    uint64_t size;
    if ((size_t)(end - at) < HEADER_LENGTH || memcmp(at, HEADER, HEADER_LENGTH) != 0)
        return 0;
    at += HEADER_LENGTH;
    const uint8_t *size_start = at;
    if (!read_varint(&at, end, &size) || at - size_start > 5 || size > INT32_MAX || size > (uint64_t)(end - at))
        return 0;
    memset(lean, 0, sizeof *lean);
    lean->last_entry_id = 0;
    lean->digest_type = 1; /* an absent digestType reads as the enum's first value */
    if (!read_body(at, at + size, bookie, bookie_length, lean) || !lean->has_write_quorum || !lean->has_ensemble_size
        || !lean->has_length || !lean->has_state || !holds_invariants(lean))
        return 0;
    if (lean->state != 3)
        lean->last_entry_id = -1;
    return 1;
}

/* The ledger's lean answer from its decode: (digest type number or 0, password or None, complete), or None for the
 * Python reference (entry ids not a uint64 column, or no 128-bit sums to count with). */
static PyObject *lean_answer(const Lean *lean, PyObject *entry_ids) {
    Py_buffer view;
    if (uint64_column(entry_ids, &view) < 0) { /* not a uint64 column: the Python reference counts */
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    int complete = 0;
#if COUNTS_COMPLETENESS
    complete = holds_every_entry(lean, (const uint64_t *)view.buf, view.len / 8);
#endif
    PyBuffer_Release(&view);
    if (!COUNTS_COMPLETENESS)
        Py_RETURN_NONE;
    if (!lean->has_password)
        return Py_BuildValue("(iOO)", 0, Py_None, complete ? Py_True : Py_False);
    return Py_BuildValue("(iy#O)", (int)lean->digest_type, (const char *)lean->password, lean->password_length,
                         complete ? Py_True : Py_False);
}

/* Whether the ledger id is one the lean answer is given for (a non-negative 64-bit id); -1 with an error set. */
static int answerable_id(PyObject *ledger_id) {
    int overflow;
    long long id = PyLong_AsLongLongAndOverflow(ledger_id, &overflow);
    if (id == -1 && PyErr_Occurred())
        return -1;
    return !overflow && id >= 0;
}

/* One ledger: its lean answer, or None for the Python reference. */
static PyObject *lean_ledger(PyObject *ledger_id, PyObject *data, const uint8_t *bookie, Py_ssize_t bookie_length,
                             PyObject *entry_ids) {
    if (!PyBytes_Check(data) || entry_ids == Py_None)
        Py_RETURN_NONE;
    int answerable = answerable_id(ledger_id);
    if (answerable < 0)
        return NULL;
    Lean lean;
    if (!answerable || !decode_lean(data, bookie, bookie_length, &lean))
        Py_RETURN_NONE;
    return lean_answer(&lean, entry_ids);
}

/* A placed ledger's decode, kept for lean_placed_batch as bytes: this head, the segments, the password. Read back
 * with every length checked all the same. */
typedef struct {
    int64_t ensemble_size, write_quorum, state, last_entry_id, digest_type;
    int64_t has_password, password_length, segment_count;
} PackedHead;

typedef struct {
    int64_t first_entry_id, bookie_index;
} PackedSegment;

static PyObject *packed_lean(const Lean *lean) {
    Py_ssize_t password_length = lean->has_password ? lean->password_length : 0;
    Py_ssize_t size = (Py_ssize_t)sizeof(PackedHead) + lean->segment_count * (Py_ssize_t)sizeof(PackedSegment)
                      + password_length;
    PyObject *packed = PyBytes_FromStringAndSize(NULL, size);
    if (packed == NULL)
        return NULL;
    char *at = PyBytes_AS_STRING(packed);
    PackedHead head = {lean->ensemble_size, lean->write_quorum, lean->state, lean->last_entry_id, lean->digest_type,
                       lean->has_password, password_length, lean->segment_count};
    memcpy(at, &head, sizeof head);
    at += sizeof head;
    for (int i = 0; i < lean->segment_count; i++) {
        PackedSegment segment = {lean->segments[i].first_entry_id, lean->segments[i].bookie_index};
        memcpy(at, &segment, sizeof segment);
        at += sizeof segment;
    }
    if (password_length)
        memcpy(at, lean->password, password_length);
    return packed;
}

/* packed_lean's bytes back into *lean (the password pointing into them); 0 for bytes that are not its form. */
static int unpacked_lean(PyObject *packed, Lean *lean) {
    if (!PyBytes_Check(packed))
        return 0;
    const char *at = PyBytes_AS_STRING(packed);
    Py_ssize_t size = PyBytes_GET_SIZE(packed);
    PackedHead head;
    if (size < (Py_ssize_t)sizeof head)
        return 0;
    memcpy(&head, at, sizeof head);
    if (head.segment_count < 1 || head.segment_count > MAX_SEGMENTS || head.password_length < 0
        || head.password_length > size || (head.has_password != 0 && head.has_password != 1)
        || size != (Py_ssize_t)sizeof head + head.segment_count * (Py_ssize_t)sizeof(PackedSegment)
                       + head.password_length)
        return 0;
    memset(lean, 0, sizeof *lean);
    lean->ensemble_size = head.ensemble_size;
    lean->write_quorum = head.write_quorum;
    lean->state = head.state;
    lean->last_entry_id = head.last_entry_id;
    lean->digest_type = head.digest_type;
    lean->has_password = (int)head.has_password;
    lean->segment_count = (int)head.segment_count;
    at += sizeof head;
    for (int i = 0; i < lean->segment_count; i++) {
        PackedSegment segment;
        memcpy(&segment, at, sizeof segment);
        at += sizeof segment;
        lean->segments[i].first_entry_id = segment.first_entry_id;
        lean->segments[i].bookie_index = (Py_ssize_t)segment.bookie_index;
        lean->segments[i].members = (Py_ssize_t)head.ensemble_size;
    }
    lean->password = (const uint8_t *)at;
    lean->password_length = (Py_ssize_t)head.password_length;
    return 1;
}

static PyObject *lean_batch(PyObject *self, PyObject *args) {
    PyObject *ledger_ids, *datas, *entry_ids;
    const char *bookie;
    Py_ssize_t bookie_length;
    if (!PyArg_ParseTuple(args, "O!O!y#O!", &PyList_Type, &ledger_ids, &PyList_Type, &datas, &bookie, &bookie_length,
                          &PyList_Type, &entry_ids))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(ledger_ids);
    if (PyList_GET_SIZE(datas) != n || PyList_GET_SIZE(entry_ids) != n) {
        PyErr_SetString(PyExc_ValueError, "ledger ids, znode data and entry ids must be lists of one length");
        return NULL;
    }
    PyObject *result = PyList_New(n);
    if (result == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *lean = lean_ledger(PyList_GET_ITEM(ledger_ids, i), PyList_GET_ITEM(datas, i),
                                     (const uint8_t *)bookie, bookie_length, PyList_GET_ITEM(entry_ids, i));
        if (lean == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        PyList_SET_ITEM(result, i, lean);
    }
    return result;
}

/* placed_batch(znode_data, bookie_id: bytes): for each znode's bytes (None: no znode), whether any ensemble of the
 * ledger has the bookie: False, or where it has, the decode kept (packed_lean: lean_placed_batch answers from it, with
 * no second decode); None where the Python reference must decode (no znode, not the common form). */
static PyObject *placed_batch(PyObject *self, PyObject *args) {
    PyObject *datas;
    const char *bookie;
    Py_ssize_t bookie_length;
    if (!PyArg_ParseTuple(args, "O!y#", &PyList_Type, &datas, &bookie, &bookie_length))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(datas);
    PyObject *result = PyList_New(n);
    if (result == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *data = PyList_GET_ITEM(datas, i), *placed = Py_None;
        Lean lean;
        if (PyBytes_Check(data) && decode_lean(data, (const uint8_t *)bookie, bookie_length, &lean)) {
            placed = Py_False;
            for (int segment = 0; segment < lean.segment_count; segment++)
                if (lean.segments[segment].bookie_index >= 0)
                    placed = NULL;
        }
        if (placed == NULL) {
            placed = packed_lean(&lean);
            if (placed == NULL) {
                Py_DECREF(result);
                return NULL;
            }
        } else {
            Py_INCREF(placed);
        }
        PyList_SET_ITEM(result, i, placed);
    }
    return result;
}

/* lean_placed_batch(ledger_ids, placed, entry_ids): lean_batch's answers from placed_batch's kept decodes (any other
 * item of placed: None, for the Python reference), with no second decode of the znodes. */
static PyObject *lean_placed_batch(PyObject *self, PyObject *args) {
    PyObject *ledger_ids, *placed, *entry_ids;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &ledger_ids, &PyList_Type, &placed, &PyList_Type, &entry_ids))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(ledger_ids);
    if (PyList_GET_SIZE(placed) != n || PyList_GET_SIZE(entry_ids) != n) {
        PyErr_SetString(PyExc_ValueError, "ledger ids, placements and entry ids must be lists of one length");
        return NULL;
    }
    PyObject *result = PyList_New(n);
    if (result == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *ids = PyList_GET_ITEM(entry_ids, i), *lean_of = NULL;
        Lean lean;
        int answerable = ids == Py_None ? 0 : answerable_id(PyList_GET_ITEM(ledger_ids, i));
        if (answerable < 0) {
            Py_DECREF(result);
            return NULL;
        }
        if (answerable && unpacked_lean(PyList_GET_ITEM(placed, i), &lean)) {
            lean_of = lean_answer(&lean, ids);
            if (lean_of == NULL) {
                Py_DECREF(result);
                return NULL;
            }
        } else {
            lean_of = Py_NewRef(Py_None);
        }
        PyList_SET_ITEM(result, i, lean_of);
    }
    return result;
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

static PyMethodDef methods[] = {
    {"lean_batch", lean_batch, METH_VARARGS,
     "lean_batch(ledger_ids, znode_data, bookie_id: bytes, entry_ids) -> list of (digest type number or 0, password "
     "or None, whether the index holds every entry owed) or None where the Python reference must decode"},
    {"placed_batch", placed_batch, METH_VARARGS,
     "placed_batch(znode_data, bookie_id: bytes) -> list of False where no ensemble has the bookie, the decode kept "
     "(bytes, for lean_placed_batch) where one has, or None where the Python reference must decode"},
    {"lean_placed_batch", lean_placed_batch, METH_VARARGS,
     "lean_placed_batch(ledger_ids, placed, entry_ids) -> lean_batch's answers from placed_batch's kept decodes, "
     "None where the Python reference must decode"},
    {"owned_count", native_owned_count, METH_VARARGS,
     "owned_count(entry_ids, low, high, index, size, quorum): entries of [low, high) striped onto ensemble index"},
    {NULL},
};

int lean_metadata_add(PyObject *m) { return PyModule_AddFunctions(m, methods); }
