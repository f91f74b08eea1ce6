/* asm.c - the instruction-list assembler (contract in asm.h): decoding a
 * code object into instructions with jump targets, positions and handlers
 * as references, and encoding them back with EXTENDED_ARG prefixes,
 * inline caches, the location table, the exception table and the stack
 * size.  Version-free: the opcode table (pyver/decode.c) and the jump forms
 * (pyver/emit_3xx.c) carry what differs.                                  */
#include "pyver/asm.h"
#include "pyver/emit.h"

#include <string.h>

/* ---- building lists ------------------------------------------------------ */

/* See asm.h. */
void cdy_asm_free(cdy_asm *a)
{
    PyMem_Free(a->ins);
    a->ins = NULL;
    a->n = a->cap = 0;
    a->failed = 0;
}

/* Room for n more instructions; 0 or -1 (a->failed set). */
static int reserve(cdy_asm *a, int n)
{
    if (a->failed)
        return -1;
    if (a->n + n <= a->cap)
        return 0;
    int cap = a->cap ? a->cap : 32;
    while (cap < a->n + n)
        cap *= 2;
    cdy_asm_ins *p = PyMem_Realloc(a->ins, sizeof(cdy_asm_ins) * (size_t)cap);
    if (!p) {
        a->failed = 1;
        return -1;
    }
    a->ins = p;
    a->cap = cap;
    return 0;
}

/* See asm.h. */
int cdy_asm_add(cdy_asm *a, int op, int arg)
{
    if (reserve(a, 1))
        return -1;
    a->ins[a->n] = (cdy_asm_ins){op, arg, -1, -1, -1, -1, -1, -1, 0, 0};
    return a->n++;
}

/* See asm.h. */
int cdy_asm_add_jump(cdy_asm *a, int op, int target)
{
    int i = cdy_asm_add(a, op, 0);
    if (i >= 0)
        a->ins[i].target = target;
    return i;
}

/* See asm.h. */
int cdy_asm_insert(cdy_asm *a, int at, int n)
{
    if (at < 0 || at > a->n || n < 0 || reserve(a, n))
        return -1;
    memmove(&a->ins[at + n], &a->ins[at], sizeof(cdy_asm_ins) * (size_t)(a->n - at));
    for (int i = at; i < at + n; i++)
        a->ins[i] = (cdy_asm_ins){CDY_PY_NOP, 0, -1, -1, -1, -1, -1, -1, 0, 0};
    a->n += n;
    for (int i = 0; i < a->n; i++) {
        if (a->ins[i].target >= at)
            a->ins[i].target += n;
        if (a->ins[i].handler >= at)
            a->ins[i].handler += n;
    }
    return 0;
}

/* See asm.h. */
void cdy_asm_set_pos(cdy_asm *a, int from, int line, int end_line, int col, int end_col)
{
    for (int i = from < 0 ? 0 : from; i < a->n; i++) {
        a->ins[i].line = line;
        a->ins[i].end_line = end_line;
        a->ins[i].col = col;
        a->ins[i].end_col = end_col;
    }
}

/* ---- varints (location and exception tables) ----------------------------- */

typedef struct {
    unsigned char *p;
    Py_ssize_t n, cap;
    int oom;
} bytes_out;

