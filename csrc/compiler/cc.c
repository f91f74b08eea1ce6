/* cc.c - compile generated C to a shared object, cached on disk.
 *
 * The cache key is a 128-bit FNV-1a hash of the source, the compiler
 * command, the flags, the compiler's --version output and the CPU's feature
 * flags (-march=native makes the code CPU-specific).  Files are written under
 * temporary names and renamed into place, so concurrent builders (threads or
 * processes) never see a half-written .so.  The compiler runs through
 * posix_spawnp (no shell); opts->cc and opts->extra_flags are split on
 * blanks, without quoting.
 *
 * Reliability: the cache dir must be private (owned by us, no group/other
 * write) or nothing is loaded from it.  A cached file is only a hit when it
 * is a regular file we own that dlopen() accepts; a bad entry is rebuilt and
 * renamed over (a warning says so).  A fresh build is dlopen()ed before it is
 * renamed into the cache, so a library that cannot load never enters it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cdynamo.h"

extern char **environ;

/* No -z nodelete: kernel libraries are really unloaded when their compiled
 * graph dies.  What must never be unloaded is libgomp (its worker threads
 * outlive any parallel region: unloading it under them crashes), so
 * cc_pin_openmp() pins libgomp.so.1 for the process before the first kernel
 * is loaded.  Under torch that is torch's own libgomp.so.1 (same SONAME). */
/* -nostdlib: a kernel library links only libgomp (added by -fopenmp) and the
 * static libgcc (CC_LIBS, for any helper GCC calls); libc and libm symbols
 * resolve at dlopen() against the process, which always has them loaded (the
 * interpreter links both), and RTLD_NOW in cc_check_so rejects a library with
 * one left undefined.  No C runtime start files: kernels have no constructors.
 * The driver's default libraries and start files cost 7-8 ms of a 75-80 ms
 * compile (x.sum(-1) of 4096x1024 floats, 20 runs each). */
/* -fno-loop-unroll-and-jam: -O3's unroll-and-jam of a row loop around its
 * inner loops is 10.6 of 85 ms of gcc on x.sum(-1) (4096x1024 floats) and 29
 * of 167 ms on gelu(layer_norm(x)), and made no kernel of the bench's 25
 * workloads faster (each compiled both ways in one process, interleaved
 * medians: 0.95-1.04 of the time with it). */
#define CC_FLAGS "-O3 -march=native -fopenmp -shared -fPIC -std=c11 -fwrapv " \
                 "-ffp-contract=off -fno-math-errno -fno-loop-unroll-and-jam -nostdlib " \
                 "-Werror=implicit-function-declaration"
#define CC_LIBS "-lgcc"
#define CC_PART_KERNELS 6        /* kernels per part, at least (a part costs a compiler start) */
#define CC_MAX_PARTS 8           /* compilers run at once for one source */
#define CC_PATH_MAX 4096
#define CC_MAX_ARGV 128
#define CC_CAPTURE_MAX 65536     /* bytes of compiler output kept */
#define CC_ERR_LINES 12          /* stderr lines quoted in an error */
#define CC_MEMO_MAX 16           /* compilers whose version is remembered */

__extension__ typedef unsigned __int128 cc_u128;

static pthread_mutex_t cc_lock = PTHREAD_MUTEX_INITIALIZER;
static char *cc_cpu_flags;                       /* under cc_lock */
static struct {
    char *cc, *version;
} cc_versions[CC_MEMO_MAX];                      /* under cc_lock */
static atomic_ulong cc_counter;

/* The extension's hooks (csrc/module.c), weak: tests/c links cc.c without
 * Python, where they are NULL and notes are dropped. */
extern void *cdy_py_call(const char *name, const char *fmt, ...) __attribute__((weak));
extern int PyGILState_Ensure(void) __attribute__((weak));
extern void PyGILState_Release(int) __attribute__((weak));
extern void Py_DecRef(void *) __attribute__((weak));
extern void PyErr_Clear(void) __attribute__((weak));

/* Tell the user about something that went wrong but was repaired (a warning
 * through cdynamo._support.warn_cache). */
static void cc_note(const char *msg)
{
    if (!cdy_py_call || !PyGILState_Ensure || !PyGILState_Release || !Py_DecRef || !PyErr_Clear)
        return;
    int g = PyGILState_Ensure();
    void *r = cdy_py_call("warn_cache", "s", msg);
    if (r)
        Py_DecRef(r);
    else
        PyErr_Clear();   /* a warning turned into an error must not leak out of compile */
    PyGILState_Release(g);
}

static pthread_once_t cc_pin_once = PTHREAD_ONCE_INIT;
static int (*cc_omp_max_threads)(void);

static void cc_pin_openmp_once(void)
{
    /* never closed; RTLD_NODELETE keeps it even if someone closes it */
    void *h = dlopen("libgomp.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        (void)dlerror();
        return;
    }
    *(void **)&cc_omp_max_threads = dlsym(h, "omp_get_max_threads");
    if (!cc_omp_max_threads)
        (void)dlerror();
}

/* Keep the OpenMP runtime the kernels use loaded for the life of the process. */
static void cc_pin_openmp(void)
{
    pthread_once(&cc_pin_once, cc_pin_openmp_once);
}

/* -nostdlib leaves a kernel's references to libc and libm without a symbol
 * version, and the dynamic linker binds an unversioned reference to a
 * library's oldest version of the name.  On glibc that is memcpy@GLIBC_2.2.5
 * (plain SSE2, no ifunc: vflip of 1x3x224x224 uint8 4.7 against 3.0 us in a
 * C harness) and libm's compatibility wrappers of exp, log, pow, ...
 * (expf@GLIBC_2.2.5 is not the FMA ifunc of expf@@GLIBC_2.27; exp + pow of
 * 200K doubles 1722 against 1587 us).  Linking the process's libc.so.6 and
 * libm.so.6 by path versions the references but costs ld 11-15 ms per
 * compile (a 56 ms one).  Instead a kernel's calls are renamed, by an asm
 * label on the builtin's declaration, to a name with one version that is
 * the very function the current version is: memmove for memcpy (glibc's
 * memcpy is its memmove), the _FloatN aliases for libm (expf32 = expf,
 * expf64 = exp).  A rename is written only where the process's dynamic
 * linker says both names are the same function, so another C library gets
 * the plain names.  Declared before the libm macros of cg_prologue_libm. */
