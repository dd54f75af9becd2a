/* The cgroup batch reader's inner loop, compiled: read the same kind of file of many cgroups through kept-open
 * fds and pick the integers the collector uses, without a Python object per file.
 *
 * At 300 pods x 3 containers the agent reads ~1,440 cgroup files a second; in Python each costs a bytes object, a
 * comprehension step, a regex match and its groups, about as much as the kernel's read itself. Here a file costs
 * its pread. This module only reads and picks: it never decides what a value means. Anything not plainly in the
 * kernel's format (a failed or oversized read, a wanted key twice, a wanted value that is not 1-18 digits and a
 * newline) returns None, and the caller reads that batch the Python way, which counts and names the problem
 * (agent/collectors/cgroups.py). 18 digits stay below 2^60, as the Python batch path's regexes, so int64 holds
 * every value and the sums and scalings the caller makes.
 *
 * Built by setup.py as an optional extension; agent/collectors/files.py works without it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define FILE_BYTES 16384 /* memory.stat is ~1-2 KiB; a larger file goes the Python way */
#define MAX_KEYS 8

/* 1-18 digits then a newline at p; the value in *out and the position after the newline, or NULL. */
static const char *parse_digits(const char *p, const char *end, int64_t *out)
{
    int64_t value = 0;
    int n = 0;
    while (p < end && *p >= '0' && *p <= '9') {
        if (++n > 18)
            return NULL;
        value = value * 10 + (*p - '0');
        p++;
    }
    if (n == 0 || p >= end || *p != '\n')
        return NULL;
    *out = value;
    return p + 1;
}

/* The ints of a list of fds in a new array (PyMem_Free it), or NULL with a Python error set. */
static int *fds_of(PyObject *list, Py_ssize_t n)
{
    int *fds = PyMem_New(int, n > 0 ? n : 1);
    if (fds == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long value = PyLong_AsLong(PyList_GET_ITEM(list, i));
        if (value == -1 && PyErr_Occurred()) {
            PyMem_Free(fds);
            return NULL;
        }
        if (value < 0 || value > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "not a file descriptor");
            PyMem_Free(fds);
            return NULL;
        }
        fds[i] = (int)value;
    }
    return fds;
}

/* pread the whole file (it must fit FILE_BYTES) into buf; its length, or -1 (the caller falls back). */
static Py_ssize_t read_file(int fd, char *buf)
{
    ssize_t got;
    do {
        got = pread(fd, buf, FILE_BYTES, 0);
    } while (got < 0 && errno == EINTR);
    if (got <= 0 || got >= FILE_BYTES)
        return -1;
    return (Py_ssize_t)got;
}

/* One file's `key value` lines into row (k values, -1 where absent); 0, or -1 for a miss. */
static int pick_keyed(const char *buf, Py_ssize_t len, const char *const *key, const Py_ssize_t *key_len,
                      Py_ssize_t k, int64_t *row)
{
    for (Py_ssize_t j = 0; j < k; j++)
        row[j] = -1;
    const char *p = buf, *end = buf + len;
    while (p < end) {
        const char *newline = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = newline ? newline : end;
        const char *space = memchr(p, ' ', (size_t)(line_end - p));
        if (space != NULL) {
            for (Py_ssize_t j = 0; j < k; j++) {
                if (space - p == key_len[j] && memcmp(p, key[j], (size_t)key_len[j]) == 0) {
                    if (row[j] != -1 || parse_digits(space + 1, end, &row[j]) == NULL)
                        return -1;
                    break;
                }
            }
        }
        p = line_end + 1;
    }
    return 0;
}

/* What both readers need: the fds of `list` and a buffer (PyMem_Free both), and the result of n x width int64s
 * (filled without the GIL: nothing else holds it yet). -1 with a Python error set. */
