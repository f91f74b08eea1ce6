"""cdynamo fuzz regression (tools/fuzz.py), run by tests/test_fuzz.py.
Failure when found:"""
# AssertionError: eager raised RuntimeError: Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.; cdynamo returned a result

#: a reason string marks a known cdynamo bug (xfail strict); None when fixed
XFAIL = None
INPUTS = [('int32', [5], 'contig', 1)]
SOURCE = 'INEXACT = False\n\n\ndef f(a0):\n    t1 = a0 > 0\n    return t1 - a0\n'
