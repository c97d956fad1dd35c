/*
 * `.idx` files: listed (for `export`), or opened by name where the bookie looks for them (a pass's index step); a
 * window of small ones opened ahead, the cached ones read at once, the rest later.
 */

#include "native.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* What only Linux has, guarded so that this part builds on any POSIX system with GCC or
 * Clang. The `.idx` listing reads directories with glibc's getdents64 (since 2.30); without it list_index_files is not
 * built and indexfile.py lists them. Without O_NOATIME files open plainly; without posix_fadvise nothing is advised.
 * Without a thread's count of blocks read the process's is taken, and not trusted (READS_COUNTED: /proc/self/io). */
#if defined(__linux__) && defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 30)
#define HAVE_GETDENTS64 1
#endif
#ifndef O_NOATIME
#define O_NOATIME 0
#endif
#ifndef RUSAGE_THREAD
#define RUSAGE_THREAD RUSAGE_SELF
#endif
#ifndef POSIX_FADV_WILLNEED
#define POSIX_FADV_WILLNEED 0
#define POSIX_FADV_DONTNEED 0
static int posix_fadvise(int fd, off_t offset, off_t length, int advice) { return 0; }
#endif

/*
 * scanner/storage/indexfile.py is the reference: its index_files lists the files as list_index_files does, and its
 * IndexFile reads one through a page-cache guest (scanner/storage/pagecache.py). Here only files whose header and
 * slots come in one read are read (most ledgers'); anything else (a larger file, a header that does not check, a
 * failed call) is left to that reader, by path, so every error is raised and worded where it always was.
 *
 * The guest's rule with fewer calls for a file read whole: when it is opened, its first page of slots is read without
 * waiting for the disk, and the file's size taken from that read where it can be (else from a stat, and the rest of
 * a larger file read the same way). If that gets all of it (the bookie had it cached), it is sifted and closed at
 * once: nothing of ours to drop, no count of reads from disk taken: open, read, close. Otherwise the disk is asked
 * for its first read ahead, and it is read when its window's turn comes; a window of such files is asked of the disk
 * at once. A file the non-blocking read found partly missing is ours, all of it, as the guest counts a range partly
 * missing (that read may itself have set the kernel's read-ahead going), and dropped at close; where such reads are
 * not to be had, the thread's count of blocks read says what the calls on it brought in. The kernel's read-ahead is
 * left on for these reads: a read of a whole file brings in nothing past its end. (A file over IDX_FIRST_READ, a
 * ledger of over 8,000 entries here, has its first page of slots read all the same before its size is known: a
 * read-ahead mark the bookie's reads left there would set the kernel reading ahead in it, uncounted.)
 */

#define IDX_HEADER 1024
#define IDX_SLOT 8
#define IDX_FIRST_READ (IDX_HEADER + 64 * 1024) /* indexfile.py's HEADER_SIZE + _READ_CHUNK */
#define IDX_ONE_PAGE_FILE (IDX_HEADER + 8192)   /* the header and one index page (1024 slots): most ledgers' file */
#define IDX_FETCHED 1                           /* asking the disk for the first read ahead brought pages in: ours */
#define IDX_LEAVE_TO_PYTHON (-1)
#define IDX_PENDING (-2) /* opened ahead, not cached: read when its window is */
#define IDX_ABSENT (-3)  /* no such file (or a file on its path), or a directory of its name: the index lacks it */
#define IDX_MAX_DIGITS 16

static int64_t PAGE_BYTES = 4096; /* the system's, set at import */
static int READS_COUNTED = 0;     /* the kernel keeps each task's count of reads from disk (set at import) */

/* This thread's reads from disk so far, in blocks. */
static long blocks_read(void) {
    struct rusage usage;
    return getrusage(RUSAGE_THREAD, &usage) == 0 ? usage.ru_inblock : -1;
}

/* Whether this thread read anything from disk since it counted `before` (always, when reads are not counted). */
static int brought_in(long before) {
    return !READS_COUNTED || before < 0 || blocks_read() != before;
}

#ifdef HAVE_GETDENTS64
/* The entries of an open directory, read a buffer at a time. */
typedef struct {
    int fd;
    long length, at;
    _Alignas(struct dirent64) char buffer[32 * 1024];
} DirReader;

/* The next entry's name (not "." or "..") and d_type; NULL at the end (errno 0) or on an error (errno set). */
static const char *next_entry(DirReader *reader, unsigned char *type) {
    const long name_at = (long)offsetof(struct dirent64, d_name);
    for (;;) {
        if (reader->at >= reader->length) {
            ssize_t n;
            do
                n = getdents64(reader->fd, reader->buffer, sizeof reader->buffer);
            while (n < 0 && errno == EINTR);
            if (n <= 0) {
                if (n == 0)
                    errno = 0;
                return NULL;
            }
            reader->length = n, reader->at = 0;
        }
        long left = reader->length - reader->at;
        struct dirent64 *entry = (struct dirent64 *)(reader->buffer + reader->at);
        if (left <= name_at || entry->d_reclen <= name_at || entry->d_reclen > left ||
            entry->d_reclen % _Alignof(struct dirent64) != 0 ||
            memchr(entry->d_name, 0, (size_t)(entry->d_reclen - name_at)) == NULL) {
            errno = EIO; /* not a record as the kernel lays them out */
            return NULL;
        }
        reader->at += entry->d_reclen;
        if (strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0) {
            *type = entry->d_type;
            return entry->d_name;
        }
    }
}