static int prepare(PyObject *list, Py_ssize_t width, int **fds, char **buf, PyObject **out)
{
    Py_ssize_t n = PyList_GET_SIZE(list);
    if (n > PY_SSIZE_T_MAX / 8 / width) {
        PyErr_SetString(PyExc_OverflowError, "too many files");
        return -1;
    }
    *fds = fds_of(list, n);
    if (*fds == NULL)
        return -1;
    *buf = PyMem_Malloc(FILE_BYTES);
    *out = *buf ? PyBytes_FromStringAndSize(NULL, n * width * (Py_ssize_t)sizeof(int64_t)) : NULL;
    if (*out == NULL) {
        if (*buf == NULL)
            PyErr_NoMemory();
        PyMem_Free(*fds);
        PyMem_Free(*buf);
        return -1;
    }
    return 0;
}

/* Frees what `prepare` made; `out`, or None after a miss. */
static PyObject *finish(int *fds, char *buf, PyObject *out, int miss)
{
    PyMem_Free(fds);
    PyMem_Free(buf);
    if (miss) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

PyDoc_STRVAR(read_keyed_doc,
             "read_keyed(fds: list[int], keys: tuple[bytes, ...]) -> bytes | None\n\n"
             "Each file of `fds` read whole from offset 0 (`key value` lines, as cpu.stat and memory.stat); "
             "native-endian int64 rows, one per fd, of the values of `keys` (-1 where a key is absent). None if a "
             "read fails or fills 16 KiB, a wanted key appears twice, or a wanted value is not 1-18 digits and a "
             "newline. Lines of other keys are not looked at beyond their key.");

static PyObject *read_keyed(PyObject *self, PyObject *args)
{
    PyObject *list, *keys;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &list, &PyTuple_Type, &keys))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(list), k = PyTuple_GET_SIZE(keys);
    if (k < 1 || k > MAX_KEYS) {
        PyErr_SetString(PyExc_ValueError, "1 to 8 keys");
        return NULL;
    }
    const char *key[MAX_KEYS];
    Py_ssize_t key_len[MAX_KEYS];
    for (Py_ssize_t j = 0; j < k; j++) {
        PyObject *item = PyTuple_GET_ITEM(keys, j);
        if (!PyBytes_Check(item) || PyBytes_GET_SIZE(item) == 0) {
            PyErr_SetString(PyExc_TypeError, "keys must be non-empty bytes");
            return NULL;
        }
        key[j] = PyBytes_AS_STRING(item);
        key_len[j] = PyBytes_GET_SIZE(item);
    }
    int *fds;
    char *buf;
    PyObject *out;
    if (prepare(list, k, &fds, &buf, &out) < 0)
        return NULL;
    int64_t *rows = (int64_t *)PyBytes_AS_STRING(out);
    int miss = 0;
    Py_BEGIN_ALLOW_THREADS /* the keys are kept alive by the tuple, the rest is ours */
    for (Py_ssize_t i = 0; i < n && !miss; i++) {
        Py_ssize_t len = read_file(fds[i], buf);
        miss = len < 0 || pick_keyed(buf, len, key, key_len, k, rows + i * k) < 0;
    }
    Py_END_ALLOW_THREADS
    return finish(fds, buf, out, miss);
}

PyDoc_STRVAR(read_ints_doc,
             "read_ints(fds: list[int]) -> bytes | None\n\n"
             "Each file of `fds` holding one integer (cpuacct.usage, memory.current): native-endian int64s, one per "
             "fd. None if a read fails or a file is not 1-18 digits and a newline.");

static PyObject *read_ints(PyObject *self, PyObject *args)
{
    PyObject *list;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &list))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(list);
    int *fds;
    char *buf;
    PyObject *out;
    if (prepare(list, 1, &fds, &buf, &out) < 0)
        return NULL;
    int64_t *values = (int64_t *)PyBytes_AS_STRING(out);
    int miss = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !miss; i++) {
        Py_ssize_t len = read_file(fds[i], buf);
        const char *after = len < 0 ? NULL : parse_digits(buf, buf + len, &values[i]);
        miss = after == NULL || after != buf + len;
    }
    Py_END_ALLOW_THREADS
    return finish(fds, buf, out, miss);
}

static PyMethodDef methods[] = {
    {"read_keyed", read_keyed, METH_VARARGS, read_keyed_doc},
    {"read_ints", read_ints, METH_VARARGS, read_ints_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_cgread",
    .m_doc = "Batch reads of cgroup files (see agent/collectors/files.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__cgread(void)
{
    return PyModule_Create(&module);
}
