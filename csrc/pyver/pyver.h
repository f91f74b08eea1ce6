/* pyver.h - the per-Python-version bytecode layer: which CPython this build
 * is for, its opcodes (opcodes_3xx.def), the semantic operations the tracer
 * interprets (sops.def), and the decoder from one to the other.
 *
 * The version is chosen here, once, by PY_VERSION_HEX; nothing else in
 * cdynamo tests the version for bytecode.  Frame and object internals that
 * move between versions are in pyver/pycompat.h; the instruction-list
 * assembler (code object <-> instructions) is pyver/asm.h; the transformed
 * code's per-version instruction sequences are pyver/emit.h.             */
#ifndef CDY_PYVER_H
#define CDY_PYVER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define CDY_PY 311
#define CDY_PV_OPCODES "pyver/opcodes_311.def"
#elif PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030D0000
#define CDY_PY 312
#define CDY_PV_OPCODES "pyver/opcodes_312.def"
#elif PY_VERSION_HEX >= 0x030D0000 && PY_VERSION_HEX < 0x030E0000
#define CDY_PY 313
#define CDY_PV_OPCODES "pyver/opcodes_313.def"
#else
#error "cdynamo supports CPython 3.11, 3.12 and 3.13 (pyver/opcodes_3xx.def)"
#endif

/* The values MAKE_FUNCTION's flags (3.11, 3.12) pop: defaults, kwdefaults,
 * annotations, closure (used by the tables' stack-effect column). */
#define CDY_PV_MAKE_FUNCTION_POPS(a) \
    (-(((a) & 1) + (((a) >> 1) & 1) + (((a) >> 2) & 1) + (((a) >> 3) & 1)))

/* The call protocol's NULL: 3.11 and 3.12 push it below the callable
 * ([NULL, callable, args]; a method call [method, self, args]); 3.13 above
 * it ([callable, NULL, args]; [method, self, args]). */
#define CDY_PV_NULL_BELOW_CALLABLE (CDY_PY < 313)

/* BINARY_OP's operator codes (NB_* of Include/internal/pycore_opcode_utils.h,
 * the same in 3.11 - 3.13): NB_ADD .. NB_XOR, then the in-place forms. */
#define CDY_NB_INPLACE_FIRST 13

/* The stack depth a generator's code starts at in the compiler's model
 * (flowgraph stackdepth()): 1 through 3.12 (RETURN_GENERATOR's effect is
 * 0), 0 from 3.13 (RETURN_GENERATOR pushes). */
#define CDY_PV_GENERATOR_ENTRY_DEPTH (CDY_PY < 313)

/* ---- semantic operations ---------------------------------------------- */
typedef enum {
#define X(name, desc) CDY_SOP_##name,
#include "pyver/sops.def"
#undef X
    CDY_SOP__COUNT
} cdy_sop;

/* The name of semantic op s ("LOAD_FAST"), "?" out of range. */
const char *cdy_sop_name(int s);

/* ---- raw opcodes of this version ------------------------------------------ */
enum {
#define X(name, num, caches, dec, sop, eff, jeff) CDY_PY_##name = num,
#include CDY_PV_OPCODES
#undef X
};

/* How a raw instruction becomes semantic ops (the tables' decoding column). */
typedef enum {
    CDY_DEC_ARG,                /* sop(oparg) */
    CDY_DEC_JF,                 /* sop, target = next + oparg */
    CDY_DEC_JB,                 /* sop, target = next - oparg */
    CDY_DEC_FOR_ITER_1,         /* FOR_ITER, exit = next + oparg + 1 (skips END_FOR, 3.12) */
    CDY_DEC_FOR_ITER_2,         /* ... + 2 (skips END_FOR and POP_TOP, 3.13) */
    CDY_DEC_GLOBAL_NULL_FIRST,  /* [PUSH_NULL if oparg & 1,] LOAD_GLOBAL(oparg >> 1) */
    CDY_DEC_GLOBAL_NULL_AFTER,  /* LOAD_GLOBAL(oparg >> 1)[, PUSH_NULL if oparg & 1] */
    CDY_DEC_ATTR_METHOD_BIT,    /* oparg & 1 ? LOAD_METHOD : LOAD_ATTR, name oparg >> 1 */
    CDY_DEC_COMPARE_SHIFT4,     /* COMPARE_OP(oparg >> 4) */
    CDY_DEC_COMPARE_SHIFT5,     /* COMPARE_OP(oparg >> 5)[, TO_BOOL if oparg & 16] */
    CDY_DEC_SUPER_ATTR,         /* LOAD_SUPER_ATTR(name oparg >> 2, flags oparg & 3) */
    CDY_DEC_INTRINSIC_1,        /* UNARY_POSITIVE / LIST_TO_TUPLE / CALL_INTRINSIC_1(oparg) */
    CDY_DEC_RETURN_CONST,       /* LOAD_CONST(oparg), RETURN_VALUE */
    CDY_DEC_SLICE,              /* BUILD_SLICE(2), sop (BINARY_SUBSCR / STORE_SUBSCR) */
    CDY_DEC_POP2,               /* POP_TOP, POP_TOP (3.12's END_FOR) */
    CDY_DEC_CALL_KW,            /* KW_NAMES_TOS, CALL(oparg) */
    CDY_DEC_FORMAT_SIMPLE,      /* FORMAT_VALUE(0) */
    CDY_DEC_FORMAT_WITH_SPEC,   /* FORMAT_VALUE(4) */
    CDY_DEC_FAST_OR_CELL,       /* LOAD_FAST, or LOAD_CLOSURE on a cell / free slot (3.13) */
    CDY_DEC_LOAD_LOAD,          /* LOAD_FAST(oparg >> 4), LOAD_FAST(oparg & 15) */
    CDY_DEC_STORE_STORE,        /* STORE_FAST(oparg >> 4), STORE_FAST(oparg & 15) */
    CDY_DEC_STORE_LOAD,         /* STORE_FAST(oparg >> 4), LOAD_FAST(oparg & 15) */
    CDY_DEC_SEND_KEEP,          /* SEND with arg2 1: exhausted, its value goes above the
                                   iterator (3.12+), target = next + oparg */
    CDY_DEC_END_SEND,           /* SWAP 2, POP_TOP (pop the item below the top) */
} cdy_dec_kind;

