/*
 * The hierarchical ledger managers' znode paths of ledger ids in their short range (scanner/metadata/ledger_paths.py's
 * _short_path is the reference): a batch of ids named at once, as the dump store looks up every ledger's znode.
 */

#include "native.h"

#define SHORT_RANGE 2147483647LL /* Java's Integer.MAX_VALUE: the ids below it take the short form */

/* short_ledger_paths(root: str, ledger_ids: list) -> list of root + "/dd/dddd/Ldddd" (the id's ten digits), for ids
 * 0 <= id < 2^31 - 1 (ValueError for any other); root must be ASCII (ValueError otherwise: the caller names those). */
static PyObject *short_ledger_paths(PyObject *self, PyObject *args) {
    PyObject *root, *ids;
    if (!PyArg_ParseTuple(args, "UO!", &root, &PyList_Type, &ids))
        return NULL;
    if (!PyUnicode_IS_ASCII(root)) {
        PyErr_SetString(PyExc_ValueError, "the root is not ASCII");
        return NULL;
    }
    const char *prefix = (const char *)PyUnicode_DATA(root);
    Py_ssize_t prefix_length = PyUnicode_GET_LENGTH(root), n = PyList_GET_SIZE(ids);
    PyObject *result = PyList_New(n);
    if (result == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        int overflow;
        long long id = PyLong_AsLongLongAndOverflow(PyList_GET_ITEM(ids, i), &overflow);
        if (id == -1 && PyErr_Occurred()) {
            Py_DECREF(result);
            return NULL;
        }
        if (overflow || id < 0 || id >= SHORT_RANGE) {
            Py_DECREF(result);
            PyErr_SetString(PyExc_ValueError, "a ledger id outside the short range 0..2^31-2");
            return NULL;
        }
        char digits[10];
        for (int d = 9; d >= 0; d--, id /= 10)
            digits[d] = (char)('0' + id % 10);
        PyObject *path = PyUnicode_New(prefix_length + 14, 127);
        if (path == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        char *at = (char *)PyUnicode_DATA(path);
        memcpy(at, prefix, prefix_length);
        at += prefix_length;
        *at++ = '/';
        memcpy(at, digits, 2);
        at += 2;
        *at++ = '/';
        memcpy(at, digits + 2, 4);
        at += 4;
        *at++ = '/';
        *at++ = 'L';
        memcpy(at, digits + 6, 4);
        PyList_SET_ITEM(result, i, path);
    }
    return result;
}

static PyMethodDef methods[] = {
    {"short_ledger_paths", short_ledger_paths, METH_VARARGS,
     "short_ledger_paths(root: str, ledger_ids: list) -> the hierarchical managers' short znode path of each id"},
    {NULL},
};

int ledger_paths_add(PyObject *m) { return PyModule_AddFunctions(m, methods); }