#define CC_RENAMES(X)                                                       \
    X("void *", memcpy, memmove, "(void *, const void *, __SIZE_TYPE__)")   \
    X("double ", exp, expf64, "(double)")                                   \
    X("double ", exp2, exp2f64, "(double)")                                 \
    X("double ", log, logf64, "(double)")                                   \
    X("double ", log2, log2f64, "(double)")                                 \
    X("double ", pow, powf64, "(double, double)")                           \
    X("double ", hypot, hypotf64, "(double, double)")                       \
    X("double ", lgamma, lgammaf64, "(double)")                             \
    X("float ", expf, expf32, "(float)")                                    \
    X("float ", exp2f, exp2f32, "(float)")                                  \
    X("float ", logf, logf32, "(float)")                                    \
    X("float ", log2f, log2f32, "(float)")                                  \
    X("float ", powf, powf32, "(float, float)")                             \
    X("float ", hypotf, hypotf32, "(float, float)")                         \
    X("float ", lgammaf, lgammaf32, "(float)")

static const struct {
    const char *name, *alias, *decl;
} cc_renames[] = {
#define CC_RENAME_ROW(ret, n, a, params) \
    {#n, #a, ret #n params " __asm__(\"" #a "\");\n"},
    CC_RENAMES(CC_RENAME_ROW)
#undef CC_RENAME_ROW
};

static pthread_once_t cc_renames_once = PTHREAD_ONCE_INIT;
static char cc_renames_text[2048];

/* Fill cc_renames_text with the renames this process's libraries allow. */
static void cc_renames_init(void)
{
    size_t head = (size_t)snprintf(cc_renames_text, sizeof cc_renames_text,
                                   "/* calls renamed to their current library version (cc.c) */\n");
    size_t at = head;
    for (size_t i = 0; i < sizeof cc_renames / sizeof cc_renames[0]; i++) {
        void *f = dlsym(RTLD_DEFAULT, cc_renames[i].name);
        void *g = f ? dlsym(RTLD_DEFAULT, cc_renames[i].alias) : NULL;
        size_t len = strlen(cc_renames[i].decl);
        if (f && f == g && at + len < sizeof cc_renames_text) {
            memcpy(cc_renames_text + at, cc_renames[i].decl, len + 1);
            at += len;
        }
    }
    if (at == head)
        cc_renames_text[0] = '\0';
    (void)dlerror();
}

const char *cdy_cc_renames(void)
{
    pthread_once(&cc_renames_once, cc_renames_init);
    return cc_renames_text;
}

int cdy_cc_max_threads(void)
{
    cc_pin_openmp();
    return cc_omp_max_threads ? cc_omp_max_threads() : -1;
}

/* Write a formatted message into err; returns -1. */
static int cc_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int cc_fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* The 128-bit FNV-1a offset basis: where every hash here starts. */
#define CC_FNV_BASIS (((cc_u128)0x6c62272e07bb0142ULL << 64) | 0x62b821756295c58dULL)

/* h as 32 hex digits. */
static void cc_hex(cc_u128 h, char hex[33])
{
    snprintf(hex, 33, "%016llx%016llx", (unsigned long long)(h >> 64),
             (unsigned long long)(uint64_t)h);
}

/* Fold n bytes of p into the 128-bit FNV-1a state h. */
static void cc_hash(cc_u128 *h, const void *p, size_t n)
{
    const cc_u128 prime = ((cc_u128)1 << 88) + 0x13B;
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        *h ^= s[i];
        *h *= prime;
    }
}

/* Fold a NUL-terminated string (with its NUL, as a separator) into h. */
static void cc_hash_str(cc_u128 *h, const char *s)
{
    cc_hash(h, s ? s : "", strlen(s ? s : "") + 1);
}

/* Split s on blanks into argv[*argc...]; returns -1 when argv is full.
 * The words point into `copy`, a malloc'd copy of s the caller frees. */
static int cc_split(const char *s, char **copy, char **argv, int *argc)
{
    *copy = strdup(s ? s : "");
    if (!*copy)
        return -1;
    char *save = NULL;
    for (char *p = strtok_r(*copy, " \t\n", &save); p; p = strtok_r(NULL, " \t\n", &save)) {
        if (*argc >= CC_MAX_ARGV - 1)
            return -1;
        argv[(*argc)++] = p;
    }
    argv[*argc] = NULL;
    return 0;
}

/* Start argv with stdout+stderr into a pipe; its read end in *fd.  Returns 0,
 * or an errno value when the program could not be started. */
static int cc_spawn(char **argv, pid_t *pid, int *fd)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC))
        return errno;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    int rc = posix_spawnp(pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc)
        close(fds[0]);
    else
        *fd = fds[0];
    return rc;
}

/* Read fd to its end into out (at most CC_CAPTURE_MAX bytes), close it and
 * reap pid, its wait status in *status (0 if it cannot be had). */
static void cc_reap(pid_t pid, int fd, cdy_buf *out, int *status)
{
    char chunk[4096];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk) - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        chunk[n] = 0;
        if (out->len < CC_CAPTURE_MAX)
            cdy_buf_puts(out, chunk);
    }
    close(fd);
    while (waitpid(pid, status, 0) < 0) {
        if (errno != EINTR) {
            *status = 0;
            break;
        }
    }
}

/* Run argv with stdout+stderr captured into out (at most CC_CAPTURE_MAX bytes).
 * Returns 0 and the wait status in *status, or an errno value when the
 * program could not be started. */
static int cc_run(char **argv, cdy_buf *out, int *status)
{
    pid_t pid;
    int fd, rc = cc_spawn(argv, &pid, &fd);
    if (!rc)
        cc_reap(pid, fd, out, status);
    return rc;
}