/* Whether `name` in directory `fd` is of `kind` (S_IFDIR, S_IFREG), not following a symlink, as os.DirEntry's
 * is_dir / is_file(follow_symlinks=False) answer: from d_type, or from lstat where the filesystem does not give it. */
static int entry_is(int fd, const char *name, unsigned char type, mode_t kind) {
    if (type != DT_UNKNOWN)
        return type == (kind == S_IFDIR ? DT_DIR : DT_REG);
    struct stat st;
    return fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && (st.st_mode & S_IFMT) == kind;
}

/* The ledger id of a name indexfile._INDEX_NAME matches (1-16 lowercase hex digits, then `.idx` or `.rloc`), with
 * its digit count and whether it is a `.rloc`; -1 for any other name and for an id past 2**63 - 1. */
static int64_t index_file_ledger(const char *name, size_t *digits, int *rloc) {
    uint64_t id = 0;
    size_t n = 0;
    for (; n <= IDX_MAX_DIGITS && ((name[n] >= '0' && name[n] <= '9') || (name[n] >= 'a' && name[n] <= 'f')); n++)
        id = id << 4 | (uint64_t)(name[n] <= '9' ? name[n] - '0' : name[n] - 'a' + 10);
    if (n == 0 || n > IDX_MAX_DIGITS || name[n] != '.')
        return -1;
    if (strcmp(name + n + 1, "idx") == 0)
        *rloc = 0;
    else if (strcmp(name + n + 1, "rloc") == 0)
        *rloc = 1;
    else
        return -1;
    *digits = n;
    return id > (uint64_t)INT64_MAX ? -1 : (int64_t)id;
}

/* Whether a regular file (following a symlink, as os.path.isfile) `<digits>.idx` sits in directory `fd`. */
static int idx_beside(int fd, const char *name, size_t digits) {
    char idx[IDX_MAX_DIGITS + sizeof ".idx"];
    memcpy(idx, name, digits);
    memcpy(idx + digits, ".idx", sizeof ".idx");
    struct stat st;
    return fstatat(fd, idx, &st, 0) == 0 && S_ISREG(st.st_mode);
}

/* OSError for `path` (bytes, `length` of them) from `error`, its name decoded as os.scandir's would be. */
static void raise_for_path(int error, const char *path, size_t length) {
    PyObject *name = PyUnicode_DecodeFSDefaultAndSize(path, (Py_ssize_t)length);
    if (name != NULL) {
        errno = error ? error : EIO;
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, name);
        Py_DECREF(name);
    }
}

/* What a listing found, gathered without the GIL (a hung disk must not stop the agent's other threads): the ledger ids
 * and the paths (each ending in NUL, one after the other in `names`), or where it failed. Raw memory only. */
typedef struct {
    int64_t *ids;
    size_t *name_at;
    size_t count, capacity;
    char *names;
    size_t names_length, names_capacity;
    int error;           /* errno of a failed listing: `failed` is the path it names (none: out of memory) */
    char *failed;        /* a path of up to `failed_length` bytes */
    size_t failed_length;
} Listing;

static int listing_add(Listing *found, int64_t ledger_id, const char *path, size_t length) {
    if (found->count == found->capacity) {
        size_t capacity = found->capacity ? 2 * found->capacity : 1024;
        int64_t *ids = PyMem_RawRealloc(found->ids, capacity * sizeof(int64_t));
        if (ids == NULL)
            return -1;
        found->ids = ids;
        size_t *name_at = PyMem_RawRealloc(found->name_at, capacity * sizeof(size_t));
        if (name_at == NULL)
            return -1;
        found->name_at = name_at, found->capacity = capacity;
    }
    if (found->names_length + length + 1 > found->names_capacity) {
        size_t capacity = 2 * found->names_capacity + length + 1;
        char *names = PyMem_RawRealloc(found->names, capacity);
        if (names == NULL)
            return -1;
        found->names = names, found->names_capacity = capacity;
    }
    memcpy(found->names + found->names_length, path, length);
    found->names[found->names_length + length] = '\0';
    found->ids[found->count] = ledger_id;
    found->name_at[found->count++] = found->names_length;
    found->names_length += length + 1;
    return 0;
}