/* Append byte c. */
static void put_byte(bytes_out *b, unsigned c)
{
    if (b->n == b->cap) {
        Py_ssize_t cap = b->cap ? 2 * b->cap : 128;
        unsigned char *p = b->oom ? NULL : PyMem_Realloc(b->p, (size_t)cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    b->p[b->n++] = (unsigned char)c;
}

/* Location table varint: 6-bit chunks, least significant first, 0x40 = more. */
static void put_varint(bytes_out *b, unsigned v)
{
    for (; v >= 64; v >>= 6)
        put_byte(b, 64 | (v & 63));
    put_byte(b, v);
}

/* Location table signed varint (sign in bit 0). */
static void put_svarint(bytes_out *b, int v)
{
    put_varint(b, v < 0 ? ((unsigned)(-v) << 1) | 1u : (unsigned)v << 1);
}

/* Exception table varint: 6-bit chunks, most significant first, 0x40 = more;
 * 0x80 on the first byte of an entry (mark). */
static void put_exc_varint(bytes_out *b, unsigned v, int mark)
{
    int shift = 0;
    while (v >> (shift + 6))
        shift += 6;
    for (; shift >= 0; shift -= 6, mark = 0)
        put_byte(b, ((v >> shift) & 63) | (shift ? 64 : 0) | (mark ? 128 : 0));
}

typedef struct {
    const unsigned char *p, *end;
} bytes_in;

/* Read a location table varint; -1 past the end. */
static long get_varint(bytes_in *b)
{
    long v = 0;
    for (int shift = 0; b->p < b->end; shift += 6) {
        unsigned c = *b->p++;
        v |= (long)(c & 63) << shift;
        if (!(c & 64))
            return v;
    }
    return -1;
}

/* Read a location table signed varint. */
static long get_svarint(bytes_in *b)
{
    long u = get_varint(b);
    return u & 1 ? -(u >> 1) : u >> 1;
}

/* Read an exception table varint (most significant chunk first). */
static long get_exc_varint(bytes_in *b)
{
    long v = 0;
    while (b->p < b->end) {
        unsigned c = *b->p++;
        v = (v << 6) | (c & 63);
        if (!(c & 64))
            return v;
    }
    return -1;
}

/* ---- decoding ----------------------------------------------------------- */

typedef struct {
    int line, end_line, col, end_col;
} pos;

/* The position of every code unit of co, parsed from co_linetable
 * (Objects/locations.md); PyMem array of ncode entries, or NULL (no memory). */
static pos *unit_positions(PyCodeObject *co, int ncode)
{
    pos *p = PyMem_Calloc((size_t)(ncode + 1), sizeof(pos));
    PyObject *lt = PyObject_GetAttrString((PyObject *)co, "co_linetable");
    if (!p || !lt || !PyBytes_Check(lt)) {
        PyMem_Free(p);
        Py_XDECREF(lt);
        return NULL;
    }
    bytes_in b = {(const unsigned char *)PyBytes_AS_STRING(lt),
                  (const unsigned char *)PyBytes_AS_STRING(lt) + PyBytes_GET_SIZE(lt)};
    int line = co->co_firstlineno, unit = 0;
    while (b.p < b.end && unit < ncode) {
        unsigned first = *b.p++;
        int code = (first >> 3) & 15, len = (first & 7) + 1;
        pos q = {-1, -1, -1, -1};
        if (code == 14) {           /* long form */
            line += (int)get_svarint(&b);
            q.line = line;
            q.end_line = line + (int)get_varint(&b);
            q.col = (int)get_varint(&b) - 1;
            q.end_col = (int)get_varint(&b) - 1;
        }
        else if (code == 13) {      /* no column */
            line += (int)get_svarint(&b);
            q = (pos){line, line, -1, -1};
        }
        else if (code >= 10 && code <= 12) {   /* one line, line delta code - 10 */
            line += code - 10;
            int c = b.p < b.end ? *b.p++ : 0, e = b.p < b.end ? *b.p++ : 0;
            q = (pos){line, line, c, e};
        }
        else if (code < 10) {       /* short form: same line */
            int second = b.p < b.end ? *b.p++ : 0, c = code * 8 + ((second >> 4) & 7);
            q = (pos){line, line, c, c + (second & 15)};
        }                           /* 15: no position */
        for (int i = 0; i < len && unit < ncode; i++)
            p[unit++] = q;
    }
    for (; unit < ncode; unit++)
        p[unit] = (pos){-1, -1, -1, -1};
    Py_DECREF(lt);
    return p;
}

/* Index of the instruction starting at code unit u (start[] sorted), -1 if none. */
static int ins_at(const int *start, int n, int u)
{
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (start[mid] == u)
            return mid;
        if (start[mid] < u)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* Set the handlers of a's instructions [base, base + n) from co's exception
 * table; 0 or -1 with ValueError (a target that starts no instruction). */
static int read_exception_table(PyCodeObject *co, cdy_asm *a, int base, const int *start,
                                const int *opunit, int n)
{
    PyObject *et = PyObject_GetAttrString((PyObject *)co, "co_exceptiontable");
    if (!et || !PyBytes_Check(et)) {
        Py_XDECREF(et);
        return -1;
    }
    bytes_in b = {(const unsigned char *)PyBytes_AS_STRING(et),
                  (const unsigned char *)PyBytes_AS_STRING(et) + PyBytes_GET_SIZE(et)};
    int r = 0;
    while (b.p < b.end && !r) {
        long s = get_exc_varint(&b), len = get_exc_varint(&b), target = get_exc_varint(&b),
             dl = get_exc_varint(&b);
        int h = ins_at(start, n, (int)target);
        if (s < 0 || len < 0 || dl < 0 || h < 0) {
            PyErr_SetString(PyExc_ValueError, "cdynamo: malformed exception table");
            r = -1;
            break;
        }
        for (int i = 0; i < n; i++)
            if (opunit[i] >= s && opunit[i] < s + len) {
                a->ins[base + i].handler = base + h;
                a->ins[base + i].depth = (int)(dl >> 1);
                a->ins[base + i].lasti = (int)(dl & 1);
            }
    }
    Py_DECREF(et);
    return r;
}

/* See asm.h. */
int cdy_asm_from_code(PyCodeObject *co, cdy_asm *a)
{
    PyObject *bytes = PyCode_GetCode(co);
    if (!bytes)
        return -1;
    cdy_pv_code c = {co, (const unsigned char *)PyBytes_AS_STRING(bytes),
                     (int)(PyBytes_GET_SIZE(bytes) / 2)};
    int base = a->n, n = 0, r = -1;
    int *start = PyMem_Malloc(sizeof(int) * (size_t)(c.ncode + 1));
    int *opunit = PyMem_Malloc(sizeof(int) * (size_t)(c.ncode + 1));
    int *jump = PyMem_Malloc(sizeof(int) * (size_t)(c.ncode + 1));
    pos *p = unit_positions(co, c.ncode);
    if (!start || !opunit || !jump || !p) {
        PyErr_NoMemory();
        goto done;
    }
    cdy_pv_instr d;
    for (int pc = 0; pc < c.ncode; pc = d.next, n++) {
        if (cdy_pv_decode(&c, pc, &d) || !cdy_pv_opname(d.op)) {
            PyErr_Format(PyExc_ValueError, "cdynamo: cannot decode opcode %d at offset %d",
                         d.op, 2 * d.pc);
            goto done;
        }
        int i = cdy_asm_add(a, d.op, d.oparg);
        if (i < 0) {
            PyErr_NoMemory();
            goto done;
        }
        const pos *q = &p[d.pc];
        cdy_asm_set_pos(a, i, q->line, q->end_line, q->col, q->end_col);
        start[n] = d.start;
        opunit[n] = d.pc;
        jump[n] = d.jump;
    }
    for (int i = 0; i < n; i++) {
        if (jump[i] < 0)
            continue;
        int t = ins_at(start, n, jump[i]);
        if (t < 0) {
            PyErr_Format(PyExc_ValueError, "cdynamo: jump to offset %d starts no instruction",
                         2 * jump[i]);
            goto done;
        }
        a->ins[base + i].target = base + t;
    }
    r = read_exception_table(co, a, base, start, opunit, n);
done:
    PyMem_Free(start);
    PyMem_Free(opunit);
    PyMem_Free(jump);
    PyMem_Free(p);
    Py_DECREF(bytes);
    return r;
}

/* ---- layout --------------------------------------------------------------- */

/* EXTENDED_ARG prefixes oparg needs. */
static int ext_count(unsigned arg)
{
    return arg > 0xffffff ? 3 : arg > 0xffff ? 2 : arg > 0xff ? 1 : 0;
}

/* Choose each jump's opcode and oparg and every instruction's offset
 * (code units) until the EXTENDED_ARG counts are stable; op[], arg[] and
 * off[] (n + 1 entries: off[n] is the total length) are filled.  0, or -1
 * with ValueError. */
static int layout(const cdy_asm *a, int *op, unsigned *arg, int *off)
{
    for (int i = 0; i < a->n; i++) {
        op[i] = a->ins[i].op;
        arg[i] = (unsigned)a->ins[i].arg;
        if (a->ins[i].target >= 0 && (a->ins[i].target > a->n || !cdy_pv_jump_dir(op[i]))) {
            PyErr_Format(PyExc_ValueError, "cdynamo: instruction %d (%s) has a bad jump target",
                         i, cdy_pv_opname(op[i]) ? cdy_pv_opname(op[i]) : "?");
            return -1;
        }
        if (a->ins[i].target >= 0)
            arg[i] = 0;
    }
    for (int round = 0; round < 16; round++) {
        int changed = 0;
        off[0] = 0;
        for (int i = 0; i < a->n; i++)
            off[i + 1] = off[i] + ext_count(arg[i]) + 1 + cdy_pv_caches(op[i]);
        for (int i = 0; i < a->n; i++) {
            int t = a->ins[i].target;
            if (t < 0)
                continue;
            int backward = t <= i, o = cdy_emit_jump_op(op[i], backward);
            if (o < 0) {
                PyErr_Format(PyExc_ValueError, "cdynamo: %s cannot jump %s (instruction %d)",
                             cdy_pv_opname(op[i]), backward ? "backward" : "forward", i);
                return -1;
            }
            int next = off[i] + ext_count(arg[i]) + 1 + cdy_pv_caches(o);   /* same prefix count */
            unsigned v = (unsigned)(backward ? next - off[t] : off[t] - next);
            changed |= o != op[i] || v != arg[i];
            op[i] = o;
            arg[i] = v;
        }
        if (!changed)
            return 0;
    }
    PyErr_SetString(PyExc_ValueError, "cdynamo: jump offsets did not settle");
    return -1;
}

/* co_code: each instruction with its prefixes and zeroed caches. */
static void write_code(const cdy_asm *a, const int *op, const unsigned *arg, bytes_out *b)
{
    for (int i = 0; i < a->n; i++) {
        for (int k = ext_count(arg[i]); k > 0; k--) {
            put_byte(b, CDY_PY_EXTENDED_ARG);
            put_byte(b, (arg[i] >> (8 * k)) & 0xff);
        }
        put_byte(b, (unsigned)op[i]);
        put_byte(b, arg[i] & 0xff);
        for (int k = 0; k < cdy_pv_caches(op[i]); k++) {
            put_byte(b, 0);
            put_byte(b, 0);
        }
    }
}

/* One location entry of len (1..8) code units at position q, the line
 * delta from the previous entry's line being delta. */
static void put_location(bytes_out *b, const cdy_asm_ins *q, int len, int delta)
{
    int col = q->col, end = q->end_col;
    if (q->line < 0) {
        put_byte(b, 0x80 | (15 << 3) | (unsigned)(len - 1));
        return;
    }
    if (col < 0 || end < 0) {
        if (q->end_line == q->line || q->end_line < 0) {
            put_byte(b, 0x80 | (13 << 3) | (unsigned)(len - 1));
            put_svarint(b, delta);
            return;
        }
    }
    else if (q->end_line == q->line && delta == 0 && col < 80 && end >= col && end - col < 16) {
        put_byte(b, 0x80 | (unsigned)((col / 8) << 3) | (unsigned)(len - 1));
        put_byte(b, (unsigned)(((col % 8) << 4) | (end - col)));
        return;
    }
    else if (q->end_line == q->line && delta >= 0 && delta < 3 && col < 128 && end < 128) {
        put_byte(b, 0x80 | (unsigned)((10 + delta) << 3) | (unsigned)(len - 1));
        put_byte(b, (unsigned)col);
        put_byte(b, (unsigned)end);
        return;
    }
    put_byte(b, 0x80 | (14 << 3) | (unsigned)(len - 1));
    put_svarint(b, delta);
    put_varint(b, (unsigned)((q->end_line < 0 ? q->line : q->end_line) - q->line));
    put_varint(b, (unsigned)(col + 1));
    put_varint(b, (unsigned)(end + 1));
}

/* 1 if instructions x and y have the same position. */
static int same_pos(const cdy_asm_ins *x, const cdy_asm_ins *y)
{
    return x->line == y->line && x->end_line == y->end_line && x->col == y->col &&
           x->end_col == y->end_col;
}

/* co_linetable for the layout off[]: runs of equal positions, in entries
 * of at most 8 code units. */
static void write_locations(const cdy_asm *a, const int *off, int firstline, bytes_out *b)
{
    int line = firstline;
    for (int i = 0; i < a->n;) {
        int j = i + 1;
        while (j < a->n && same_pos(&a->ins[i], &a->ins[j]))
            j++;
        const cdy_asm_ins *q = &a->ins[i];
        for (int units = off[j] - off[i]; units > 0; units -= 8) {
            int delta = q->line < 0 ? 0 : q->line - line;
            put_location(b, q, units > 8 ? 8 : units, delta);
            if (q->line >= 0)
                line = q->line;
        }
        i = j;
    }
}

/* co_exceptiontable: one entry per run of instructions with the same
 * handler, depth and lasti. */
static void write_exceptions(const cdy_asm *a, const int *off, bytes_out *b)
{
    for (int i = 0; i < a->n;) {
        const cdy_asm_ins *q = &a->ins[i];
        int j = i + 1;
        while (j < a->n && a->ins[j].handler == q->handler && a->ins[j].depth == q->depth &&
               a->ins[j].lasti == q->lasti)
            j++;
        if (q->handler >= 0 && q->handler < a->n) {
            put_exc_varint(b, (unsigned)off[i], 1);
            put_exc_varint(b, (unsigned)(off[j] - off[i]), 0);
            put_exc_varint(b, (unsigned)off[q->handler], 0);
            put_exc_varint(b, (unsigned)((q->depth << 1) | (q->lasti != 0)), 0);
        }
        i = j;
    }
}

/* ---- stack size -------------------------------------------------------- */

/* 1 if control never falls through op to the next instruction. */
static int is_terminal(int op)
{
    cdy_pv_instr d;
    unsigned char code[2] = {(unsigned char)op, 0};
    cdy_pv_code c = {NULL, code, 1};
    if (cdy_pv_decode(&c, 0, &d) || !d.nsops)
        return 0;
    int s = d.sops[d.nsops - 1].sop;
    return s == CDY_SOP_JUMP || s == CDY_SOP_RETURN_VALUE || s == CDY_SOP_RAISE_VARARGS ||
           s == CDY_SOP_RERAISE;
}

/* Record depth d at instruction i (pushing it on the work stack when new);
 * 0, or -1 with ValueError when i was reached at another depth. */
static int reach(int *depth, int *work, int *nwork, int i, int d, int *max)
{
    if (d < 0) {
        PyErr_Format(PyExc_ValueError, "cdynamo: stack underflow at instruction %d", i);
        return -1;
    }
    if (d > *max)
        *max = d;
    if (depth[i] == d)
        return 0;
    if (depth[i] >= 0) {
        PyErr_Format(PyExc_ValueError, "cdynamo: instruction %d is reached with %d and %d items "
                     "on the stack", i, depth[i], d);
        return -1;
    }
    depth[i] = d;
    work[(*nwork)++] = i;
    return 0;
}

/* See asm.h. */
int cdy_asm_stacksize(const cdy_asm *a, int co_flags)
{
    const int gen = CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR;
    if (a->n == 0)
        return 0;
    int *depth = PyMem_Malloc(sizeof(int) * (size_t)a->n * 2);
    if (!depth) {
        PyErr_NoMemory();
        return -1;
    }
    int *work = depth + a->n, nwork = 0, max = 0, r = 0;
    for (int i = 0; i < a->n; i++)
        depth[i] = -1;
    r = reach(depth, work, &nwork, 0, (co_flags & gen) ? CDY_PV_GENERATOR_ENTRY_DEPTH : 0, &max);
    while (!r && nwork > 0) {
        int i = work[--nwork], d = depth[i], eff;
        const cdy_asm_ins *q = &a->ins[i];
        if (q->handler >= 0 && q->handler < a->n)   /* the exception, and lasti */
            r = reach(depth, work, &nwork, q->handler, q->depth + 1 + (q->lasti != 0), &max);
        if (!r && q->target >= 0 && q->target < a->n && !cdy_pv_stack_effect(q->op, q->arg, 1, &eff))
            r = reach(depth, work, &nwork, q->target, d + eff, &max);
        if (!r && !is_terminal(q->op) && i + 1 < a->n) {
            if (cdy_pv_stack_effect(q->op, q->arg, 0, &eff)) {
                PyErr_Format(PyExc_ValueError, "cdynamo: opcode %d is not in the table", q->op);
                r = -1;
            }
            else {
                /* the depth inside the instruction (CALL pops after pushing its args) */
                r = reach(depth, work, &nwork, i + 1, d + eff, &max);
            }
        }
    }
    PyMem_Free(depth);
    return r ? -1 : max;
}

/* ---- encoding ---------------------------------------------------------- */

/* See asm.h. */
PyObject *cdy_asm_to_code(const cdy_asm *a, PyCodeObject *like, PyObject *kw)
{
    if (a->failed)
        return PyErr_NoMemory();
    int *op = PyMem_Malloc(sizeof(int) * (size_t)(a->n + 1));
    unsigned *arg = PyMem_Malloc(sizeof(unsigned) * (size_t)(a->n + 1));
    int *off = PyMem_Malloc(sizeof(int) * (size_t)(a->n + 1));
    bytes_out code = {0}, lt = {0}, et = {0};
    PyObject *res = NULL, *all = NULL, *meth = NULL, *empty = NULL;
    if (!op || !arg || !off) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *flags = kw ? PyDict_GetItemString(kw, "co_flags") : NULL;   /* borrowed */
    int stacksize = cdy_asm_stacksize(a, flags && PyLong_Check(flags) ? (int)PyLong_AsLong(flags)
                                                                      : like->co_flags);
    if (stacksize < 0 || layout(a, op, arg, off))
        goto done;
    write_code(a, op, arg, &code);
    write_locations(a, off, like->co_firstlineno, &lt);
    write_exceptions(a, off, &et);
    if (code.oom || lt.oom || et.oom) {
        PyErr_NoMemory();
        goto done;
    }
    all = Py_BuildValue("{s:y#,s:y#,s:y#,s:i}", "co_code", code.p ? (char *)code.p : "",
                        code.n, "co_linetable", lt.p ? (char *)lt.p : "", lt.n,
                        "co_exceptiontable", et.p ? (char *)et.p : "", et.n, "co_stacksize",
                        stacksize);
    if (!all || (kw && PyDict_Update(all, kw)))
        goto done;
    meth = PyObject_GetAttrString((PyObject *)like, "replace");
    empty = PyTuple_New(0);
    if (meth && empty)
        res = PyObject_Call(meth, empty, all);
done:
    PyMem_Free(op);
    PyMem_Free(arg);
    PyMem_Free(off);
    PyMem_Free(code.p);
    PyMem_Free(lt.p);
    PyMem_Free(et.p);
    Py_XDECREF(all);
    Py_XDECREF(meth);
    Py_XDECREF(empty);
    return res;
}

/* ---- Python views (tests) -------------------------------------------------- */

/* See asm.h. */
PyObject *cdy_asm_py_decode(PyObject *self, PyObject *code)
{
    if (!PyCode_Check(code))
        return PyErr_Format(PyExc_TypeError, "expected a code object");
    cdy_asm a = {0};
    PyObject *out = NULL;
    if (cdy_asm_from_code((PyCodeObject *)code, &a))
        goto done;
    out = PyList_New(a.n);
    for (int i = 0; out && i < a.n; i++) {
        const cdy_asm_ins *q = &a.ins[i];
        PyObject *t = Py_BuildValue("(siiiiiiiii)", cdy_pv_opname(q->op), q->arg, q->target,
                                    q->line, q->end_line, q->col, q->end_col, q->handler,
                                    q->depth, q->lasti);
        if (!t)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, t);
    }
done:
    cdy_asm_free(&a);
    return out;
}

/* The opcode named by o (a name of the table, or a number); -1 with an error. */
static int opcode_of(PyObject *o)
{
    if (PyLong_Check(o))
        return (int)PyLong_AsLong(o);
    const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : NULL;
    for (int op = 0; s && op < 256; op++)
        if (cdy_pv_opname(op) && !strcmp(cdy_pv_opname(op), s))
            return op;
    PyErr_Format(PyExc_ValueError, "unknown opcode %R", o);
    return -1;
}

/* See asm.h. */
PyObject *cdy_asm_py_encode(PyObject *self, PyObject *args, PyObject *kw)
{
    PyObject *list, *like;
    if (!PyArg_ParseTuple(args, "OO!", &list, &PyCode_Type, &like))
        return NULL;
    PyObject *seq = PySequence_Fast(list, "expected a list of instructions");
    if (!seq)
        return NULL;
    cdy_asm a = {0};
    PyObject *res = NULL;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *t = PySequence_Fast_GET_ITEM(seq, i), *name;
        cdy_asm_ins q;
        if (!PyArg_ParseTuple(t, "Oiiiiiiiii", &name, &q.arg, &q.target, &q.line, &q.end_line,
                              &q.col, &q.end_col, &q.handler, &q.depth, &q.lasti) ||
            (q.op = opcode_of(name)) < 0)
            goto done;
        int k = cdy_asm_add(&a, q.op, q.arg);
        if (k < 0) {
            PyErr_NoMemory();
            goto done;
        }
        a.ins[k] = q;
    }
    res = cdy_asm_to_code(&a, (PyCodeObject *)like, kw);
done:
    cdy_asm_free(&a);
    Py_DECREF(seq);
    return res;
}
