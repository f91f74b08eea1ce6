/* emit.h - the instruction sequences that differ between Python versions,
 * for code rewriters building instruction lists (asm.h): one emitter per
 * version, emit_311.c, emit_312.c, emit_313.c (each compiles only for its
 * version).  Instructions that mean the same in every supported version
 * (LOAD_FAST, LOAD_CONST, STORE_FAST, BINARY_SUBSCR, STORE_SUBSCR,
 * STORE_ATTR, BUILD_TUPLE, BUILD_LIST, BUILD_CONST_KEY_MAP, POP_TOP,
 * RETURN_VALUE, RESUME) are appended directly: cdy_asm_add(a, CDY_PY_X, arg).
 * Each function returns the index of its last instruction, or -1 when out
 * of memory.                                                             */
#ifndef CDY_EMIT_H
#define CDY_EMIT_H

#include "pyver/asm.h"

/* Push globals[co_names[name]], with the call protocol's NULL (push_null). */
int cdy_emit_load_global(cdy_asm *a, int name, int push_null);
/* Replace the top with getattr(top, co_names[name]). */
int cdy_emit_load_attr(cdy_asm *a, int name);
/* Push the callable co_consts[c] as a call pair (with its NULL where this
 * version's CALL expects it). */
int cdy_emit_const_callable(cdy_asm *a, int c);
/* Call the call pair below nargs arguments; the last ones are keyword
 * arguments named by the tuple co_consts[kwnames] (-1: none). */
int cdy_emit_call(cdy_asm *a, int nargs, int kwnames);
/* The form of jump opcode op that jumps backward (backward = 1) or
 * forward; -1 when op has no form in that direction. */
int cdy_emit_jump_op(int op, int backward);

#endif