/* The listing's failure: `error` on `path`'s first `length` bytes (kept in `found->failed`, which has the room). */
static void listing_fails(Listing *found, int error, const char *path, size_t length) {
    found->error = error ? error : EIO;
    memcpy(found->failed, path, length);
    found->failed_length = length;
}

/* The listing itself, in `path` (holding the directory as given, `given` bytes and a NUL, and room for a `/` and two
 * names more), with only system calls and raw memory: it may run without the GIL. */
static void list_into(Listing *found, char *path, size_t given, DirReader *outer, DirReader *inner) {
    outer->fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), outer->length = outer->at = 0;
    size_t prefix = given;
    if (prefix == 0 || path[prefix - 1] != '/') /* os.path.join's way, as os.scandir's entries' paths are made */
        path[prefix++] = '/';
    if (outer->fd < 0) {
        listing_fails(found, errno, path, found->failed_length);
        return;
    }
    const char *sub;
    unsigned char type;
    while (found->error == 0 && (sub = next_entry(outer, &type)) != NULL) {
        if (!entry_is(outer->fd, sub, type, S_IFDIR))
            continue;
        size_t sub_length = strlen(sub), name_at = prefix + sub_length + 1;
        memcpy(path + prefix, sub, sub_length);
        path[name_at - 1] = '/';
        inner->fd = openat(outer->fd, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC), inner->length = inner->at = 0;
        if (inner->fd < 0) {
            listing_fails(found, errno, path, name_at - 1);
            break;
        }
        const char *name;
        while ((name = next_entry(inner, &type)) != NULL) {
            size_t digits;
            int rloc;
            int64_t ledger_id = index_file_ledger(name, &digits, &rloc);
            if (ledger_id < 0 || !entry_is(inner->fd, name, type, S_IFREG) ||
                (rloc && idx_beside(inner->fd, name, digits)))
                continue;
            size_t length = name_at + strlen(name);
            memcpy(path + name_at, name, length - name_at);
            if (listing_add(found, ledger_id, path, length) < 0) {
                found->error = ENOMEM, found->failed_length = 0; /* no path: out of memory */
                break;
            }
        }
        if (found->error == 0 && errno != 0)
            listing_fails(found, errno, path, name_at - 1);
        close(inner->fd);
    }
    if (found->error == 0 && errno != 0)
        listing_fails(found, errno, path, found->failed_length);
    close(outer->fd);
}

/* list_index_files(directory): [(ledger id, path)] of the `.idx` / `.rloc` files in the subdirectories of
 * `directory` (one first-level directory of an index dir's current/), in directory order, as indexfile.index_files
 * lists them there: a `.rloc` only where no `.idx` sits beside it. A directory that cannot be listed raises OSError.
 * The directories are read with the GIL released: a disk that hangs holds this thread only. */
