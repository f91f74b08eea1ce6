"""cdynamo fuzz regression (tools/fuzz.py), run by tests/test_fuzz.py.
Failure when found:"""
# AssertionError: ('strides', (24, 4, 4, 1), (4, 12, 72, 1))

#: a reason string marks a known cdynamo bug (xfail strict); None when fixed
XFAIL = None
INPUTS = [('int16', [3, 6, 1, 4], 'expand', 746316291), ('int16', [3, 1, 1, 1], 'transpose', 757444054)]
SOURCE = 'INEXACT = False\n\n\ndef f(a0, a1):\n    t3 = torch.minimum(a1, a1 != a1)\n    t7 = t3.mul(a0)\n    return a1.minimum(t7)\n'
