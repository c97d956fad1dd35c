/*
 * The scanner's native extension, scanner.native._native: each part (one C file per job, listed in native.h) adds
 * its functions and types. Optional: without it (no C compiler at install) every caller runs its Python form, and
 * scanner/native/switch.py says which runs.
 */

#include "native.h"

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "The scanner's native code: digests, the record walker, the index's files and "
    "locations, the lean metadata decode, the dump store's records and ledger paths.", -1, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (digests_add(m) < 0 || record_walk_add(m) < 0 || location_sort_add(m) < 0 || index_files_add(m) < 0 ||
        locations_db_add(m) < 0 || lean_metadata_add(m) < 0 || dump_records_add(m) < 0 ||
        ledger_paths_add(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
