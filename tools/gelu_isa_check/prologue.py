"""Write prologue.h: the math prologue cdynamo puts before every generated
kernel (its float32 GELU included), taken from a compiled F.gelu's
output_code.c.  Run where cdynamo runs (CPython 3.11 - 3.13); check.c includes it."""
import glob
import os
import sys
import tempfile

import torch
import torch.nn.functional as F

import cdynamo

MARK = "/* -- kernel -- */"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as d:
        cdynamo.config.debug = True
        cdynamo.config.debug_dir = d
        cdynamo.optimize(lambda x: F.gelu(x))(torch.randn(1000))
        src = open(glob.glob(os.path.join(d, "**", "output_code.c"), recursive=True)[0]).read()
    if MARK not in src:
        sys.exit("no kernel mark in the generated source")
    with open(os.path.join(here, "prologue.h"), "w") as f:
        f.write(src[:src.index(MARK)])
    print("wrote", os.path.join(here, "prologue.h"))


if __name__ == "__main__":
    main()
