/* decode.c - this version's opcode table (CDY_PV_OPCODES) as data, and the
 * decoder from raw instructions to semantic operations (sops.def).  The
 * decoding kinds are version-free (pyver.h); each version's table says
 * which one an opcode uses.                                               */
#include "pyver/pyver.h"
#include "pyver/pycompat.h"
#include "pyver/asm.h"

#include <string.h>

typedef struct {
    const char *name;   /* NULL: no opcode with this number */
    unsigned char caches;
    unsigned char dec;  /* cdy_dec_kind */
    unsigned char sop;  /* cdy_sop */
} opinfo;

static const opinfo optable[256] = {
#define X(name, num, caches, dec, sop, eff, jeff) \
    [num] = {#name, caches, CDY_DEC_##dec, CDY_SOP_##sop},
#include CDY_PV_OPCODES
#undef X
};

static const char *const sop_names[] = {
#define X(name, desc) #name,
#include "pyver/sops.def"
#undef X
};

/* See pyver.h. */
const char *cdy_sop_name(int s)
{
    return s >= 0 && s < CDY_SOP__COUNT ? sop_names[s] : "?";
}

/* See pyver.h. */
int cdy_pv_caches(int op)
{
    return op >= 0 && op < 256 && optable[op].name ? optable[op].caches : 0;
}

/* See pyver.h. */
const char *cdy_pv_opname(int op)
{
    return op >= 0 && op < 256 ? optable[op].name : NULL;
}

/* See pyver.h. */
int cdy_pv_dec_kind(int op)
{
    return op >= 0 && op < 256 && optable[op].name ? optable[op].dec : CDY_DEC_ARG;
}

/* See pyver.h. */
int cdy_pv_jump_dir(int op)
{
    switch (cdy_pv_dec_kind(op)) {
    case CDY_DEC_JF: case CDY_DEC_FOR_ITER_1: case CDY_DEC_FOR_ITER_2: case CDY_DEC_SEND_KEEP:
        return 1;
    case CDY_DEC_JB:
        return -1;
    default:
        return 0;
    }
}

/* See pyver.h. */
int cdy_pv_stack_effect(int op, int oparg, int jump, int *effect)
{
    switch (op) {
#define X(name, num, caches, dec, sop, eff, jeff) \
    case num: *effect = jump ? (jeff) : (eff); return 0;
#include CDY_PV_OPCODES
#undef X
    default:
        return -1;
    }
}

/* Append semantic op (sop, arg) to d. */
static void put(cdy_pv_instr *d, int sop, int arg)
{
    cdy_sinstr *s = &d->sops[d->nsops++];
    s->sop = sop;
    s->arg = arg;
    s->arg2 = 0;
    s->target = -1;
}

/* LOAD_FAST slot, or LOAD_CLOSURE when the slot holds a cell (3.13 loads a
 * closure's cells with LOAD_FAST). */
static void put_fast_or_cell(cdy_pv_instr *d, const cdy_pv_code *c, int slot)
{
    int kinds = c->co ? cdy_pc_local_kind(c->co, slot) : 0;
    put(d, kinds & (CDY_PC_FAST_CELL | CDY_PC_FAST_FREE) ? CDY_SOP_LOAD_CLOSURE : CDY_SOP_LOAD_FAST,
        slot);
}

/* The semantic ops of d (op, oparg, next and jump set) by its decoding kind. */
static void expand(cdy_pv_instr *d, const cdy_pv_code *c, const opinfo *oi)
{
    int a = d->oparg, sop = oi->sop;
    switch (oi->dec) {
    case CDY_DEC_GLOBAL_NULL_FIRST:
        if (a & 1)
            put(d, CDY_SOP_PUSH_NULL, 0);
        put(d, CDY_SOP_LOAD_GLOBAL, a >> 1);
        return;
    case CDY_DEC_GLOBAL_NULL_AFTER:
        put(d, CDY_SOP_LOAD_GLOBAL, a >> 1);
        if (a & 1)
            put(d, CDY_SOP_PUSH_NULL, 0);
        return;
    case CDY_DEC_ATTR_METHOD_BIT:
        put(d, a & 1 ? CDY_SOP_LOAD_METHOD : CDY_SOP_LOAD_ATTR, a >> 1);
        return;
    case CDY_DEC_COMPARE_SHIFT4:
        put(d, sop, a >> 4);
        return;
    case CDY_DEC_COMPARE_SHIFT5:
        put(d, sop, a >> 5);
        if (a & 16)
            put(d, CDY_SOP_TO_BOOL, 0);
        return;
    case CDY_DEC_SUPER_ATTR:
        put(d, sop, a >> 2);
        d->sops[0].arg2 = a & 3;
        return;
    case CDY_DEC_INTRINSIC_1:   /* INTRINSIC_UNARY_POSITIVE, INTRINSIC_LIST_TO_TUPLE */
        put(d, a == 5 ? CDY_SOP_UNARY_POSITIVE : a == 6 ? CDY_SOP_LIST_TO_TUPLE : sop, a);
        return;
    case CDY_DEC_RETURN_CONST:
        put(d, CDY_SOP_LOAD_CONST, a);
        put(d, CDY_SOP_RETURN_VALUE, 0);
        return;
    case CDY_DEC_SLICE:
        put(d, CDY_SOP_BUILD_SLICE, 2);
        put(d, sop, 0);
        return;
    case CDY_DEC_POP2:
        put(d, CDY_SOP_POP_TOP, 0);
        put(d, CDY_SOP_POP_TOP, 0);
        return;
    case CDY_DEC_CALL_KW:
        put(d, CDY_SOP_KW_NAMES_TOS, 0);
        put(d, CDY_SOP_CALL, a);
        return;
    case CDY_DEC_FORMAT_SIMPLE:
        put(d, sop, 0);
        return;
    case CDY_DEC_FORMAT_WITH_SPEC:
        put(d, sop, 4);
        return;
    case CDY_DEC_FAST_OR_CELL:
        put_fast_or_cell(d, c, a);
        return;
    case CDY_DEC_LOAD_LOAD:
        put_fast_or_cell(d, c, a >> 4);
        put_fast_or_cell(d, c, a & 15);
        return;
    case CDY_DEC_STORE_STORE:
        put(d, CDY_SOP_STORE_FAST, a >> 4);
        put(d, CDY_SOP_STORE_FAST, a & 15);
        return;
    case CDY_DEC_STORE_LOAD:
        put(d, CDY_SOP_STORE_FAST, a >> 4);
        put_fast_or_cell(d, c, a & 15);
        return;
    case CDY_DEC_SEND_KEEP:
        put(d, sop, a);
        d->sops[0].arg2 = 1;
        d->sops[0].target = d->jump;
        return;
    case CDY_DEC_END_SEND:
        put(d, CDY_SOP_SWAP, 2);
        put(d, CDY_SOP_POP_TOP, 0);
        return;
    default:
        put(d, sop, a);
        if (d->jump >= 0)   /* FOR_ITER's exit skips what follows its target */
            d->sops[0].target = d->jump + (oi->dec == CDY_DEC_FOR_ITER_1 ? 1 :
                                           oi->dec == CDY_DEC_FOR_ITER_2 ? 2 : 0);
    }
}

/* See pyver.h. */
int cdy_pv_decode(const cdy_pv_code *c, int pc, cdy_pv_instr *d)
{
    memset(d, 0, sizeof(*d));
    d->start = pc;
    d->op = -1;
    d->jump = -1;
    int ext = 0;
    for (;;) {
        if (pc < 0 || pc >= c->ncode)
            return -1;
        int op = c->code[2 * pc], arg = c->code[2 * pc + 1] | ext;
        if (op != CDY_PY_EXTENDED_ARG) {
            d->op = op;
            d->oparg = arg;
            d->pc = pc;
            break;
        }
        ext = arg << 8;
        pc++;
    }
    const opinfo *oi = &optable[d->op];
    d->next = d->pc + 1 + (oi->name ? oi->caches : 0);
    if (!oi->name)
        return 0;   /* unknown opcode: no semantic op */
    int dir = cdy_pv_jump_dir(d->op);
    if (dir)
        d->jump = d->next + dir * d->oparg;
    expand(d, c, oi);
    return 0;
}

/* ---- Python-facing views of the table (tests, debugging) ------------------ */

/* See pyver.h. */
PyObject *cdy_pv_py_opcode_table(PyObject *self, PyObject *unused)
{
    PyObject *d = PyDict_New();
    for (int op = 0; d && op < 256; op++) {
        if (!optable[op].name)
            continue;
        PyObject *n = PyLong_FromLong(op);
        if (!n || PyDict_SetItemString(d, optable[op].name, n))
            Py_CLEAR(d);
        Py_XDECREF(n);
    }
    return d;
}

/* See pyver.h. */
PyObject *cdy_pv_py_opcode_info(PyObject *self, PyObject *unused)
{
    PyObject *l = PyList_New(0);
    for (int op = 0; l && op < 256; op++) {
        if (!optable[op].name)
            continue;
        PyObject *t = Py_BuildValue("(siisi)", optable[op].name, op, optable[op].caches,
                                    cdy_sop_name(optable[op].sop), cdy_pv_jump_dir(op));
        if (!t || PyList_Append(l, t))
            Py_CLEAR(l);
        Py_XDECREF(t);
    }
    return l;
}

/* See pyver.h. */
PyObject *cdy_pv_py_stack_effect(PyObject *self, PyObject *args)
{
    int op, oparg, jump, effect;
    if (!PyArg_ParseTuple(args, "iip", &op, &oparg, &jump))
        return NULL;
    if (cdy_pv_stack_effect(op, oparg, jump, &effect))
        return PyErr_Format(PyExc_ValueError, "opcode %d is not in the table", op);
    return PyLong_FromLong(effect);
}

/* [(sop name, arg, arg2, target byte offset or None)] of d. */
static PyObject *sops_list(const cdy_pv_instr *d)
{
    PyObject *l = PyList_New(d->nsops);
    for (int i = 0; l && i < d->nsops; i++) {
        const cdy_sinstr *s = &d->sops[i];
        PyObject *t = s->target >= 0
                          ? Py_BuildValue("(siii)", cdy_sop_name(s->sop), s->arg, s->arg2, 2 * s->target)
                          : Py_BuildValue("(siiO)", cdy_sop_name(s->sop), s->arg, s->arg2, Py_None);
        if (!t)
            Py_CLEAR(l);
        else
            PyList_SET_ITEM(l, i, t);
    }
    return l;
}

/* See pyver.h. */
PyObject *cdy_pv_py_decode(PyObject *self, PyObject *code)
{
    if (!PyCode_Check(code))
        return PyErr_Format(PyExc_TypeError, "expected a code object");
    PyObject *bytes = PyCode_GetCode((PyCodeObject *)code);
    if (!bytes)
        return NULL;
    cdy_pv_code c = {(PyCodeObject *)code, (const unsigned char *)PyBytes_AS_STRING(bytes),
                     (int)(PyBytes_GET_SIZE(bytes) / 2)};
    PyObject *out = PyList_New(0);
    cdy_pv_instr d;
    for (int pc = 0; out && pc < c.ncode; pc = d.next) {
        if (cdy_pv_decode(&c, pc, &d)) {
            PyErr_SetString(PyExc_ValueError, "truncated bytecode");
            Py_CLEAR(out);
            break;
        }
        const char *nm = cdy_pv_opname(d.op);
        PyObject *sl = sops_list(&d);
        PyObject *jmp = d.jump >= 0 ? PyLong_FromLong(2 * d.jump) : Py_NewRef(Py_None);
        PyObject *t = NULL;
        if (sl && jmp)
            t = Py_BuildValue("(isiNN)", 2 * d.pc, nm ? nm : "?", d.oparg, jmp, sl);
        else {
            Py_XDECREF(sl);
            Py_XDECREF(jmp);
        }
        if (!t || PyList_Append(out, t))
            Py_CLEAR(out);
        Py_XDECREF(t);
    }
    Py_DECREF(bytes);
    return out;
}

static PyMethodDef pyver_methods[] = {
    {"opcode_table", cdy_pv_py_opcode_table, METH_NOARGS,
     "{opname: number} of the opcodes of this Python version's table (pyver/opcodes_3xx.def)"},
    {"opcode_info", cdy_pv_py_opcode_info, METH_NOARGS,
     "[(name, number, inline caches, semantic op, jump direction)] of the table"},
    {"stack_effect", cdy_pv_py_stack_effect, METH_VARARGS,
     "stack_effect(op, oparg, jump): the table's stack effect"},
    {"decode", cdy_pv_py_decode, METH_O,
     "decode(code): [(offset, opname, oparg, jump target offset, "
     "[(semantic op, arg, arg2, target offset)])]"},
    {"asm_decode", cdy_asm_py_decode, METH_O,
     "asm_decode(code): the assembler's instruction list [(opname, arg, target, line, end_line, "
     "col, end_col, handler, depth, lasti)]"},
    {"asm_encode", (PyCFunction)(void (*)(void))cdy_asm_py_encode, METH_VARARGS | METH_KEYWORDS,
     "asm_encode(instructions, like, **replace): a code object from an instruction list"},
    {NULL},
};

/* See pyver.h. */
int cdy_pyver_init(PyObject *module)
{
    return PyModule_AddFunctions(module, pyver_methods) ||
           PyModule_AddIntConstant(module, "PY_TABLE_VERSION", CDY_PY);
}