static PyObject *native_list_index_files(PyObject *m, PyObject *args) {
    PyObject *encoded;
    if (!PyArg_ParseTuple(args, "O&", PyUnicode_FSConverter, &encoded))
        return NULL;
    const char *directory = PyBytes_AS_STRING(encoded);
    size_t given = (size_t)PyBytes_GET_SIZE(encoded);
    PyObject *result = NULL;
    Listing found = {0};
    DirReader *outer = PyMem_RawMalloc(sizeof(DirReader)), *inner = PyMem_RawMalloc(sizeof(DirReader));
    size_t room = given + 2 * (NAME_MAX + 1) + 2; /* directory/subdirectory/name */
    char *path = PyMem_RawMalloc(room);
    found.failed = PyMem_RawMalloc(room);
    if (outer == NULL || inner == NULL || path == NULL || found.failed == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(path, directory, given + 1);
    found.failed_length = given; /* a failure at the directory itself names it as given */
    Py_BEGIN_ALLOW_THREADS
    list_into(&found, path, given, outer, inner);
    Py_END_ALLOW_THREADS
    if (found.error == ENOMEM && found.failed_length == 0) {
        PyErr_NoMemory();
        goto done;
    }
    if (found.error != 0) {
        raise_for_path(found.error, found.failed, found.failed_length);
        goto done;
    }
    result = PyList_New((Py_ssize_t)found.count);
    for (size_t i = 0; result != NULL && i < found.count; i++) {
        const char *name = found.names + found.name_at[i];
        PyObject *item = Py_BuildValue("(LN)", (long long)found.ids[i],
                                       PyUnicode_DecodeFSDefaultAndSize(name, (Py_ssize_t)strlen(name)));
        if (item == NULL)
            Py_CLEAR(result);
        else
            PyList_SET_ITEM(result, (Py_ssize_t)i, item);
    }
done:
    PyMem_RawFree(outer);
    PyMem_RawFree(inner);
    PyMem_RawFree(path);
    PyMem_RawFree(found.ids);
    PyMem_RawFree(found.name_at);
    PyMem_RawFree(found.names);
    PyMem_RawFree(found.failed);
    Py_DECREF(encoded);
    return result;
}
#endif /* HAVE_GETDENTS64 */

/* `path`, relative to the directory open as `directory` (AT_FDCWD: as given), opened to read. */
static int open_read_only(int directory, const char *path) {
    int fd = openat(directory, path, O_RDONLY | O_NOATIME | O_CLOEXEC); /* reading must not touch its access time */
    if (fd < 0 && (errno == EPERM || errno == EACCES))
        fd = openat(directory, path, O_RDONLY | O_CLOEXEC);
    return fd;
}

/* Bytes of [offset, offset + length) read without waiting for the disk (what is cached); -1 if such reads fail. */
static ssize_t read_cached(int fd, uint8_t *buffer, size_t length, off_t offset) {
#ifdef RWF_NOWAIT
    struct iovec vector = {buffer, length};
    ssize_t n;
    do
        n = preadv2(fd, &vector, 1, offset, RWF_NOWAIT);
    while (n < 0 && errno == EINTR);
    if (n >= 0)
        return n;
    return errno == EAGAIN ? 0 : -1;
#else
    return -1;
#endif
}

/* Whether the first `available` bytes are a header indexfile.parse_index_header accepts. */
static int index_header_holds(const uint8_t *head, int64_t available) {
    if (available < 12 || memcmp(head, "BKLE", 4) != 0)
        return 0;
    int32_t version = (int32_t)be32(head + 4), key_length = (int32_t)be32(head + 8);
    if (version != 0 && version != 1)
        return 0;
    int64_t key_end = 12 + (int64_t)key_length, fields_end = key_end + (version >= 1 ? 8 : 4);
    if (key_length < 0 || fields_end > IDX_HEADER || fields_end > available)
        return 0;
    if (version >= 1) {
        int32_t lac_length = (int32_t)be32(head + key_end + 4);
        int64_t lac_end = fields_end + lac_length;
        if (lac_length != 0 && (lac_length < 16 || lac_end > IDX_HEADER || lac_end > available))
            return 0;
    }
    return 1;
}

/* Slots sifted: entry ids and locations, in columns of `capacity` the caller gave (`fixed`: they do not grow; the
 * slots of files that did not fit are counted in `wanted`), or grown here. */
typedef struct {
    uint64_t *ids, *locations;
    size_t count, capacity, wanted;
    int fixed;
} Slots;

/* Room in `out` for `more` slots; -1 when there is not the memory (or the room, in fixed columns). */
static int reserve_slots(Slots *out, size_t more) {
    if (out->count + more <= out->capacity)
        return 0;
    if (out->fixed) {
        out->wanted += more;
        return -1;
    }
    size_t capacity = out->capacity * 2 > out->count + more ? out->capacity * 2 : out->count + more;
    uint64_t *ids = PyMem_RawRealloc(out->ids, capacity * sizeof(uint64_t));
    if (ids == NULL)
        return -1;
    out->ids = ids;
    uint64_t *locations = PyMem_RawRealloc(out->locations, capacity * sizeof(uint64_t));
    if (locations == NULL)
        return -1;
    out->locations = locations;
    out->capacity = capacity;
    return 0;
}

/* The first `got` bytes of a file of `size` bytes checked and their non-empty slots added to `out`: how many, or
 * IDX_LEAVE_TO_PYTHON (none added: a header that does not check, or no memory for the slots). */
static Py_ssize_t sift_index(const uint8_t *buffer, int64_t got, int64_t size, Slots *out) {
    if (!index_header_holds(buffer, got < IDX_HEADER ? got : IDX_HEADER))
        return IDX_LEAVE_TO_PYTHON;
    int64_t slot_bytes = size > IDX_HEADER ? (size - IDX_HEADER) / IDX_SLOT * IDX_SLOT : 0;
    int64_t read_slots = got > IDX_HEADER ? got - IDX_HEADER : 0;
    int64_t slots = (slot_bytes < read_slots ? slot_bytes : read_slots) / IDX_SLOT;
    if (reserve_slots(out, (size_t)slots) < 0)
        return IDX_LEAVE_TO_PYTHON; /* out of memory: the Python reader tries, and raises if it must */
    size_t before = out->count;
    const uint8_t *slot = buffer + IDX_HEADER;
    for (int64_t block = 0; block < slots; block += 4) { /* most of a small ledger's page is empty: 4 slots a test */
        int64_t end = block + 4 < slots ? block + 4 : slots;
        uint64_t words[4];
        if (end - block == 4 && (memcpy(words, slot + block * IDX_SLOT, sizeof words),
                                 (words[0] | words[1] | words[2] | words[3]) == 0))
            continue;
        for (int64_t i = block; i < end; i++) {
            uint64_t raw = be64(slot + i * IDX_SLOT);
            if (raw) {
                out->ids[out->count] = (uint64_t)i;
                out->locations[out->count++] = raw;
            }
        }
    }
    return (Py_ssize_t)(out->count - before);
}

/* How large a file just read without waiting is, from what the read got: a read of a regular file stops short only at
 * its end or, not waiting, at the first page not cached (a page boundary), so a read that stopped short off a page
 * boundary met the end: the file is `got` bytes, no stat needed. An index file is its header and whole pages of slots
 * (1024 + n * 8192 bytes, never a whole number of 4 KiB pages): a cached one is sized by its read alone. -1: unknown. */
static int64_t size_from_short_read(ssize_t got, size_t asked) {
    return got >= 0 && (size_t)got < asked && got % PAGE_BYTES != 0 ? (int64_t)got : -1;
}

/* A file just opened: read, sifted into `out` and closed when all of it is cached and it is small enough (its slot
 * count), closed when it is too large for one read (IDX_LEAVE_TO_PYTHON), else its first read asked of the disk
 * ahead and left open (IDX_PENDING, with its flags and size). A cached file of one page of slots (most ledgers') costs one
 * read: its size comes from the read (size_from_short_read), and a read that waited for nothing brought nothing in
 * (no count of blocks read is taken). */
static Py_ssize_t read_at_open(int fd, uint8_t *buffer, Slots *out, int *flags, int64_t *pending_size) {
    *flags = 0;
    ssize_t cached = read_cached(fd, buffer, IDX_ONE_PAGE_FILE + 1, 0);
    int64_t size = size_from_short_read(cached, IDX_ONE_PAGE_FILE + 1);
    if (size < 0) { /* larger than one page of slots, not all cached, or not read: its size from a stat */
        struct stat st;
        int stated = fstat(fd, &st) == 0;
        if (!stated || S_ISDIR(st.st_mode) || st.st_size > IDX_FIRST_READ) {
            close(fd);
            return stated && S_ISDIR(st.st_mode) ? IDX_ABSENT : IDX_LEAVE_TO_PYTHON; /* (a directory is no index) */
        }
        size = st.st_size;
        if (cached > IDX_ONE_PAGE_FILE && size > cached) { /* the rest of a larger file, as far as it is cached */
            ssize_t more = read_cached(fd, buffer + cached, (size_t)(size - cached), cached);
            cached = more < 0 ? more : cached + more;
        }
    }
    if (cached >= size) { /* the bookie has all of it cached (or it is empty): nothing of ours to drop */
        Py_ssize_t count = sift_index(buffer, cached, size, out);
        close(fd);
        return count;
    }
    /* Not all cached: a read that came up short found a page missing (and may have set the kernel's read-ahead
     * going for it), so the file is ours, all of it, as the guest counts a range partly missing; only where such
     * reads are not to be had does the count of blocks read say whether the advice brought anything in. */
    long before = cached < 0 ? blocks_read() : -1;
    if (posix_fadvise(fd, 0, IDX_FIRST_READ, POSIX_FADV_WILLNEED) != 0 || cached >= 0 || brought_in(before))
        *flags |= IDX_FETCHED; /* (advice refused: the read fetches it, counted ours as nothing says otherwise) */
    *pending_size = size;
    return IDX_PENDING;
}

/* A file left open by read_at_open read (`size` bytes, as it was then: no second stat), checked and sifted into
 * `out`, then its pages that were not cached dropped and it closed. Returns how many slots it added, or IDX_LEAVE_TO_PYTHON (it added none). */
static Py_ssize_t read_pending(int fd, int flags, int64_t size, uint8_t *buffer, Slots *out) {
    Py_ssize_t result = IDX_LEAVE_TO_PYTHON;
    int64_t ours_end = flags & IDX_FETCHED ? IDX_FIRST_READ : 0, got = 0;
    int64_t want = size > IDX_HEADER ? size : IDX_HEADER;
    long before = flags & IDX_FETCHED ? -1 : blocks_read(); /* (already all ours: nothing to count) */
    while (got < want) {
        ssize_t n = pread(fd, buffer + got, (size_t)(want - got), got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            goto done;
        if (n == 0)
            break;
        got += n;
    }
    if (!(flags & IDX_FETCHED) && brought_in(before)) { /* (pages dropped since they were asked for) every page the
                                                          * read touched is ours */
        int64_t end = ((got > 0 ? got : 1) + PAGE_BYTES - 1) / PAGE_BYTES * PAGE_BYTES;
        ours_end = end > ours_end ? end : ours_end;
    }
    result = sift_index(buffer, got, size, out);
done:
    if (ours_end > 0)
        posix_fadvise(fd, 0, ours_end, POSIX_FADV_DONTNEED);
    close(fd);
    return result;
}

/* An opened file not read: closed, what was fetched for it dropped. */
static void release_pending(int fd, int flags) {
    if (flags & IDX_FETCHED)
        posix_fadvise(fd, 0, IDX_FIRST_READ, POSIX_FADV_DONTNEED);
    close(fd);
}

/* A window of files as open_index_files left it: per file, its slot count (its slots in `slots` from starts[i]),
 * IDX_LEAVE_TO_PYTHON, or IDX_PENDING (its fd and flags kept). `slots`: the caller's two columns (held in `views`
 * while `viewing`). Read (read_index_files) or closed once. */
typedef struct {
    PyObject_HEAD
    Py_ssize_t n;
    Py_ssize_t *counts, *starts;
    int *fds, *flags;
    int64_t *sizes; /* a pending file's size when it was opened */
    Slots slots;
    Py_buffer views[2];
    int viewing;
} IndexWindow;

/* Every pending file of the window closed unread, the caller's columns let go; the window then holds no files. */
static void IndexWindow_release(IndexWindow *self) {
    for (Py_ssize_t i = 0; i < self->n; i++)
        if (self->counts[i] == IDX_PENDING)
            release_pending(self->fds[i], self->flags[i]);
    self->n = 0;
    if (self->viewing) {
        PyBuffer_Release(&self->views[0]);
        PyBuffer_Release(&self->views[1]);
        self->viewing = 0;
    }
}

static void IndexWindow_dealloc(IndexWindow *self) {
    IndexWindow_release(self);
    PyMem_Free(self->counts);
    PyMem_Free(self->starts);
    PyMem_Free(self->fds);
    PyMem_Free(self->flags);
    PyMem_Free(self->sizes);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject IndexWindowType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "scanner.native._native.IndexWindow",
    .tp_basicsize = sizeof(IndexWindow),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "`.idx` files open_index_files opened: read_index_files reads them, close_index_files closes them",
    .tp_dealloc = (destructor)IndexWindow_dealloc,
};

/* A window of `n` files whose slots go to the caller's two uint64 columns (held until it is read or closed), its
 * files not opened yet; NULL with the error set. */
static IndexWindow *new_window(Py_ssize_t n, PyObject *const *columns) {
    IndexWindow *window = PyObject_New(IndexWindow, &IndexWindowType);
    if (window == NULL)
        return NULL;
    window->n = 0, window->viewing = 0;
    window->counts = PyMem_Calloc((size_t)n + 1, sizeof(Py_ssize_t));
    window->starts = PyMem_Calloc((size_t)n + 1, sizeof(Py_ssize_t));
    window->fds = PyMem_Calloc((size_t)n + 1, sizeof(int));
    window->flags = PyMem_Calloc((size_t)n + 1, sizeof(int));
    window->sizes = PyMem_Calloc((size_t)n + 1, sizeof(int64_t));
    if (window->counts == NULL || window->starts == NULL || window->fds == NULL || window->flags == NULL ||
        window->sizes == NULL) {
        Py_DECREF(window);
        return (IndexWindow *)PyErr_NoMemory();
    }
    if (uint64_columns(columns, window->views, 2, 1) < 0) {
        Py_DECREF(window);
        return NULL;
    }
    window->viewing = 1;
    Py_ssize_t length = window->views[0].len < window->views[1].len ? window->views[0].len : window->views[1].len;
    window->slots = (Slots){window->views[0].buf, window->views[1].buf, 0, (size_t)length / 8, 0, 1};
    return window;
}

/* `value` in lowercase hex without leading zeros (Java's toHexString) at `out`; returns the end. */
static char *hex_digits(char *out, uint64_t value) {
    char digits[IDX_MAX_DIGITS];
    int n = 0;
    do
        digits[n++] = "0123456789abcdef"[value & 0xF];
    while ((value >>= 4) != 0);
    while (n > 0)
        *out++ = digits[--n];
    return out;
}

/* Where BookKeeper keeps a ledger's index file under an index dir's current/ (IndexPersistenceMgr.getLedgerName):
 * <hex of bits 8-15>/<hex of bits 0-7>/<hex id>.idx (or .rloc), into `name` (room for 2 + 1 + 2 + 1 + 16 + 6). */
static void ledger_index_name(char *name, uint64_t ledger_id, int rloc) {
    char *at = hex_digits(name, (ledger_id >> 8) & 0xFF);
    *at++ = '/';
    at = hex_digits(at, ledger_id & 0xFF);
    *at++ = '/';
    at = hex_digits(at, ledger_id);
    memcpy(at, rloc ? ".rloc" : ".idx", rloc ? sizeof ".rloc" : sizeof ".idx");
}

/* A ledger's index file opened where the bookie looks for it (IndexPersistenceMgr.findIndexFile: the first of the
 * index dirs open as `directories` that has its `.idx`; here, else a `.rloc` left by an interrupted move, as
 * indexfile.find_index_file): its fd, or -1 with errno (ENOENT: in none of them). */
static int open_ledger_index(const int *directories, Py_ssize_t n_directories, uint64_t ledger_id) {
    char name[2 * (2 + 1) + IDX_MAX_DIGITS + sizeof ".rloc"];
    for (int rloc = 0; rloc < 2; rloc++) {
        ledger_index_name(name, ledger_id, rloc);
        for (Py_ssize_t d = 0; d < n_directories; d++) {
            int fd = open_read_only(directories[d], name);
            if (fd >= 0 || (errno != ENOENT && errno != ENOTDIR))
                return fd;
        }
    }
    errno = ENOENT;
    return -1;
}

/* The window's files opened read-only (the cached ones read at once, the others' first bytes asked of the disk, one
 * that would not open or is too large left to the Python reader, one not there IDX_ABSENT), without the GIL: by the
 * paths in `encoded` (a list of bytes), or else the index files of `ledger_ids` (open_ledger_index). */
static void open_window(IndexWindow *window, Py_ssize_t n, uint8_t *buffer, PyObject *encoded,
                        const int *directories, Py_ssize_t n_directories, const uint64_t *ledger_ids) {
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int fd = encoded != NULL ? open_read_only(AT_FDCWD, PyBytes_AS_STRING(PyList_GET_ITEM(encoded, i)))
                                 : open_ledger_index(directories, n_directories, ledger_ids[i]);
        window->starts[i] = (Py_ssize_t)window->slots.count;
        if (fd < 0)
            window->counts[i] = errno == ENOENT || errno == ENOTDIR ? IDX_ABSENT : IDX_LEAVE_TO_PYTHON;
        else
            window->counts[i] = read_at_open(fd, buffer, &window->slots, &window->flags[i], &window->sizes[i]);
        window->fds[i] = window->counts[i] == IDX_PENDING ? fd : -1;
    }
    window->n = n;
    Py_END_ALLOW_THREADS
}

/* open_index_files(paths, ids, locations): an IndexWindow of the files (open_window), their slots to go to the two
 * uint64 columns given (held until the window is read or closed): a file whose slots no longer fit is left to the
 * Python reader. */
static PyObject *native_open_index_files(PyObject *m, PyObject *args) {
    PyObject *paths, *columns[2];
    if (!PyArg_ParseTuple(args, "OOO", &paths, &columns[0], &columns[1]))
        return NULL;
    PyObject *sequence = PySequence_Fast(paths, "a list of paths");
    if (sequence == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(sequence);
    PyObject *encoded = PyList_New(n);
    for (Py_ssize_t i = 0; encoded != NULL && i < n; i++) {
        PyObject *path = NULL;
        if (!PyUnicode_FSConverter(PySequence_Fast_GET_ITEM(sequence, i), &path))
            Py_CLEAR(encoded);
        else
            PyList_SET_ITEM(encoded, i, path);
    }
    Py_DECREF(sequence);
    if (encoded == NULL)
        return NULL;
    IndexWindow *window = new_window(n, columns);
    uint8_t *buffer = window == NULL ? NULL : PyMem_RawMalloc(IDX_FIRST_READ);
    if (window != NULL && buffer == NULL) {
        Py_CLEAR(window);
        PyErr_NoMemory();
    }
    if (window != NULL)
        open_window(window, n, buffer, encoded, NULL, 0, NULL);
    PyMem_RawFree(buffer);
    Py_DECREF(encoded);
    return (PyObject *)window;
}

/* open_ledger_index_files(directory_fds, ledger_ids, ids, locations): as open_index_files, the files being the index
 * files of `ledger_ids` (a uint64 column, each at most 2**63 - 1) where the bookie looks for them (open_ledger_index)
 * in its index dirs' current/, open as `directory_fds` (a sequence of ints) in the bookie's order. */
static PyObject *native_open_ledger_index_files(PyObject *m, PyObject *args) {
    PyObject *fds, *ledger_ids, *columns[2];
    if (!PyArg_ParseTuple(args, "OOOO", &fds, &ledger_ids, &columns[0], &columns[1]))
        return NULL;
    PyObject *sequence = PySequence_Fast(fds, "a sequence of directory fds");
    if (sequence == NULL)
        return NULL;
    Py_ssize_t n_directories = PySequence_Fast_GET_SIZE(sequence);
    int *directories = PyMem_Calloc((size_t)n_directories + 1, sizeof(int));
    if (directories == NULL) {
        Py_DECREF(sequence);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t d = 0; d < n_directories; d++) {
        long fd = PyLong_AsLong(PySequence_Fast_GET_ITEM(sequence, d));
        if ((fd == -1 && PyErr_Occurred()) || fd < 0 || fd > INT_MAX) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "a directory fd is a non-negative int");
            Py_DECREF(sequence);
            PyMem_Free(directories);
            return NULL;
        }
        directories[d] = (int)fd;
    }
    Py_DECREF(sequence);
    Py_buffer ids;
    if (uint64_column(ledger_ids, &ids) < 0) {
        PyMem_Free(directories);
        return NULL;
    }
    Py_ssize_t n = ids.len / 8;
    IndexWindow *window = NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        if (((const uint64_t *)ids.buf)[i] > (uint64_t)INT64_MAX) {
            PyErr_SetString(PyExc_ValueError, "a ledger id is at most 2**63 - 1");
            goto done;
        }
    window = new_window(n, columns);
    uint8_t *buffer = window == NULL ? NULL : PyMem_RawMalloc(IDX_FIRST_READ);
    if (window != NULL && buffer == NULL) {
        Py_CLEAR(window);
        PyErr_NoMemory();
    }
    if (window != NULL)
        open_window(window, n, buffer, NULL, directories, n_directories, ids.buf);
    PyMem_RawFree(buffer);
done:
    PyBuffer_Release(&ids);
    PyMem_Free(directories);
    return (PyObject *)window;
}

