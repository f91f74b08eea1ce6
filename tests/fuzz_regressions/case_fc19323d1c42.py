"""cdynamo fuzz regression (tools/fuzz.py), run by tests/test_fuzz.py.
Failure when found:"""
# AssertionError: eager raised NotImplementedError: "abs_cpu" not implemented for 'Bool'; cdynamo returned a result

#: a reason string marks a known cdynamo bug (xfail strict); None when fixed
XFAIL = None
INPUTS = [('int32', [5], 'contig', 2)]
SOURCE = 'INEXACT = False\n\n\ndef f(a0):\n    t1 = a0 > 0\n    return torch.abs(t1)\n'
