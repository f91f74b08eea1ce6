/* emit_311.c - CPython 3.11's instruction sequences (see emit.h). */
#include "pyver/emit.h"

#if CDY_PY == 311

/* See emit.h: LOAD_GLOBAL's bit 0 pushes a NULL first. */
int cdy_emit_load_global(cdy_asm *a, int name, int push_null)
{
    return cdy_asm_add(a, CDY_PY_LOAD_GLOBAL, (name << 1) | (push_null != 0));
}

/* See emit.h: LOAD_ATTR's oparg is the name. */
int cdy_emit_load_attr(cdy_asm *a, int name)
{
    return cdy_asm_add(a, CDY_PY_LOAD_ATTR, name);
}

/* See emit.h: [NULL, callable]. */
int cdy_emit_const_callable(cdy_asm *a, int c)
{
    return cdy_asm_add(a, CDY_PY_PUSH_NULL, 0) < 0 ? -1 : cdy_asm_add(a, CDY_PY_LOAD_CONST, c);
}

/* See emit.h: [KW_NAMES k;] PRECALL n; CALL n. */
int cdy_emit_call(cdy_asm *a, int nargs, int kwnames)
{
    if (kwnames >= 0 && cdy_asm_add(a, CDY_PY_KW_NAMES, kwnames) < 0)
        return -1;
    return cdy_asm_add(a, CDY_PY_PRECALL, nargs) < 0 ? -1 : cdy_asm_add(a, CDY_PY_CALL, nargs);
}

/* See emit.h: 3.11 has a FORWARD and a BACKWARD opcode per jump. */
int cdy_emit_jump_op(int op, int backward)
{
    static const int pairs[][2] = {
        {CDY_PY_JUMP_FORWARD, CDY_PY_JUMP_BACKWARD},
        {CDY_PY_JUMP_FORWARD, CDY_PY_JUMP_BACKWARD_NO_INTERRUPT},
        {CDY_PY_POP_JUMP_FORWARD_IF_FALSE, CDY_PY_POP_JUMP_BACKWARD_IF_FALSE},
        {CDY_PY_POP_JUMP_FORWARD_IF_TRUE, CDY_PY_POP_JUMP_BACKWARD_IF_TRUE},
        {CDY_PY_POP_JUMP_FORWARD_IF_NONE, CDY_PY_POP_JUMP_BACKWARD_IF_NONE},
        {CDY_PY_POP_JUMP_FORWARD_IF_NOT_NONE, CDY_PY_POP_JUMP_BACKWARD_IF_NOT_NONE},
    };
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++)
        if (op == pairs[i][0] || op == pairs[i][1])
            return pairs[i][backward != 0];
    int dir = cdy_pv_jump_dir(op);
    return dir == (backward ? -1 : 1) ? op : -1;
}

#endif
