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
 * Also here, the per-znode work of the dump store's scratch file (scanner/metadata/znode_table.py), which feeds
 * the same batches: its records found by path hash and parsed, every length checked against what was read.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

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

/* One ledger: (digest type number or 0, password or None, complete) or None for the Python reference. */
static PyObject *lean_ledger(PyObject *ledger_id, PyObject *data, const uint8_t *bookie, Py_ssize_t bookie_length,
                             PyObject *entry_ids) {
    if (!PyBytes_Check(data) || entry_ids == Py_None)
        Py_RETURN_NONE;
    int overflow;
    long long id = PyLong_AsLongLongAndOverflow(ledger_id, &overflow);
    if (id == -1 && PyErr_Occurred())
        return NULL;
    if (overflow || id < 0)
        Py_RETURN_NONE;
    const uint8_t *at = (const uint8_t *)PyBytes_AS_STRING(data), *end = at + PyBytes_GET_SIZE(data);
    uint64_t size;
    if ((size_t)(end - at) < HEADER_LENGTH || memcmp(at, HEADER, HEADER_LENGTH) != 0)
        Py_RETURN_NONE;
    at += HEADER_LENGTH;
    const uint8_t *size_start = at;
    if (!read_varint(&at, end, &size) || at - size_start > 5 || size > INT32_MAX || size > (uint64_t)(end - at))
        Py_RETURN_NONE;
    Lean lean;
    memset(&lean, 0, sizeof lean);
    lean.last_entry_id = 0;
    lean.digest_type = 1; /* an absent digestType reads as the enum's first value */
    if (!read_body(at, at + size, bookie, bookie_length, &lean) || !lean.has_write_quorum || !lean.has_ensemble_size
        || !lean.has_length || !lean.has_state || !holds_invariants(&lean))
        Py_RETURN_NONE;
    if (lean.state != 3)
        lean.last_entry_id = -1;

    Py_buffer view;
    if (PyObject_GetBuffer(entry_ids, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    int complete = 0, usable = COUNTS_COMPLETENESS && view.itemsize == 8 && view.format != NULL &&
                               strcmp(view.format, "Q") == 0;
#if COUNTS_COMPLETENESS
    if (usable)
        complete = holds_every_entry(&lean, (const uint64_t *)view.buf, view.len / 8);
#endif
    PyBuffer_Release(&view);
    if (!usable)
        Py_RETURN_NONE;
    if (!lean.has_password)
        return Py_BuildValue("(iOO)", 0, Py_None, complete ? Py_True : Py_False);
    return Py_BuildValue("(iy#O)", (int)lean.digest_type, (const char *)lean.password, lean.password_length,
                         complete ? Py_True : Py_False);
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

/* ---- The dump store's scratch file (scanner/metadata/znode_table.py): lookups by path hash, records parsed. ---- */

/* A read-only buffer of uint64 values ("Q"); -1 with an exception otherwise. */
static int uint64_view(PyObject *object, Py_buffer *view) {
    if (PyObject_GetBuffer(object, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (view->itemsize != 8 || view->format == NULL || strcmp(view->format, "Q") != 0) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_TypeError, "expected an array('Q')");
        return -1;
    }
    return 0;
}

/* find_records(keys, numbers, wanted) -> list: per wanted key the record numbers whose key equals it (keys ascending,
 * numbers alongside), as one int, a tuple of several, or None for none. */
static PyObject *find_records(PyObject *self, PyObject *args) {
    PyObject *objects[3];
    if (!PyArg_ParseTuple(args, "OOO", &objects[0], &objects[1], &objects[2]))
        return NULL;
    Py_buffer views[3];
    int held = 0;
    PyObject *result = NULL;
    for (; held < 3; held++)
        if (uint64_view(objects[held], &views[held]) < 0)
            goto done;
    if (views[0].len != views[1].len) {
        PyErr_SetString(PyExc_ValueError, "keys and numbers must be of one length");
        goto done;
    }
    const uint64_t *keys = views[0].buf, *numbers = views[1].buf, *wanted = views[2].buf;
    Py_ssize_t n = views[0].len / 8, count = views[2].len / 8;
    result = PyList_New(count);
    if (result == NULL)
        goto done;
    for (Py_ssize_t w = 0; w < count; w++) {
        Py_ssize_t low = 0, high = n;
        while (low < high) {
            Py_ssize_t middle = low + (high - low) / 2;
            if (keys[middle] < wanted[w])
                low = middle + 1;
            else
                high = middle;
        }
        Py_ssize_t end = low;
        while (end < n && keys[end] == wanted[w])
            end++;
        PyObject *found;
        if (end == low) {
            found = Py_NewRef(Py_None);
        } else if (end == low + 1) {
            found = PyLong_FromUnsignedLongLong(numbers[low]);
        } else {
            found = PyTuple_New(end - low);
            for (Py_ssize_t i = low; found != NULL && i < end; i++) {
                PyObject *number = PyLong_FromUnsignedLongLong(numbers[i]);
                if (number == NULL)
                    Py_CLEAR(found);
                else
                    PyTuple_SET_ITEM(found, i - low, number);
            }
        }
        if (found == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, w, found);
    }
done:
    while (held > 0)
        PyBuffer_Release(&views[--held]);
    return result;
}

#define RECORD_HEADER 34 /* little-endian: uint32 path length, int32 data length (-1: none), uint8 ephemeral,
                            int64 mzxid, int64 version, uint8 ctime known, int64 ctime */

static uint64_t little_endian(const uint8_t *at, int width) {
    uint64_t value = 0;
    for (int i = width - 1; i >= 0; i--)
        value = (value << 8) | at[i];
    return value;
}

/* One record at span[at:] as (path, data or None, ephemeral, mzxid, version, ctime or None), or its path alone;
 * NULL with ValueError when it does not fit in the span. */
static PyObject *parse_record(const uint8_t *span, Py_ssize_t size, Py_ssize_t at, int path_only) {
    if (at < 0 || at > size || size - at < RECORD_HEADER) {
        PyErr_SetString(PyExc_ValueError, "a znode record runs past what was read");
        return NULL;
    }
    const uint8_t *header = span + at;
    uint64_t path_length = little_endian(header, 4);
    int64_t data_length = (int32_t)(uint32_t)little_endian(header + 4, 4);
    Py_ssize_t left = size - at - RECORD_HEADER;
    if (path_length > (uint64_t)left || data_length < -1 || (data_length > 0 && (uint64_t)data_length > (uint64_t)left - path_length)) {
        PyErr_SetString(PyExc_ValueError, "a znode record runs past what was read");
        return NULL;
    }
    const uint8_t *path = header + RECORD_HEADER;
    PyObject *path_text = PyUnicode_DecodeUTF8((const char *)path, (Py_ssize_t)path_length, "surrogatepass");
    if (path_text == NULL || path_only)
        return path_text;
    PyObject *data = data_length < 0 ? Py_NewRef(Py_None)
                                     : PyBytes_FromStringAndSize((const char *)path + path_length, data_length);
    if (data == NULL) {
        Py_DECREF(path_text);
        return NULL;
    }
    PyObject *ctime = header[25] ? PyLong_FromLongLong((int64_t)little_endian(header + 26, 8)) : Py_NewRef(Py_None);
    if (ctime == NULL) {
        Py_DECREF(path_text);
        Py_DECREF(data);
        return NULL;
    }
    return Py_BuildValue("(NNOLLN)", path_text, data, header[8] ? Py_True : Py_False,
                         (long long)(int64_t)little_endian(header + 9, 8), (long long)(int64_t)little_endian(header + 17, 8),
                         ctime);
}

/* parse_records(span, offsets, paths_only) -> list of (path, data or None, ephemeral, mzxid, version, ctime or
 * None), or of paths, one per offset into span; ValueError for a record that does not fit. */
static PyObject *parse_records(PyObject *self, PyObject *args) {
    Py_buffer span;
    PyObject *offsets;
    int paths_only;
    if (!PyArg_ParseTuple(args, "y*O!p", &span, &PyList_Type, &offsets, &paths_only))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(offsets);
    PyObject *result = PyList_New(count);
    for (Py_ssize_t i = 0; result != NULL && i < count; i++) {
        Py_ssize_t at = PyLong_AsSsize_t(PyList_GET_ITEM(offsets, i));
        PyObject *record = at == -1 && PyErr_Occurred() ? NULL : parse_record(span.buf, span.len, at, paths_only);
        if (record == NULL)
            Py_CLEAR(result);
        else
            PyList_SET_ITEM(result, i, record);
    }
    PyBuffer_Release(&span);
    return result;
}

static signed char base64_values[256]; /* the value of each base64 character; -1 for any other byte */

/* text (length a multiple of 4, at most two '=' at its end, every other byte of the alphabet) decoded into out;
 * the number of bytes, or -1 for text in any other form (base64.b64decode words what is wrong with it). */
static Py_ssize_t decode_base64(const uint8_t *text, Py_ssize_t length, uint8_t *out) {
    if (length % 4 != 0)
        return -1;
    Py_ssize_t padding = 0;
    while (padding < 2 && padding < length && text[length - 1 - padding] == '=')
        padding++;
    Py_ssize_t written = 0;
    uint32_t bits = 0;
    for (Py_ssize_t i = 0; i < length - padding; i++) {
        int value = base64_values[text[i]];
        if (value < 0)
            return -1;
        bits = (bits << 6) | (uint32_t)value;
        if (i % 4 == 3) {
            out[written++] = (uint8_t)(bits >> 16);
            out[written++] = (uint8_t)(bits >> 8);
            out[written++] = (uint8_t)bits;
            bits = 0;
        }
    }
    if (padding == 2) {
        out[written++] = (uint8_t)(bits >> 4); /* 12 bits: one byte, the last 4 bits unused */
    } else if (padding == 1) {
        out[written++] = (uint8_t)(bits >> 10); /* 18 bits: two bytes, the last 2 unused */
        out[written++] = (uint8_t)(bits >> 2);
    }
    return written;
}

/* An int field of a dump item: absent or null (*known 0), or an int (not a bool) in the 64-bit range; 0 for any
 * other value (the Python reference words it). */
static int int64_field(PyObject *item, PyObject *key, int64_t *value, int *known) {
    PyObject *found = PyDict_GetItemWithError(item, key);
    if (found == NULL && PyErr_Occurred())
        return -1;
    *known = 0;
    *value = 0;
    if (found == NULL || found == Py_None)
        return 1;
    if (!PyLong_CheckExact(found))
        return 0;
    int overflow;
    long long number = PyLong_AsLongLongAndOverflow(found, &overflow);
    if (number == -1 && PyErr_Occurred())
        return -1;
    if (overflow)
        return 0;
    *known = 1;
    *value = number;
    return 1;
}

static void put_little_endian(uint8_t *at, uint64_t value, int width) {
    for (int i = 0; i < width; i++, value >>= 8)
        at[i] = (uint8_t)value;
}

typedef struct {
    uint8_t *bytes;
    size_t used, size;
} Growing;

static uint8_t *make_room(Growing *buffer, size_t more) {
    if (more > SIZE_MAX / 2 - buffer->used) {
        PyErr_NoMemory();
        return NULL;
    }
    if (buffer->used + more > buffer->size) {
        size_t size = buffer->size ? buffer->size : 1 << 16;
        while (size < buffer->used + more)
            size *= 2;
        uint8_t *grown = PyMem_Realloc(buffer->bytes, size);
        if (grown == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        buffer->bytes = grown;
        buffer->size = size;
    }
    return buffer->bytes + buffer->used;
}

static PyObject *key_path, *key_data, *key_ephemeral, *key_mzxid, *key_version, *key_ctime;

/* One dump item packed as a record at the end of records (its length at the end of lengths); 0 when it is not of
 * the common form, -1 on an exception. */
static int pack_item(PyObject *item, Growing *records, Growing *lengths) {
    if (!PyDict_CheckExact(item))
        return 0;
    PyObject *path = PyDict_GetItemWithError(item, key_path);
    if (path == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!PyUnicode_CheckExact(path) || !PyUnicode_IS_ASCII(path) || PyUnicode_GET_LENGTH(path) < 1
        || PyUnicode_GET_LENGTH(path) > INT32_MAX || PyUnicode_1BYTE_DATA(path)[0] != '/')
        return 0;
    PyObject *encoded = PyDict_GetItemWithError(item, key_data);
    if (encoded == NULL && PyErr_Occurred())
        return -1;
    Py_ssize_t text_length = 0;
    if (encoded != NULL && encoded != Py_None) {
        if (!PyUnicode_CheckExact(encoded) || !PyUnicode_IS_ASCII(encoded) || PyUnicode_GET_LENGTH(encoded) / 4 * 3 > INT32_MAX)
            return 0;
        text_length = PyUnicode_GET_LENGTH(encoded);
    }
    PyObject *ephemeral = PyDict_GetItemWithError(item, key_ephemeral);
    if (ephemeral == NULL && PyErr_Occurred())
        return -1;
    if (ephemeral != NULL && ephemeral != Py_True && ephemeral != Py_False)
        return 0;
    int64_t mzxid, version, ctime;
    int has_mzxid, has_version, has_ctime, ok;
    if ((ok = int64_field(item, key_mzxid, &mzxid, &has_mzxid)) != 1 || (ok = int64_field(item, key_version, &version, &has_version)) != 1
        || (ok = int64_field(item, key_ctime, &ctime, &has_ctime)) != 1)
        return ok;
    Py_ssize_t path_length = PyUnicode_GET_LENGTH(path);
    uint8_t *record = make_room(records, RECORD_HEADER + (size_t)path_length + (size_t)text_length / 4 * 3);
    if (record == NULL || make_room(lengths, 4) == NULL)
        return -1;
    int64_t data_length = -1;
    if (encoded != NULL && encoded != Py_None) {
        data_length = decode_base64(PyUnicode_1BYTE_DATA(encoded), text_length, record + RECORD_HEADER + path_length);
        if (data_length < 0)
            return 0;
    }
    put_little_endian(record, (uint64_t)path_length, 4);
    put_little_endian(record + 4, (uint64_t)(uint32_t)(int32_t)data_length, 4);
    record[8] = ephemeral == Py_True;
    put_little_endian(record + 9, (uint64_t)mzxid, 8);
    put_little_endian(record + 17, (uint64_t)version, 8);
    record[25] = (uint8_t)has_ctime;
    put_little_endian(record + 26, (uint64_t)ctime, 8);
    memcpy(record + RECORD_HEADER, PyUnicode_1BYTE_DATA(path), path_length);
    size_t length = RECORD_HEADER + (size_t)path_length + (size_t)(data_length < 0 ? 0 : data_length);
    records->used += length;
    uint32_t length32 = (uint32_t)length;
    memcpy(lengths->bytes + lengths->used, &length32, 4);
    lengths->used += 4;
    return 1;
}

/* pack_znodes(items, start) -> (records, paths, lengths, taken): items[start:] packed as the dump store's records
 * up to the first not of the common form (a dict with an ASCII absolute path, base64 data or null, ephemeral true,
 * false or absent, mzxid, version and ctime 64-bit ints or null or absent); lengths: native uint32 each. */
static PyObject *pack_znodes(PyObject *self, PyObject *args) {
    PyObject *items;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "O!n", &PyList_Type, &items, &start))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items);
    if (start < 0 || start > n) {
        PyErr_SetString(PyExc_ValueError, "start is outside the items");
        return NULL;
    }
    Growing records = {NULL, 0, 0}, lengths = {NULL, 0, 0};
    PyObject *paths = PyList_New(0), *result = NULL;
    if (paths == NULL)
        return NULL;
    Py_ssize_t i = start;
    for (; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        int packed = pack_item(item, &records, &lengths);
        if (packed < 0)
            goto done;
        if (packed == 0)
            break;
        if (PyList_Append(paths, PyDict_GetItem(item, key_path)) < 0)
            goto done;
    }
    result = Py_BuildValue("(y#Oy#n)", records.bytes ? (const char *)records.bytes : "", (Py_ssize_t)records.used, paths,
                           lengths.bytes ? (const char *)lengths.bytes : "", (Py_ssize_t)lengths.used, i - start);
done:
    PyMem_Free(records.bytes);
    PyMem_Free(lengths.bytes);
    Py_DECREF(paths);
    return result;
}

static PyMethodDef methods[] = {
    {"lean_batch", lean_batch, METH_VARARGS,
     "lean_batch(ledger_ids, znode_data, bookie_id: bytes, entry_ids) -> list of (digest type number or 0, password "
     "or None, whether the index holds every entry owed) or None where the Python reference must decode"},
    {"find_records", find_records, METH_VARARGS,
     "find_records(keys, numbers, wanted) -> per wanted key: the record number with that key (keys ascending, "
     "numbers alongside), a tuple of several, or None"},
    {"parse_records", parse_records, METH_VARARGS,
     "parse_records(span, offsets, paths_only) -> [(path, data or None, ephemeral, mzxid, version, ctime or None)] "
     "or [path]: the dump store's scratch records at each offset of span"},
    {"pack_znodes", pack_znodes, METH_VARARGS,
     "pack_znodes(items, start) -> (records, paths, lengths, taken): dump items from start packed as the dump "
     "store's records, up to the first not of the common form"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "_lean_meta", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__lean_meta(void) {
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    memset(base64_values, -1, sizeof base64_values);
    for (int i = 0; i < 64; i++)
        base64_values[(uint8_t)alphabet[i]] = (signed char)i;
    if ((key_path = PyUnicode_InternFromString("path")) == NULL
        || (key_data = PyUnicode_InternFromString("data_b64")) == NULL
        || (key_ephemeral = PyUnicode_InternFromString("ephemeral")) == NULL
        || (key_mzxid = PyUnicode_InternFromString("mzxid")) == NULL
        || (key_version = PyUnicode_InternFromString("version")) == NULL
        || (key_ctime = PyUnicode_InternFromString("ctime")) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
