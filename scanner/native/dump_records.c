/*
 * The dump store's scratch file (scanner/metadata/znode_table.py, the reference): a dump's znodes packed as its
 * records, records found by path hash and parsed, every length checked against what was read.
 */

#include "native.h"

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
        if (uint64_column(objects[held], &views[held]) < 0)
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

enum fields { WHOLE = 0, PATH = 1, PATH_AND_DATA = 2 }; /* what parse_records gives of each record */

/* One record at span[at:] as (path, data or None, ephemeral, mzxid, version, ctime or None), its path alone, or
 * (path, data or None), as `fields` says; NULL with ValueError when it does not fit in the span. */
static PyObject *parse_record(const uint8_t *span, Py_ssize_t size, Py_ssize_t at, int fields) {
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
    if (path_text == NULL || fields == PATH)
        return path_text;
    PyObject *data = data_length < 0 ? Py_NewRef(Py_None)
                                     : PyBytes_FromStringAndSize((const char *)path + path_length, data_length);
    if (data == NULL) {
        Py_DECREF(path_text);
        return NULL;
    }
    if (fields == PATH_AND_DATA)
        return Py_BuildValue("(NN)", path_text, data);
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

/* parse_records(span, offsets, fields) -> list of (path, data or None, ephemeral, mzxid, version, ctime or None)
 * (fields 0), of paths (1), or of (path, data or None) (2), one per offset into span; ValueError for a record that
 * does not fit, or other fields. */
static PyObject *parse_records(PyObject *self, PyObject *args) {
    Py_buffer span;
    PyObject *offsets;
    int fields;
    if (!PyArg_ParseTuple(args, "y*O!i", &span, &PyList_Type, &offsets, &fields))
        return NULL;
    if (fields != WHOLE && fields != PATH && fields != PATH_AND_DATA) {
        PyBuffer_Release(&span);
        PyErr_SetString(PyExc_ValueError, "fields: 0 (whole), 1 (path) or 2 (path and data)");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(offsets);
    PyObject *result = PyList_New(count);
    for (Py_ssize_t i = 0; result != NULL && i < count; i++) {
        Py_ssize_t at = PyLong_AsSsize_t(PyList_GET_ITEM(offsets, i));
        PyObject *record = at == -1 && PyErr_Occurred() ? NULL : parse_record(span.buf, span.len, at, fields);
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
/* One znode's record appended to records (its length to lengths): its ASCII path, its data as base64 text (NULL: no
 * data); 1, 0 for base64 not in the form decode_base64 takes (the Python reference words it), -1 with an error set. */
static int put_record(Growing *records, Growing *lengths, const uint8_t *path, Py_ssize_t path_length,
                      const uint8_t *encoded, Py_ssize_t text_length, int ephemeral, int64_t mzxid, int64_t version,
                      int has_ctime, int64_t ctime) {
    if (path_length > INT32_MAX || text_length / 4 * 3 > INT32_MAX)
        return 0;
    uint8_t *record = make_room(records, RECORD_HEADER + (size_t)path_length + (size_t)text_length / 4 * 3);
    if (record == NULL || make_room(lengths, 4) == NULL)
        return -1;
    int64_t data_length = -1;
    if (encoded != NULL) {
        data_length = decode_base64(encoded, text_length, record + RECORD_HEADER + path_length);
        if (data_length < 0)
            return 0;
    }
    put_little_endian(record, (uint64_t)path_length, 4);
    put_little_endian(record + 4, (uint64_t)(uint32_t)(int32_t)data_length, 4);
    record[8] = (uint8_t)(ephemeral != 0);
    put_little_endian(record + 9, (uint64_t)mzxid, 8);
    put_little_endian(record + 17, (uint64_t)version, 8);
    record[25] = (uint8_t)has_ctime;
    put_little_endian(record + 26, (uint64_t)ctime, 8);
    memcpy(record + RECORD_HEADER, path, path_length);
    size_t length = RECORD_HEADER + (size_t)path_length + (size_t)(data_length < 0 ? 0 : data_length);
    records->used += length;
    uint32_t length32 = (uint32_t)length;
    memcpy(lengths->bytes + lengths->used, &length32, 4);
    lengths->used += 4;
    return 1;
}

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
    return put_record(records, lengths, PyUnicode_1BYTE_DATA(path), PyUnicode_GET_LENGTH(path),
                      encoded != NULL && encoded != Py_None ? PyUnicode_1BYTE_DATA(encoded) : NULL, text_length,
                      ephemeral == Py_True, mzxid, version, has_ctime, ctime);
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

/* The parent of a path and whether its name is not empty, as str.rpartition("/") splits it: the parent ends before
 * the last '/' (none: the parent is ""). */
static Py_ssize_t parent_end(PyObject *path, int *named) {
    Py_ssize_t length = PyUnicode_GET_LENGTH(path), slash = PyUnicode_FindChar(path, '/', 0, length, -1);
    if (slash < 0) {
        *named = length > 0;
        return 0;
    }
    *named = slash + 1 < length;
    return slash;
}

/* child_runs(paths: list of str, first) -> [(parent, numbers)]: the records first, first + 1, ... (of paths) among
 * their parents' children (znode_table.ZNodeTable._note_children's reference loop): for each run of neighbours with
 * one parent, the numbers of those with a name, as native uint32 bytes (a parent may have several runs, in order). */
static PyObject *child_runs(PyObject *self, PyObject *args) {
    PyObject *paths;
    Py_ssize_t first;
    if (!PyArg_ParseTuple(args, "O!n", &PyList_Type, &paths, &first))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(paths);
    if (first < 0 || first + n - 1 > (Py_ssize_t)UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "record numbers beyond 32 bits");
        return NULL;
    }
    PyObject *runs = PyList_New(0);
    uint32_t *numbers = PyMem_Malloc((n ? n : 1) * sizeof(uint32_t));
    if (runs == NULL || numbers == NULL) {
        Py_XDECREF(runs);
        PyMem_Free(numbers);
        return PyErr_NoMemory();
    }
    Py_ssize_t i = 0;
    while (i < n) {
        PyObject *path = PyList_GET_ITEM(paths, i);
        if (!PyUnicode_Check(path)) {
            PyErr_SetString(PyExc_TypeError, "a path is not a str");
            goto failed;
        }
        int named;
        Py_ssize_t end = parent_end(path, &named), count = 0, j = i;
        int kind = PyUnicode_KIND(path);
        const char *data = PyUnicode_DATA(path);
        for (; j < n; j++) { /* the run: neighbours whose parent is this one, byte for byte */
            PyObject *other = PyList_GET_ITEM(paths, j);
            int other_named;
            if (j > i) {
                if (!PyUnicode_Check(other) || PyUnicode_KIND(other) != kind)
                    break;
                Py_ssize_t other_end = parent_end(other, &other_named);
                if (other_end != end || memcmp(PyUnicode_DATA(other), data, (size_t)end * kind) != 0)
                    break;
            } else {
                other_named = named;
            }
            if (other_named)
                numbers[count++] = (uint32_t)(first + j);
        }
        if (count) {
            PyObject *run = Py_BuildValue("(Ny#)", PyUnicode_Substring(path, 0, end), (const char *)numbers,
                                          count * (Py_ssize_t)sizeof(uint32_t));
            if (run == NULL || PyList_Append(runs, run) < 0) {
                Py_XDECREF(run);
                goto failed;
            }
            Py_DECREF(run);
        }
        i = j;
    }
    PyMem_Free(numbers);
    return runs;
failed:
    PyMem_Free(numbers);
    Py_DECREF(runs);
    return NULL;
}

/* ---- a dump's lines packed straight from their text ---------------------------------------------------- */

typedef struct {
    const uint8_t *at, *end;
} Text;

static int literal(Text *t, const char *expected) {
    size_t length = strlen(expected);
    if ((size_t)(t->end - t->at) < length || memcmp(t->at, expected, length) != 0)
        return 0;
    t->at += length;
    return 1;
}

/* A JSON string with no escape (printable ASCII but '"' and '\\'): its characters' start and length. */
static int plain_string(Text *t, const uint8_t **start, Py_ssize_t *length) {
    if (!literal(t, "\""))
        return 0;
    *start = t->at;
    while (t->at < t->end && *t->at != '"') {
        if (*t->at < 0x20 || *t->at > 0x7E || *t->at == '\\')
            return 0;
        t->at++;
    }
    if (t->at == t->end)
        return 0;
    *length = t->at - *start;
    t->at++;
    return 1;
}

/* A JSON integer (-?(0|[1-9][0-9]*), not the start of a fraction or an exponent) in the 64-bit range, or null. */
static int int64_or_null(Text *t, int64_t *value, int *known) {
    *value = 0;
    *known = 0;
    if (literal(t, "null"))
        return 1;
    int negative = literal(t, "-");
    if (t->at == t->end || *t->at < '0' || *t->at > '9' || (*t->at == '0' && t->at + 1 < t->end && t->at[1] >= '0'
                                                           && t->at[1] <= '9'))
        return 0;
    uint64_t magnitude = 0, limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    while (t->at < t->end && *t->at >= '0' && *t->at <= '9') {
        uint64_t digit = (uint64_t)(*t->at++ - '0');
        if (magnitude > (limit - digit) / 10)
            return 0;
        magnitude = magnitude * 10 + digit;
    }
    if (t->at < t->end && (*t->at == '.' || *t->at == 'e' || *t->at == 'E'))
        return 0;
    *value = negative ? (int64_t)(0 - magnitude) : (int64_t)magnitude;
    *known = 1;
    return 1;
}

static void skip_whitespace(Text *t) {
    while (t->at < t->end && (*t->at == ' ' || *t->at == '\t' || *t->at == '\n' || *t->at == '\r'))
        t->at++;
}

/* One item as `metadata dump` writes it: {"path": "/...", "data_b64": "..." or null, "ephemeral": true or false,
 * "mzxid": int, "version": int, "ctime": int or null}, packed; 0 for anything else, -1 with an error set. */
static int pack_line(Text *t, Growing *records, Growing *lengths, PyObject *paths) {
    const uint8_t *path, *encoded = NULL;
    Py_ssize_t path_length, text_length = 0;
    int64_t mzxid, version, ctime;
    int has_mzxid, has_version, has_ctime, ephemeral;
    if (!literal(t, "{\"path\": ") || !plain_string(t, &path, &path_length) || path_length < 1 || *path != '/'
        || !literal(t, ", \"data_b64\": "))
        return 0;
    if (!literal(t, "null") && !plain_string(t, &encoded, &text_length))
        return 0;
    if (!literal(t, ", \"ephemeral\": "))
        return 0;
    if (literal(t, "true"))
        ephemeral = 1;
    else if (literal(t, "false"))
        ephemeral = 0;
    else
        return 0;
    if (!literal(t, ", \"mzxid\": ") || !int64_or_null(t, &mzxid, &has_mzxid) || !literal(t, ", \"version\": ")
        || !int64_or_null(t, &version, &has_version) || !literal(t, ", \"ctime\": ")
        || !int64_or_null(t, &ctime, &has_ctime) || !literal(t, "}"))
        return 0;
    int packed = put_record(records, lengths, path, path_length, encoded, text_length, ephemeral, mzxid, version,
                            has_ctime, ctime);
    if (packed != 1)
        return packed;
    PyObject *path_text = PyUnicode_New(path_length, 127);
    if (path_text == NULL)
        return -1;
    memcpy(PyUnicode_1BYTE_DATA(path_text), path, path_length);
    int appended = PyList_Append(paths, path_text);
    Py_DECREF(path_text);
    return appended < 0 ? -1 : 1;
}

/* pack_dump_lines(text) -> (records, paths, lengths) or None: the items of a JSON list's text (items and commas, no
 * brackets: a run of whole lines of a dump) packed as pack_znodes packs them, where every item is in the form
 * `metadata dump` writes (pack_line) and the text is ASCII; None for any other text (json and the Python reference
 * read it). */
static PyObject *pack_dump_lines(PyObject *self, PyObject *args) {
    PyObject *text;
    if (!PyArg_ParseTuple(args, "U", &text))
        return NULL;
    if (!PyUnicode_IS_ASCII(text))
        Py_RETURN_NONE;
    Text t = {PyUnicode_1BYTE_DATA(text), PyUnicode_1BYTE_DATA(text) + PyUnicode_GET_LENGTH(text)};
    Growing records = {NULL, 0, 0}, lengths = {NULL, 0, 0};
    PyObject *paths = PyList_New(0), *result = NULL;
    if (paths == NULL)
        return NULL;
    int packed = 1;
    do {
        skip_whitespace(&t);
        packed = pack_line(&t, &records, &lengths, paths);
        skip_whitespace(&t);
    } while (packed == 1 && literal(&t, ","));
    if (packed < 0)
        goto done;
    if (packed == 0 || t.at != t.end) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    result = Py_BuildValue("(y#Oy#)", records.bytes ? (const char *)records.bytes : "", (Py_ssize_t)records.used, paths,
                           lengths.bytes ? (const char *)lengths.bytes : "", (Py_ssize_t)lengths.used);
done:
    PyMem_Free(records.bytes);
    PyMem_Free(lengths.bytes);
    Py_DECREF(paths);
    return result;
}

static PyMethodDef methods[] = {
    {"pack_dump_lines", pack_dump_lines, METH_VARARGS,
     "pack_dump_lines(text) -> (records, paths, lengths) or None: a run of a dump's whole lines packed as pack_znodes "
     "packs their items, where each is in the form `metadata dump` writes; None for any other text"},
    {"child_runs", child_runs, METH_VARARGS,
     "child_runs(paths, first) -> [(parent, numbers as native uint32 bytes)]: records first, first + 1, ... with a "
     "name, a run of neighbours with one parent at a time"},
    {"find_records", find_records, METH_VARARGS,
     "find_records(keys, numbers, wanted) -> per wanted key: the record number with that key (keys ascending, "
     "numbers alongside), a tuple of several, or None"},
    {"parse_records", parse_records, METH_VARARGS,
     "parse_records(span, offsets, fields) -> [(path, data or None, ephemeral, mzxid, version, ctime or None)] "
     "(fields 0), [path] (1) or [(path, data or None)] (2): the dump store's scratch records at each offset of span"},
    {"pack_znodes", pack_znodes, METH_VARARGS,
     "pack_znodes(items, start) -> (records, paths, lengths, taken): dump items from start packed as the dump "
     "store's records, up to the first not of the common form"},
    {NULL},
};

int dump_records_add(PyObject *m) {
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
        return -1;
    return PyModule_AddFunctions(m, methods);
}
