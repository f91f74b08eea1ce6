"""Build cdynamo: the C extension cdynamo._C from csrc/**.c plus the Python package."""
import glob
import os
import sysconfig

from setuptools import Extension, setup

debug = os.environ.get("CDYNAMO_DEBUG_BUILD") == "1"
sanitize = os.environ.get("CDYNAMO_SANITIZE") == "1"

cflags = ["-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
          "-Wno-missing-field-initializers", "-fvisibility=hidden"]
ldflags = []
if debug or sanitize:
    cflags += ["-O0", "-g", "-DCDY_DEBUG_BUILD=1", "-UNDEBUG"]
else:
    cflags += ["-O2"]
if sanitize:
    cflags += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
    ldflags += ["-fsanitize=address,undefined"]

sources = sorted(glob.glob("csrc/**/*.c", recursive=True))

ext = Extension(
    "cdynamo._C",
    sources=sources,
    include_dirs=["csrc", sysconfig.get_paths()["include"], "/usr/include/x86_64-linux-gnu"],
    libraries=["ffi", "dl"],
    extra_compile_args=cflags,
    extra_link_args=ldflags,
    depends=sorted(glob.glob("csrc/**/*.h", recursive=True) +
                   glob.glob("csrc/**/*.def", recursive=True)),
)

setup(
    name="cdynamo",
    version="0.1.0",
    description="A JIT compiler for PyTorch programs on the CPU, written in C",
    package_dir={"": "python"},
    packages=["cdynamo"],
    ext_modules=[ext],
    python_requires=">=3.11,<3.14",
)
