/* asm.h - the instruction-list assembler: a code object of this Python
 * version <-> a list of instructions, and back.
 *
 * Contract (what a code rewriter - the transformed code of a cache entry,
 * resume functions after a graph break - may rely on):
 *
 *  - An instruction is a raw opcode of this version (CDY_PY_*), never
 *    EXTENDED_ARG or CACHE: the encoder writes the EXTENDED_ARG prefixes an
 *    oparg needs and the zeroed inline cache entries the table says
 *    (opcodes_3xx.def).  The list is in code order.
 *  - A jump names its target by index in the list (`target`); its oparg and
 *    its direction are computed at encoding: 3.11's FORWARD / BACKWARD forms
 *    and JUMP_FORWARD / JUMP_BACKWARD are chosen by where the target lies
 *    (emit.h's cdy_emit_jump_op); a jump whose opcode cannot go that way
 *    (a conditional jump backward on 3.12+, FOR_ITER backward) fails to
 *    encode with ValueError.  Offsets are iterated until every EXTENDED_ARG
 *    count is stable.
 *  - Each instruction carries its source position (line, end_line, col,
 *    end_col; line -1: none, col / end_col -1: unknown) and its exception
 *    handler (index of the handler instruction, -1: none) with the stack
 *    depth to unwind to and whether lasti is pushed.  The encoder writes
 *    co_linetable (Objects/locations.md: the same format in 3.11 - 3.13) and
 *    co_exceptiontable (Objects/exception_handling_notes.txt: varint
 *    entries, also the same), merging runs of equal entries as CPython does.
 *  - co_stacksize is computed by flow analysis from the table's stack
 *    effects, following jumps (the taken effect), fall-through (not after
 *    an unconditional jump, return or raise) and exception handlers (their
 *    depth + lasti + the exception).  An instruction reached at two depths
 *    fails with ValueError.
 *  - Everything else of the code object (names, constants, locals, flags,
 *    argument counts, qualname, first line) comes from a template code
 *    object through code.replace(), overridden by the caller's keyword
 *    arguments.
 *
 * Decoding then encoding a code object gives an equivalent code object:
 * the same instructions, positions, exception table and stack size
 * (tests/test_asm.py round-trips every function of several stdlib and
 * torch.nn modules and runs them).                                      */
#ifndef CDY_ASM_H
#define CDY_ASM_H

#include "pyver/pyver.h"

typedef struct {
    int op;             /* raw opcode (CDY_PY_*) */
    int arg;            /* oparg (a jump's is recomputed from target) */
    int target;         /* jumps: index of the target instruction; else -1 */
    int line, end_line; /* -1: no position */
    int col, end_col;   /* -1: unknown */
    int handler;        /* index of the exception handler instruction; -1: none */
    int depth;          /* the handler's stack depth */
    int lasti;          /* 1: the handler gets the offset of the raising instruction */
} cdy_asm_ins;

typedef struct {
    cdy_asm_ins *ins;
    int n, cap;
    int failed;         /* an append ran out of memory */
} cdy_asm;

/* Release a's instructions (a stays usable, empty). */
void cdy_asm_free(cdy_asm *a);
/* Append op(arg) with no position and no handler; the new instruction's
 * index, or -1 when out of memory (a->failed is set; later appends fail too). */
int cdy_asm_add(cdy_asm *a, int op, int arg);
/* Append jump op to the instruction at index target (it may not exist yet). */
int cdy_asm_add_jump(cdy_asm *a, int op, int target);
/* Open n empty (NOP) slots before index at: every target and handler index
 * at or after `at` moves by n (so a jump to the old instruction at `at`
 * still reaches it, past the new slots); 0 or -1 (no memory). */
int cdy_asm_insert(cdy_asm *a, int at, int n);
/* Give instructions [from, a->n) position (line, end_line, col, end_col). */
void cdy_asm_set_pos(cdy_asm *a, int from, int line, int end_line, int col, int end_col);

/* Decode co into *a (appended to it); 0, or -1 with a Python exception. */
int cdy_asm_from_code(PyCodeObject *co, cdy_asm *a);
/* The stack size a needs (flow analysis, see the contract) for code with
 * flags co_flags (a generator's code starts with a value on the stack
 * through 3.12); -1 with ValueError. */
int cdy_asm_stacksize(const cdy_asm *a, int co_flags);
/* Encode a into a new code object: like.replace(co_code=..., co_linetable=...,
 * co_exceptiontable=..., co_stacksize=..., **kw) (kw may be NULL; a
 * co_stacksize in kw wins).  New reference, or NULL with an exception. */
PyObject *cdy_asm_to_code(const cdy_asm *a, PyCodeObject *like, PyObject *kw);

/* _C.asm_decode(code) -> [(opname, arg, target, line, end_line, col, end_col,
 * handler, depth, lasti)]. */
PyObject *cdy_asm_py_decode(PyObject *self, PyObject *code);
/* _C.asm_encode(instructions, like, **kw) -> code: the inverse of asm_decode
 * (opnames or numbers; arg of a jump ignored). */
PyObject *cdy_asm_py_encode(PyObject *self, PyObject *args, PyObject *kw);

#endif