/* One semantic operation. */
typedef struct {
    int sop;        /* cdy_sop */
    int arg;        /* decoded operand: slot, name / const index, count, operator, flags */
    int arg2;       /* LOAD_SUPER_ATTR: its flags */
    int target;     /* code unit the branch goes to (-1: none); FOR_ITER: where an
                       exhausted loop continues */
} cdy_sinstr;

#define CDY_PV_MAX_SOPS 2

/* One raw instruction, decoded. */
typedef struct {
    int op;         /* raw opcode (CDY_PY_*), -1 past the end */
    int oparg;      /* with its EXTENDED_ARG prefixes applied */
    int start;      /* code unit of its first EXTENDED_ARG prefix (pc without one) */
    int pc;         /* code unit of the opcode */
    int next;       /* code unit of the next instruction (after the inline caches) */
    int jump;       /* code unit CPython's jump goes to (dis's target), -1: not a jump */
    int nsops;      /* 0 for an opcode the table does not know */
    cdy_sinstr sops[CDY_PV_MAX_SOPS];
} cdy_pv_instr;

/* The code being decoded: co_code's bytes (deoptimized: PyCode_GetCode). */
typedef struct {
    PyCodeObject *co;
    const unsigned char *code;
    int ncode;      /* code units */
} cdy_pv_code;

/* Decode the instruction whose first code unit (an EXTENDED_ARG prefix or
 * the opcode) is at pc; 0, or -1 when pc or an oparg runs past the end. */
int cdy_pv_decode(const cdy_pv_code *c, int pc, cdy_pv_instr *out);

/* ---- the raw opcode table --------------------------------------------------- */
/* Inline cache entries after opcode op (0 for an unknown op). */
int cdy_pv_caches(int op);
/* The compiler's stack effect of op with oparg (jump: the branch is taken)
 * into *effect; 0, or -1 for an opcode the table does not know. */
int cdy_pv_stack_effect(int op, int oparg, int jump, int *effect);
/* Opcode op's name, or NULL when the table does not know it. */
const char *cdy_pv_opname(int op);
/* +1 if op jumps forward (oparg code units after the next instruction),
 * -1 if backward, 0 if it is not a jump. */
int cdy_pv_jump_dir(int op);
/* The decoding kind of op (CDY_DEC_ARG for an unknown op). */
int cdy_pv_dec_kind(int op);

/* Add opcode_table, opcode_info, stack_effect, decode (and the assembler's
 * functions) to module _C; 0 or -1. */
int cdy_pyver_init(PyObject *module);
/* _C.opcode_table(): {opname: number} of this version's table. */
PyObject *cdy_pv_py_opcode_table(PyObject *self, PyObject *unused);
/* _C.opcode_info(): [(name, number, caches, semantic op, jump direction)]. */
PyObject *cdy_pv_py_opcode_info(PyObject *self, PyObject *unused);
/* _C.stack_effect(op, oparg, jump) from the table. */
PyObject *cdy_pv_py_stack_effect(PyObject *self, PyObject *args);
/* _C.decode(code) -> [(offset, opname, oparg, jump offset or None,
 *                      [(sop name, arg, arg2, target offset or None)])]. */
PyObject *cdy_pv_py_decode(PyObject *self, PyObject *code);

#endif