/* read_index_files(window) -> (counts, starts, wanted): every file of the window read (then closed, its columns let
 * go). counts[i]: how many non-empty slots file i has (their entry ids and encoded locations in the window's columns
 * from starts[i]), -1: file i is left to the Python reader, or -3: it is not there. wanted: the slots of files left
 * out for want of room in the columns (longer columns would take them). */
static PyObject *native_read_index_files(PyObject *m, PyObject *args) {
    IndexWindow *window;
    if (!PyArg_ParseTuple(args, "O!", &IndexWindowType, &window))
        return NULL;
    Py_ssize_t n = window->n;
    uint8_t *buffer = PyMem_RawMalloc(IDX_FIRST_READ);
    PyObject *counts = buffer == NULL ? NULL : PyList_New(n), *starts = counts == NULL ? NULL : PyList_New(n);
    if (starts == NULL) {
        Py_XDECREF(counts);
        PyMem_RawFree(buffer);
        IndexWindow_release(window);
        return buffer == NULL ? PyErr_NoMemory() : NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        if (window->counts[i] == IDX_PENDING) {
            window->starts[i] = (Py_ssize_t)window->slots.count;
            window->counts[i] = read_pending(window->fds[i], window->flags[i], window->sizes[i], buffer,
                                             &window->slots);
        }
    window->n = 0; /* every file closed */
    Py_END_ALLOW_THREADS
    size_t wanted = window->slots.wanted;
    IndexWindow_release(window);
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; counts != NULL && i < n; i++) {
        Py_ssize_t count = window->counts[i] < 0 && window->counts[i] != IDX_ABSENT ? IDX_LEAVE_TO_PYTHON
                                                                                   : window->counts[i];
        PyObject *c = PyLong_FromSsize_t(count), *at = PyLong_FromSsize_t(window->starts[i]);
        if (c == NULL || at == NULL) {
            Py_XDECREF(c), Py_XDECREF(at);
            Py_CLEAR(counts);
        } else {
            PyList_SET_ITEM(counts, i, c);
            PyList_SET_ITEM(starts, i, at);
        }
    }
    if (counts != NULL)
        result = Py_BuildValue("(NNn)", counts, starts, (Py_ssize_t)wanted);
    else
        Py_DECREF(starts);
    PyMem_RawFree(buffer);
    return result;
}