/* Remember ver as cc's version if there is room (takes ver either way). */
static void cc_remember(const char *cc, char *ver)
{
    pthread_mutex_lock(&cc_lock);
    int i = 0;
    while (i < CC_MEMO_MAX && cc_versions[i].cc && strcmp(cc_versions[i].cc, cc) != 0)
        i++;
    if (i < CC_MEMO_MAX && !cc_versions[i].cc && (cc_versions[i].cc = strdup(cc))) {
        cc_versions[i].version = ver;
        ver = NULL;
    }
    pthread_mutex_unlock(&cc_lock);
    free(ver);
}

/* Fold cc's memoized version into h; 1 if it was known, else 0. */
static int cc_hash_known_version(const char *cc, cc_u128 *h)
{
    int found = 0;
    pthread_mutex_lock(&cc_lock);
    for (int i = 0; i < CC_MEMO_MAX && cc_versions[i].cc && !found; i++)
        if (strcmp(cc_versions[i].cc, cc) == 0) {
            cc_hash_str(h, cc_versions[i].version);
            found = 1;
        }
    pthread_mutex_unlock(&cc_lock);
    return found;
}

/* Fold the output of `<cc> --version` into h (run once per process per
 * compiler); 0, or -1 with err set when the compiler cannot be run. */
static int cc_hash_version(const char *cc, cc_u128 *h, char *err, size_t errlen)
{
    if (cc_hash_known_version(cc, h))
        return 0;
    char *argv[CC_MAX_ARGV], *copy = NULL;
    int argc = 0, status = 0;
    cdy_buf out = {0};
    if (cc_split(cc, &copy, argv, &argc) || argc == 0 || argc >= CC_MAX_ARGV - 2) {
        free(copy);
        return cc_fail(err, errlen, "bad C compiler command '%s'", cc);
    }
    argv[argc++] = "--version";
    argv[argc] = NULL;
    int rc = cc_run(argv, &out, &status);
    free(copy);
    char *ver = cdy_buf_take(&out);
    if (rc || !ver || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        free(ver);
        if (rc == ENOENT || rc == EACCES || (!rc && WIFEXITED(status) && WEXITSTATUS(status) == 127))
            return cc_fail(err, errlen, "C compiler '%s' not found", cc);
        return cc_fail(err, errlen, "C compiler '%s' cannot be run: %s", cc,
                       rc ? strerror(rc) : "'--version' failed");
    }
    cc_hash_str(h, ver);
    cc_remember(cc, ver);
    return 0;
}

/* The "flags" line of /proc/cpuinfo (malloc'd), or "unknown". */
static char *cc_read_cpu_flags(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char *line = NULL, *res = NULL;
    size_t cap = 0;
    while (f && !res && getline(&line, &cap, f) > 0)
        if (strncmp(line, "flags", 5) == 0)
            res = strdup(line);
    free(line);
    if (f)
        fclose(f);
    return res ? res : strdup("unknown");
}

/* Fold the CPU feature flags (read once per process) into h. */
static void cc_hash_cpu(cc_u128 *h)
{
    pthread_mutex_lock(&cc_lock);
    if (!cc_cpu_flags)
        cc_cpu_flags = cc_read_cpu_flags();
    cc_hash_str(h, cc_cpu_flags ? cc_cpu_flags : "unknown");
    pthread_mutex_unlock(&cc_lock);
}

/* Create dir and its parents (mode 0700 for the ones created); 0 or errno. */
static int cc_mkdir_p(const char *dir)
{
    char path[CC_PATH_MAX];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof(path))
        return ENAMETOOLONG;
    memcpy(path, dir, n + 1);
    for (char *p = path + 1; ; p++) {
        if (*p != '/' && *p != 0)
            continue;
        char saved = *p;
        *p = 0;
        if (mkdir(path, 0700) && errno != EEXIST)
            return errno;
        *p = saved;
        if (!saved)
            break;
    }
    struct stat st;
    if (stat(path, &st))
        return errno;
    return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

/* Whether the ELF64 file fd of size bytes is whole: headers and every
 * loadable segment lie inside the file.  dlopen() maps segments without
 * checking this, and touching a page past the end of a truncated file is a
 * SIGBUS, so a truncated cache entry must be caught here.  NULL or the reason. */
static const char *cc_elf_whole(int fd, off_t size)
{
    Elf64_Ehdr eh;
    if (size < (off_t)sizeof(eh) || pread(fd, &eh, sizeof(eh), 0) != (ssize_t)sizeof(eh))
        return "truncated ELF header";
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_type != ET_DYN || eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 ||
        eh.e_phnum > 64)
        return "not an ELF64 shared object";
    if (eh.e_phoff > (uint64_t)size ||
        (uint64_t)size - eh.e_phoff < (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr))
        return "truncated (program headers past the end)";
    if (eh.e_shoff > (uint64_t)size ||
        (uint64_t)size - eh.e_shoff < (uint64_t)eh.e_shnum * eh.e_shentsize)
        return "truncated (section headers past the end)";
    for (int i = 0; i < eh.e_phnum; i++) {
        Elf64_Phdr ph;
        if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + (uint64_t)i * sizeof(ph))) !=
            (ssize_t)sizeof(ph))
            return "unreadable program header";
        if (ph.p_type == PT_LOAD &&
            (ph.p_offset > (uint64_t)size || (uint64_t)size - ph.p_offset < ph.p_filesz))
            return "truncated (a segment lies past the end)";
    }
    return NULL;
}

/* Whether path is a regular file we own, not writable by group/others, that
 * starts with the ELF magic and that dlopen() accepts.  0 when it is; else
 * ENOENT when there is no file, or -1 with the reason in why. */
