/* emit_312.c - CPython 3.12's instruction sequences (see emit.h). */
#include "pyver/emit.h"

#if CDY_PY == 312

/* See emit.h: LOAD_GLOBAL's bit 0 pushes a NULL first. */
int cdy_emit_load_global(cdy_asm *a, int name, int push_null)
{
    return cdy_asm_add(a, CDY_PY_LOAD_GLOBAL, (name << 1) | (push_null != 0));
}

/* See emit.h: LOAD_ATTR's bit 0 is the method form, the name is oparg >> 1. */
int cdy_emit_load_attr(cdy_asm *a, int name)
{
    return cdy_asm_add(a, CDY_PY_LOAD_ATTR, name << 1);
}

/* See emit.h: [NULL, callable]. */
int cdy_emit_const_callable(cdy_asm *a, int c)
{
    return cdy_asm_add(a, CDY_PY_PUSH_NULL, 0) < 0 ? -1 : cdy_asm_add(a, CDY_PY_LOAD_CONST, c);
}

/* See emit.h: [KW_NAMES k;] CALL n (PRECALL is gone). */
int cdy_emit_call(cdy_asm *a, int nargs, int kwnames)
{
    if (kwnames >= 0 && cdy_asm_add(a, CDY_PY_KW_NAMES, kwnames) < 0)
        return -1;
    return cdy_asm_add(a, CDY_PY_CALL, nargs);
}

/* See emit.h: only unconditional jumps go both ways (conditional ones and
 * FOR_ITER / SEND forward only). */
int cdy_emit_jump_op(int op, int backward)
{
    if (op == CDY_PY_JUMP_FORWARD || op == CDY_PY_JUMP_BACKWARD)
        return backward ? CDY_PY_JUMP_BACKWARD : CDY_PY_JUMP_FORWARD;
    if (op == CDY_PY_JUMP_BACKWARD_NO_INTERRUPT)
        return backward ? op : CDY_PY_JUMP_FORWARD;
    return cdy_pv_jump_dir(op) == (backward ? -1 : 1) ? op : -1;
}

#endif