/* close_index_files(window): the window's files not read closed; what was fetched for them dropped; its columns let
 * go. */
static PyObject *native_close_index_files(PyObject *m, PyObject *args) {
    IndexWindow *window;
    if (!PyArg_ParseTuple(args, "O!", &IndexWindowType, &window))
        return NULL;
    IndexWindow_release(window);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
#ifdef HAVE_GETDENTS64
    {"list_index_files", native_list_index_files, METH_VARARGS,
     "list_index_files(directory) -> [(ledger id, path)]: the `.idx` / `.rloc` files in directory's subdirectories"},
#endif
    {"open_index_files", native_open_index_files, METH_VARARGS,
     "open_index_files(paths, ids, locations) -> IndexWindow: `.idx` files opened, the cached ones read into the "
     "columns, the others fetched ahead"},
    {"open_ledger_index_files", native_open_ledger_index_files, METH_VARARGS,
     "open_ledger_index_files(directory_fds, ledger_ids, ids, locations) -> IndexWindow: as open_index_files, the "
     "index files of ledger_ids where the bookie looks for them in its index dirs (open as directory_fds)"},
    {"read_index_files", native_read_index_files, METH_VARARGS,
     "read_index_files(window) -> (counts, starts, wanted): small `.idx` files read, checked, sifted, closed"},
    {"close_index_files", native_close_index_files, METH_VARARGS,
     "close_index_files(window): files opened ahead and not read, closed"},
    {NULL},
};

int index_files_add(PyObject *m) {
    long page = sysconf(_SC_PAGESIZE);
    if (page > 0)
        PAGE_BYTES = page;
    READS_COUNTED = access("/proc/self/io", F_OK) == 0;
    if (PyType_Ready(&IndexWindowType) < 0)
        return -1;
    return PyModule_AddFunctions(m, methods);
}