static int cc_check_so(const char *path, char *why, size_t whylen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            return ENOENT;
        snprintf(why, whylen, "cannot open it: %s", strerror(e));
        return -1;
    }
    unsigned char magic[4];
    struct stat st;
    int rc = -1;
    if (fstat(fd, &st))
        snprintf(why, whylen, "cannot stat it: %s", strerror(errno));
    else if (!S_ISREG(st.st_mode))
        snprintf(why, whylen, "not a regular file");
    else if (st.st_uid != geteuid() || (st.st_mode & 022))
        snprintf(why, whylen, "not private (owner uid %u, mode %03o)", (unsigned)st.st_uid,
                 (unsigned)(st.st_mode & 0777));
    else if (st.st_size <= 4 || pread(fd, magic, 4, 0) != 4 || memcmp(magic, "\x7f" "ELF", 4) != 0)
        snprintf(why, whylen, "not an ELF shared object (%lld bytes)", (long long)st.st_size);
    else {
        const char *bad = cc_elf_whole(fd, st.st_size);
        if (bad)
            snprintf(why, whylen, "%s (%lld bytes)", bad, (long long)st.st_size);
        else
            rc = 0;
    }
    close(fd);
    if (rc)
        return rc;
    cc_pin_openmp();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, whylen, "dlopen failed: %s", e ? e : "unknown error");
        return -1;
    }
    dlclose(h);
    return 0;
}

/* Check that dir is private to us (owned by the effective user, no group or
 * other write); 0 or -1 with err set. */
static int cc_check_dir(const char *dir, char *err, size_t errlen)
{
    struct stat st;
    if (stat(dir, &st))
        return cc_fail(err, errlen, "cannot use cache dir %s: %s", dir, strerror(errno));
    if (st.st_uid != geteuid())
        return cc_fail(err, errlen, "cache dir %s is owned by uid %u, not by us (uid %u); "
                       "refusing to load kernels from it", dir, (unsigned)st.st_uid,
                       (unsigned)geteuid());
    if (st.st_mode & 022)
        return cc_fail(err, errlen, "cache dir %s is writable by group or others (mode %03o); "
                       "refusing to load kernels from it", dir, (unsigned)(st.st_mode & 0777));
    return 0;
}

/* Write n bytes of s to fd (retrying short and interrupted writes); 0 or
 * an errno value. */
