/*
 * DbLedgerStorage's `locations` DB: a RocksDB cursor's pairs decoded into columns, without a Python object per pair
 * kept. scanner/storage/dbstorage.py's batches are the reference.
 */

#include "native.h"

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

static PyMethodDef methods[] = {
    {"decode_location_pairs", native_decode_location_pairs, METH_VARARGS,
     "decode_location_pairs(pairs, ledgers, entries, locations) -> (count, irregular, zero): a `locations` DB "
     "batch decoded into the columns"},
    {NULL},
};

int locations_db_add(PyObject *m) { return PyModule_AddFunctions(m, methods); }