static int cc_write_all(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : EIO;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Write n bytes of s to a new file at path (mode 0600); 0 or errno. */
static int cc_write_file(const char *path, const char *s, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno;
    int e = cc_write_all(fd, s, n);
    if (e) {
        close(fd);
        unlink(path);
        return e;
    }
    if (close(fd)) {
        e = errno;
        unlink(path);
        return e;
    }
    return 0;
}

/* Copy the first CC_ERR_LINES lines of the compiler's output into err. */
static int cc_fail_output(char *err, size_t errlen, int status, const char *out)
{
    const char *end = out;
    for (int lines = 0; *end && lines < CC_ERR_LINES; end++)
        if (*end == '\n')
            lines++;
    int n = (int)(end - out);
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r'))
        n--;
    if (WIFEXITED(status))
        return cc_fail(err, errlen, "C compiler failed (exit %d): %.*s", WEXITSTATUS(status),
                       n, out);
    if (WIFSIGNALED(status))
        return cc_fail(err, errlen, "C compiler killed by signal %d: %.*s", WTERMSIG(status),
                       n, out);
    return cc_fail(err, errlen, "C compiler failed: %.*s", n, out);
}

/* A compiler command line: opts->cc, CC_FLAGS, the words `mid`, then
 * opts->extra_flags (the split words live in copies[]). */
typedef struct {
    char *argv[CC_MAX_ARGV];
    char *copies[3];
} cc_cmd;

static void cc_cmd_free(cc_cmd *cmd)
{
    for (int i = 0; i < 3; i++)
        free(cmd->copies[i]);
}

/* Fill cmd; 0, or -1 with err set when the line does not fit. */
static int cc_cmd_make(cc_cmd *cmd, const cdy_cc_opts *opts, char *const *mid, int nmid,
                       char *err, size_t errlen)
{
    int argc = 0;
    memset(cmd, 0, sizeof(*cmd));
    if (cc_split(opts->cc, &cmd->copies[0], cmd->argv, &argc) ||
        cc_split(CC_FLAGS, &cmd->copies[1], cmd->argv, &argc) ||
        argc + nmid + 1 >= CC_MAX_ARGV)
        return cc_fail(err, errlen, "C compiler command line too long");
    for (int i = 0; i < nmid; i++)
        cmd->argv[argc++] = mid[i];
    cmd->argv[argc] = NULL;
    if (cc_split(opts->extra_flags, &cmd->copies[2], cmd->argv, &argc))
        return cc_fail(err, errlen, "C compiler command line too long");
    return 0;
}

/* 0 when a compiler run went well (e: cc_spawn's result, status, out: its
 * exit and output); else -1 with err saying why. */
static int cc_outcome(const cdy_cc_opts *opts, int e, int status, const cdy_buf *out,
                      char *err, size_t errlen)
{
    if (e == ENOENT || e == EACCES)
        return cc_fail(err, errlen, "C compiler '%s' not found", opts->cc);
    if (e)
        return cc_fail(err, errlen, "C compiler '%s' cannot be run: %s", opts->cc, strerror(e));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return cc_fail_output(err, errlen, status, out->data ? out->data : "");
    return 0;
}

/* Run the compiler with `mid` between the flags and opts->extra_flags; 0 or -1. */
static int cc_invoke(const cdy_cc_opts *opts, char *const *mid, int nmid, char *err,
                     size_t errlen)
{
    cc_cmd cmd;
    cdy_buf out = {0};
    int status = 0, rc = cc_cmd_make(&cmd, opts, mid, nmid, err, errlen);
    if (!rc) {
        int e = cc_run(cmd.argv, &out, &status);
        rc = cc_outcome(opts, e, status, &out, err, errlen);
    }
    cc_cmd_free(&cmd);
    cdy_buf_free(&out);
    return rc;
}

/* ---- the standby compiler ------------------------------------------------
 * After a build in one compiler run, the next run is started at once, ahead
 * of its source: the compiler with the flags of a one-run build, its input
 * file /dev/fd/3, a pipe holding opts->prefix (the text every generated
 * source starts with) and `#include "/dev/stdin"`.  It starts (exec, dynamic
 * linking, options, target set-up), parses the prefix and blocks reading its
 * stdin, another pipe.  The next build whose source starts with the prefix
 * writes the rest down that pipe and waits for the compiler: 12-20 ms of a
 * 60-120 ms build are gone.  No file is written for it but its library, in
 * the cache dir it was started for, which the build moves into its own.  Its
 * stdout and stderr are /dev/null: a standby build that fails is redone the
 * ordinary way, which reports the compiler's message.  When this process
 * ends, or the options change, the pipe closes and the standby fails on a
 * source without its end mark (#error) and exits, removing its own temporary
 * files.  A forked child never uses its parent's standby. */
#define CC_SB_END "\n#define CDY_STANDBY_SOURCE_END 1\n"
#define CC_SB_TAIL "#include \"/dev/stdin\"\n#ifndef CDY_STANDBY_SOURCE_END\n" \
                   "#error \"cdynamo: the source of the standby compiler ended early\"\n#endif\n"
#define CC_SB_REAP 8             /* closed standbys waiting to be reaped */
#define CC_SB_PREFIX_MAX 49152   /* a longer prefix would not fit in its pipe at once */

typedef struct {
    pid_t pid, owner;            /* the compiler; the process that started it */
    int in;                      /* the write end of its stdin; -1: none */
    char *key;                   /* the options it was started for (cc_sb_key) */
    char so[CC_PATH_MAX];        /* the library it writes */
} cc_standby;

static cc_standby cc_sb = {.in = -1};            /* under cc_lock */
static pid_t cc_sb_reap[CC_SB_REAP];             /* under cc_lock */

/* The options a standby is started for, as one malloc'd string (NULL on OOM):
 * compiler, extra flags and a hash of the prefix.  Not the cache dir: a
 * standby writes its library in the dir it was started for, and the build
 * moves it into its own (a new process, or the bench, may use a new dir for
 * each function). */
static char *cc_sb_key(const cdy_cc_opts *opts)
{
    cc_u128 h = CC_FNV_BASIS;
    char hex[33];
    cc_hash_str(&h, opts->prefix);
    cc_hash_str(&h, CC_FLAGS);
    cc_hex(h, hex);
    const char *x = opts->extra_flags ? opts->extra_flags : "";
    size_t n = strlen(opts->cc) + strlen(x) + sizeof(hex) + 2;
    char *key = malloc(n);
    if (key)
        snprintf(key, n, "%s\n%s\n%s", opts->cc, x, hex);
    return key;
}

/* Move file from to to: a rename, or across file systems a copy (a new file,
 * mode 0600) and the removal of from; 0 or -1. */
static int cc_sb_move(const char *from, const char *to)
{
    if (!rename(from, to))
        return 0;
    if (errno != EXDEV)
        return -1;
    struct stat st;
    int fd = open(from, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), rc = -1;
    char *data = fd >= 0 && !fstat(fd, &st) && st.st_size > 0 ? malloc((size_t)st.st_size) : NULL;
    if (data && pread(fd, data, (size_t)st.st_size, 0) == (ssize_t)st.st_size)
        rc = cc_write_file(to, data, (size_t)st.st_size) ? -1 : 0;
    free(data);
    if (fd >= 0)
        close(fd);
    unlink(from);
    return rc;
}

/* Reap the closed standbys that have ended (all of them, waiting, when
 * wait); under cc_lock. */
static void cc_sb_reap_some(int wait)
{
    for (int i = 0; i < CC_SB_REAP; i++)
        if (cc_sb_reap[i] > 0 && waitpid(cc_sb_reap[i], NULL, wait ? 0 : WNOHANG) != 0)
            cc_sb_reap[i] = 0;
}

/* Close *sb: its compiler reads the end of its source, fails and exits (it
 * is reaped later); under cc_lock. */
static void cc_sb_close(cc_standby *sb)
{
    if (sb->in < 0)
        return;
    close(sb->in);
    if (sb->owner == getpid()) {     /* a forked child's copy: not its child */
        int i = 0;
        while (i < CC_SB_REAP && cc_sb_reap[i] > 0)
            i++;
        if (i == CC_SB_REAP) {
            cc_sb_reap_some(1);
            i = 0;
        }
        cc_sb_reap[i] = sb->pid;
    }
    free(sb->key);
    sb->key = NULL;
    sb->in = -1;
}

/* Move the standby started for key into *sb; 0, or -1 when there is none
 * (one for other options, or a parent's, is closed). */
static int cc_sb_take(const char *key, cc_standby *sb)
{
    int rc = -1;
    pthread_mutex_lock(&cc_lock);
    cc_sb_reap_some(0);
    if (cc_sb.in >= 0 && (cc_sb.owner != getpid() || strcmp(cc_sb.key, key) != 0))
        cc_sb_close(&cc_sb);
    if (cc_sb.in >= 0) {
        *sb = cc_sb;
        cc_sb.in = -1;
        cc_sb.key = NULL;
        rc = 0;
    }
    pthread_mutex_unlock(&cc_lock);
    return rc;
}

/* Write n bytes of s to the pipe fd with SIGPIPE (its reader gone) blocked,
 * and discarded if this write raised it; 0 or -1. */
static int cc_sb_write(int fd, const char *s, size_t n)
{
    sigset_t pipe_set, old, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    sigpending(&pending);
    int was_pending = sigismember(&pending, SIGPIPE), rc = cc_write_all(fd, s, n) ? -1 : 0;
    if (rc && !was_pending) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* A pipe whose read end is numbered 10 or more (never one of the standard
 * descriptors or 3, which posix_spawn's dup2 would leave close-on-exec);
 * both ends close-on-exec.  0 or an errno value. */
static int cc_sb_pipe(int fds[2])
{
    int p[2];
    if (pipe2(p, O_CLOEXEC))
        return errno;
    fds[0] = fcntl(p[0], F_DUPFD_CLOEXEC, 10);
    fds[1] = p[1];
    int e = fds[0] < 0 ? errno : 0;
    close(p[0]);
    if (e)
        close(p[1]);
    return e;
}

/* Start argv with its stdin the read end of a new pipe (its write end in
 * *in), descriptor 3 a pipe holding first (its first input, /dev/fd/3), and
 * its output to /dev/null; 0 or an errno value. */
static int cc_sb_spawn(char **argv, const char *first, pid_t *pid, int *in)
{
    int fin[2], fmain[2], rc = cc_sb_pipe(fin);
    if (rc)
        return rc;
    if ((rc = cc_sb_pipe(fmain))) {
        close(fin[0]);
        close(fin[1]);
        return rc;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fin[0], 0);
    posix_spawn_file_actions_adddup2(&fa, fmain[0], 3);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    rc = posix_spawnp(pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fin[0]);
    close(fmain[0]);
    if (!rc && cc_sb_write(fmain[1], first, strlen(first)))
        rc = EPIPE;              /* it is closed below: the compiler fails and exits */
    close(fmain[1]);
    if (rc)
        close(fin[1]);
    else
        *in = fin[1];
    return rc;
}

/* Start a standby compiler for the next build under opts, unless one is
 * ready; nothing when it cannot be (the next build runs the ordinary way).
 * Without opts->prefix (standby off) the one there is is closed. */
void cdy_cc_standby(const cdy_cc_opts *opts)
{
    size_t plen = opts->prefix ? strlen(opts->prefix) : 0;
    char *key = plen && plen < CC_SB_PREFIX_MAX ? cc_sb_key(opts) : NULL;
    if (!key) {                      /* standby off: close the one there is */
        pthread_mutex_lock(&cc_lock);
        cc_sb_close(&cc_sb);
        pthread_mutex_unlock(&cc_lock);
        return;
    }
    pthread_mutex_lock(&cc_lock);
    int ready = cc_sb.in >= 0 && cc_sb.owner == getpid() && strcmp(cc_sb.key, key) == 0;
    if (!ready)
        cc_sb_close(&cc_sb);
    pthread_mutex_unlock(&cc_lock);
    if (ready) {
        free(key);
        return;
    }
    cc_standby sb = {.in = -1, .owner = getpid(), .key = key};
    int l = snprintf(sb.so, sizeof(sb.so), "%s/standby.%ld.%lu.so.tmp", opts->cache_dir,
                     (long)sb.owner, atomic_fetch_add(&cc_counter, 1));
    char *text = malloc(plen + sizeof(CC_SB_TAIL));
    if (text) {
        memcpy(text, opts->prefix, plen);
        memcpy(text + plen, CC_SB_TAIL, sizeof(CC_SB_TAIL));
    }
    cc_cmd cmd = {0};
    char *mid[] = {"-x", "c", "/dev/fd/3", "-x", "none", "-o", sb.so, CC_LIBS};
    if (text && l > 0 && (size_t)l < sizeof(sb.so) && !cc_mkdir_p(opts->cache_dir) &&
        !cc_check_dir(opts->cache_dir, NULL, 0) && !cc_cmd_make(&cmd, opts, mid, 8, NULL, 0) &&
        !cc_sb_spawn(cmd.argv, text, &sb.pid, &sb.in)) {
        pthread_mutex_lock(&cc_lock);
        if (cc_sb.in < 0) {          /* else another thread started one meanwhile */
            cc_sb = sb;
            sb.in = -1;
            sb.key = NULL;
        }
        cc_sb_close(&sb);
        pthread_mutex_unlock(&cc_lock);
    }
    cc_cmd_free(&cmd);
    free(text);
    free(sb.key);
}

/* Build source into so_tmp with the standby compiler, when one is ready for
 * opts and source starts with its prefix; 0 when built, else -1 with nothing
 * left behind (the caller builds the ordinary way). */
static int cc_sb_build(const cdy_cc_opts *opts, const char *source, const char *so_tmp)
{
    size_t plen = opts->prefix ? strlen(opts->prefix) : 0;
    if (!plen || strncmp(source, opts->prefix, plen) != 0)
        return -1;
    char *key = cc_sb_key(opts);
    cc_standby sb;
    int got = key && cc_sb_take(key, &sb) == 0;
    free(key);
    if (!got)
        return -1;
    const char *rest = source + plen;
    int ok = !cc_sb_write(sb.in, rest, strlen(rest)) &&
             !cc_sb_write(sb.in, CC_SB_END, strlen(CC_SB_END));
    close(sb.in);
    int status = 0;
    while (waitpid(sb.pid, &status, 0) < 0)
        if (errno != EINTR) {
            ok = 0;
            break;
        }
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0 && cc_sb_move(sb.so, so_tmp) == 0;
    if (!ok)
        unlink(sb.so);
    free(sb.key);
    return ok ? 0 : -1;
}

/* Offsets of the kernel marks in source, in a malloc'd array (NULL when
 * there are none or memory is short); their count in *n. */
static size_t *cc_marks(const char *source, int *n)
{
    size_t cap = 0, *at = NULL;
    const size_t ml = strlen(CDY_CC_KERNEL_MARK);
    *n = 0;
    for (const char *p = strstr(source, CDY_CC_KERNEL_MARK); p;
         p = strstr(p + ml, CDY_CC_KERNEL_MARK)) {
        if ((size_t)*n == cap) {
            size_t *na = realloc(at, sizeof(size_t) * (cap = cap ? 2 * cap : 64));
            if (!na) {
                free(at);
                *n = 0;
                return NULL;
            }
            at = na;
        }
        at[(*n)++] = (size_t)(p - source);
    }
    return at;
}

/* The CPUs this process may run on (its affinity mask, as taskset sets it). */
static long cc_ncpu(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        return CPU_COUNT(&set);
    return sysconf(_SC_NPROCESSORS_ONLN);
}

/* The parts to compile nkernels kernels in at once: one per CPU we may run
 * on, at most CC_MAX_PARTS, each of CC_PART_KERNELS kernels or more; 1: one run. */
static int cc_nparts(int nkernels)
{
    long ncpu = cc_ncpu();
    long p = nkernels / CC_PART_KERNELS;
    p = p < ncpu ? p : ncpu;
    p = p < CC_MAX_PARTS ? p : CC_MAX_PARTS;
    return p < 2 ? 1 : (int)p;
}

/* Cut source's kernel text (from mark at[0] to its end) into nparts runs of
 * whole kernels of about equal bytes: part j is [cut[j], cut[j + 1]), each
 * cut the first mark at or past its share. */
static void cc_cuts(const char *source, const size_t *at, int n, int nparts, size_t *cut)
{
    size_t end = strlen(source), span = end - at[0];
    for (int j = 0, i = 0; j < nparts; j++) {
        while (i < n && (at[i] - at[0]) * (size_t)nparts < span * (size_t)j)
            i++;
        cut[j] = i < n ? at[i] : end;
    }
    cut[nparts] = end;
}

/* Write to path source's prologue (up to at0, its first mark) and its text
 * [from, to); 0 or an errno value. */
static int cc_write_part(const char *path, const char *source, size_t at0, size_t from,
                         size_t to)
{
    char *text = malloc(at0 + (to - from) + 1);
    if (!text)
        return ENOMEM;
    memcpy(text, source, at0);
    memcpy(text + at0, source + from, to - from);
    int e = cc_write_file(path, text, at0 + (to - from));
    free(text);
    return e;
}

/* Paths of part j's source and object: src_path with ".<j>.c" / ".<j>.o". */
static int cc_part_paths(const char *src_path, int j, char c[CC_PATH_MAX], char o[CC_PATH_MAX])
{
    int l1 = snprintf(c, CC_PATH_MAX, "%s.%d.c", src_path, j);
    int l2 = snprintf(o, CC_PATH_MAX, "%s.%d.o", src_path, j);
    return l1 < 0 || l2 < 0 || l1 >= CC_PATH_MAX || l2 >= CC_PATH_MAX ? -1 : 0;
}

/* Compile the nparts parts of source at once (cc -c each), the objects
 * into objs[]; 0, or -1 with err set (the first failing part's reason). */
static int cc_compile_parts(const cdy_cc_opts *opts, const char *source, const size_t *at,
                            int n, int nparts, const char *src_path,
                            char (*objs)[CC_PATH_MAX], char *err, size_t errlen)
{
    pid_t pid[CC_MAX_PARTS];
    size_t cut[CC_MAX_PARTS + 1];
    int fd[CC_MAX_PARTS], started = 0, rc = 0;
    cc_cuts(source, at, n, nparts, cut);
    for (int j = 0; j < nparts && !rc; j++) {
        char part[CC_PATH_MAX];
        cc_cmd cmd = {0};
        int e = cc_part_paths(src_path, j, part, objs[j])
                    ? ENAMETOOLONG : cc_write_part(part, source, at[0], cut[j], cut[j + 1]);
        char *mid[] = {"-c", part, "-o", objs[j]};
        if (e)
            rc = cc_fail(err, errlen, "cannot write %s: %s", part, strerror(e));
        else if (!(rc = cc_cmd_make(&cmd, opts, mid, 4, err, errlen))) {
            e = cc_spawn(cmd.argv, &pid[j], &fd[j]);
            rc = e ? cc_outcome(opts, e, 0, &(cdy_buf){0}, err, errlen) : 0;
            started += !e;
        }
        cc_cmd_free(&cmd);
    }
    for (int j = 0; j < started; j++) {        /* reap every started run */
        cdy_buf out = {0};
        int status = 0;
        cc_reap(pid[j], fd[j], &out, &status);
        if (!rc)
            rc = cc_outcome(opts, 0, status, &out, err, errlen);
        cdy_buf_free(&out);
    }
    return rc;
}

/* Remove the parts' sources and objects of src_path. */
static void cc_remove_parts(const char *src_path, int nparts)
{
    for (int j = 0; j < nparts; j++) {
        char c[CC_PATH_MAX], o[CC_PATH_MAX];
        if (!cc_part_paths(src_path, j, c, o)) {
            unlink(c);
            unlink(o);
        }
    }
}

/* Compile source (written at src_path) to so_tmp; 0 or -1 with err set.  A
 * source of many kernels is compiled in parts at once, one compiler per CPU
 * (cc_nparts), and the objects linked: T5-small's encoder, 55 kernels, took
 * 1.0 s as one run of gcc on 2 cores.  A source compiled in one run goes to
 * the standby compiler when there is one (*standby set to 1), and a new one
 * is started for the next build. */
static int cc_compile(const cdy_cc_opts *opts, const char *source, const char *src_path,
                      const char *so_tmp, int *standby, char *err, size_t errlen)
{
    int n = 0;
    size_t *at = cc_marks(source, &n);
    int nparts = at ? cc_nparts(n) : 1;
    if (nparts == 1) {
        free(at);
        char *mid[] = {(char *)src_path, "-o", (char *)so_tmp, CC_LIBS};
        *standby = !cc_sb_build(opts, source, so_tmp);
        if (!*standby && cc_invoke(opts, mid, 4, err, errlen))
            return -1;
        cdy_cc_standby(opts);
        return 0;
    }
    char objs[CC_MAX_PARTS][CC_PATH_MAX];
    int rc = cc_compile_parts(opts, source, at, n, nparts, src_path, objs, err, errlen);
    if (!rc) {
        char *mid[CC_MAX_PARTS + 3];
        for (int j = 0; j < nparts; j++)
            mid[j] = objs[j];
        mid[nparts] = "-o";
        mid[nparts + 1] = (char *)so_tmp;
        mid[nparts + 2] = CC_LIBS;
        rc = cc_invoke(opts, mid, nparts + 3, err, errlen);
    }
    cc_remove_parts(src_path, nparts);
    free(at);
    return rc;
}

/* After cc_compile failed with err: when the compiler crashed (an internal
 * compiler error, a GCC bug: GCC 12's SLP vectorizer segfaults on an int64
 * max reduction over a size-2 inner loop at -O3 -march=native -fwrapv),
 * compile once more at -O2 (no standby, which would be started for these
 * flags); its library serves the cache key of opts.  0, or -1 with err kept. */
static int cc_compile_again(const cdy_cc_opts *opts, const char *source, const char *src_path,
                            const char *so_tmp, int *standby, const char *err)
{
    if (!strstr(err, "internal compiler error"))
        return -1;
    char flags[1024];
    int n = snprintf(flags, sizeof(flags), "%s -O2", opts->extra_flags ? opts->extra_flags : "");
    if (n < 0 || (size_t)n >= sizeof(flags))
        return -1;
    cdy_cc_opts again = *opts;
    again.extra_flags = flags;
    again.prefix = NULL;
    char err2[512];
    return cc_compile(&again, source, src_path, so_tmp, standby, err2, sizeof(err2));
}

/* Hex name of the cache key of source under opts; 0 or -1 with err set. */
static int cc_key(const char *source, const cdy_cc_opts *opts, char hex[33], char *err,
                  size_t errlen)
{
    cc_u128 h = CC_FNV_BASIS;
    cc_hash_str(&h, source);
    cc_hash_str(&h, opts->cc);
    cc_hash_str(&h, CC_FLAGS);
    cc_hash_str(&h, opts->extra_flags);
    if (cc_hash_version(opts->cc, &h, err, errlen))
        return -1;
    cc_hash_cpu(&h);
    cc_hex(h, hex);
    return 0;
}

/* Compile into the cache under temporary names, then rename into place;
 * *standby: the standby compiler built it. */
static int cc_build_fresh(const char *source, const cdy_cc_opts *opts, const char *base,
                          const char *so_path, int *standby, char *err, size_t errlen)
{
    char src_tmp[CC_PATH_MAX], so_tmp[CC_PATH_MAX], src_final[CC_PATH_MAX];
    unsigned long n = atomic_fetch_add(&cc_counter, 1);
    long pid = (long)getpid();
    int l1 = snprintf(src_tmp, sizeof(src_tmp), "%s.%ld.%lu.tmp.c", base, pid, n);
    int l2 = snprintf(so_tmp, sizeof(so_tmp), "%s.so.tmp.%ld.%lu", base, pid, n);
    int l3 = snprintf(src_final, sizeof(src_final), "%s.c", base);
    if (l1 < 0 || l2 < 0 || l3 < 0 || (size_t)l1 >= sizeof(src_tmp) ||
        (size_t)l2 >= sizeof(so_tmp) || (size_t)l3 >= sizeof(src_final))
        return cc_fail(err, errlen, "cache path too long: %s", base);
    int e = cc_write_file(src_tmp, source, strlen(source));
    if (e)
        return cc_fail(err, errlen, "cannot write %s: %s", src_tmp, strerror(e));
    if (cc_compile(opts, source, src_tmp, so_tmp, standby, err, errlen) &&
        cc_compile_again(opts, source, src_tmp, so_tmp, standby, err)) {
        unlink(src_tmp);
        unlink(so_tmp);
        return -1;
    }
    char why[512];
    chmod(so_tmp, 0700);   /* private whatever the umask: gcc creates it 0777 & ~umask */
    if (cc_check_so(so_tmp, why, sizeof(why))) {
        unlink(src_tmp);
        unlink(so_tmp);
        return cc_fail(err, errlen, "the compiled kernel library cannot be loaded: %s", why);
    }
    if (rename(so_tmp, so_path)) {
        e = errno;
        unlink(src_tmp);
        unlink(so_tmp);
        return cc_fail(err, errlen, "cannot rename %s to %s: %s", so_tmp, so_path, strerror(e));
    }
    if (rename(src_tmp, src_final))                  /* the .c is only for debugging */
        unlink(src_tmp);
    return 0;
}

/* Compile source to a cached shared object (see cdynamo.h). */
int cdy_cc_build(const char *source, const cdy_cc_opts *opts, char *so_path,
                 size_t so_path_len, int *disk_hit, char *err, size_t errlen)
{
    char hex[33], base[CC_PATH_MAX];
    if (err && errlen)
        err[0] = 0;
    if (disk_hit)
        *disk_hit = 0;
    if (!source || !opts || !opts->cc || !opts->cc[0] || !opts->cache_dir ||
        !opts->cache_dir[0] || !so_path)
        return cc_fail(err, errlen, "cdy_cc_build: missing source, compiler or cache dir");
    if (cc_key(source, opts, hex, err, errlen))
        return -1;
    int n = snprintf(base, sizeof(base), "%s/k%s", opts->cache_dir, hex);
    if (n < 0 || (size_t)n + 8 >= sizeof(base) || (size_t)n + 4 > so_path_len)
        return cc_fail(err, errlen, "cache path too long for %s", opts->cache_dir);
    snprintf(so_path, so_path_len, "%s.so", base);
    cc_pin_openmp();
    int e = cc_mkdir_p(opts->cache_dir);
    if (e)
        return cc_fail(err, errlen, "cannot create cache dir %s: %s", opts->cache_dir,
                       strerror(e));
    if (cc_check_dir(opts->cache_dir, err, errlen))
        return -1;
    char why[512] = "";
    int bad = cc_check_so(so_path, why, sizeof(why));
    if (bad == 0) {
        if (disk_hit)
            *disk_hit = 1;
        return 0;
    }
    /* a bad entry is not unlinked: the fresh build is renamed over it, so a
     * concurrent builder never sees the path missing */
    int standby = 0;
    if (cc_build_fresh(source, opts, base, so_path, &standby, err, errlen)) {
        so_path[0] = 0;
        return -1;
    }
    if (disk_hit && standby)
        *disk_hit = 2;
    if (bad != ENOENT) {
        char note[1024];
        snprintf(note, sizeof(note), "bad kernel cache entry %s (%s) was rebuilt", so_path, why);
        cc_note(note);
    }
    return 0;
}
